"""The admin console's API keys: staff see every team's (never a secret), revoke or disable them, confirmed first."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from inference import keys
from teams.models import AuditEvent
from tests.factories import make_user

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/inference/apikey/"


@pytest.fixture
def key(member, team, create):
    return keys.create_key(member, team, create(), "app")


def test_staff_see_every_teams_keys_without_their_secret(staff_client, key):
    api_key, raw = key
    page = staff_client.get(CHANGELIST).content.decode()
    assert f"{api_key.prefix}…" in page and "ML Research" in page and ">active<" in page
    detail = staff_client.get(f"{CHANGELIST}{api_key.pk}/change/").content.decode()
    assert raw not in page and raw not in detail and api_key.digest not in detail


@pytest.mark.parametrize(("action", "field"), [("revoke_selected", "revoked_at"), ("disable_selected", "disabled_at")])
def test_staff_revoke_or_disable_after_confirming(staff_client, key, action, field):
    api_key, _raw = key
    asked = staff_client.post(CHANGELIST, {"action": action, "_selected_action": [api_key.pk]})
    assert asked.status_code == 200 and "Yes, I'm sure" in asked.content.decode()
    api_key.refresh_from_db()
    assert getattr(api_key, field) is None  # nothing until confirmed
    done = staff_client.post(CHANGELIST, {"action": action, "_selected_action": [api_key.pk], "confirmed": "yes"},
                             follow=True)
    assert done.status_code == 200 and "app (ml-research)" in done.content.decode()
    api_key.refresh_from_db()
    assert getattr(api_key, field) is not None
    event = AuditEvent.objects.get(action=f"api_key_{action.split('_')[0]}d")
    assert event.details["as_staff"] is True and event.actor.username == "sam"


def test_staff_without_the_permission_change_nothing(client, key):
    api_key, _raw = key
    reader = make_user("rita")
    reader.is_staff = True
    reader.save(update_fields=["is_staff"])
    reader.user_permissions.add(Permission.objects.get(codename="view_apikey"))
    client.force_login(reader)
    response = client.post(CHANGELIST, {"action": "revoke_selected", "_selected_action": [api_key.pk],
                                        "confirmed": "yes"}, follow=True)
    assert "lacks the permission inference.change_apikey" in response.content.decode()
    api_key.refresh_from_db()
    assert api_key.revoked_at is None and not AuditEvent.objects.filter(action="api_key_revoked").exists()
