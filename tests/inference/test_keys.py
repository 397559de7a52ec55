"""API keys' services (inference.keys): who may create and change them, validation, audit, the moves."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.utils import timezone

from inference import keys
from inference.models import ApiKey, InferenceEndpoint
from teams.models import AuditEvent, Role, hash_token
from tests.factories import add_member, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint(create):
    return create()


@pytest.fixture
def teammate(team):
    user = make_user("tom")
    add_member(team, user, Role.MEMBER)
    return user


def test_a_key_is_returned_once_and_stored_as_its_digest(member, team, endpoint):
    key, raw = keys.create_key(member, team, endpoint, "  app  ", requests_per_minute=60)
    assert raw.startswith("sw-") and len(raw) == 3 + 43
    assert key.prefix == raw[:12] and key.digest == hash_token(raw)
    assert key.name == "app" and key.endpoint == endpoint and key.created_by == member
    assert key.updated_at == key.created_at and key.requests_per_minute == 60 and key.tokens_per_minute is None
    stored = ApiKey.objects.values().get(pk=key.pk)
    assert raw not in {str(v) for v in stored.values()}
    assert ApiKey.objects.usable().filter(digest=hash_token(raw)).exists()
    event = AuditEvent.objects.get(action="api_key_created")
    assert event.team == team and event.actor == member and event.details["prefix"] == key.prefix
    assert raw not in str(event.details)


def test_two_keys_never_share_a_secret(member, team):
    raws = {keys.create_key(member, team, None, f"k{i}")[1] for i in range(20)}
    assert len(raws) == 20


@pytest.mark.parametrize(("fields", "field"), [
    ({"name": ""}, "name"), ({"name": "   "}, "name"), ({"name": "x" * 101}, "name"), ({"name": "a\nb"}, "name"),
    ({"name": 7}, "name"),
    ({"expires_at": "past"}, "expires_at"), ({"expires_at": "naive"}, "expires_at"),
    ({"requests_per_minute": 0}, "requests_per_minute"), ({"requests_per_minute": -1}, "requests_per_minute"),
    ({"tokens_per_minute": 2**31}, "tokens_per_minute"), ({"tokens_per_minute": 1.5}, "tokens_per_minute"),
    ({"tokens_per_minute": True}, "tokens_per_minute"),
])
def test_bad_input_is_a_field_error_and_writes_nothing(member, team, endpoint, fields, field):
    now = timezone.now()
    values = {"name": "ok", **fields}
    if values.get("expires_at") == "past":
        values["expires_at"] = now - timedelta(seconds=1)
    elif values.get("expires_at") == "naive":
        values["expires_at"] = (now + timedelta(days=1)).replace(tzinfo=None)
    with pytest.raises(ValidationError) as exc:
        keys.create_key(member, team, endpoint, values.pop("name"), **values)
    assert field in exc.value.message_dict
    assert not ApiKey.objects.exists() and not AuditEvent.objects.filter(action="api_key_created").exists()


def test_names_are_unique_among_the_teams_live_keys(member, teammate, team, endpoint):
    key, _ = keys.create_key(member, team, endpoint, "app")
    with pytest.raises(ValidationError) as exc:
        keys.create_key(teammate, team, None, "app")
    assert "name" in exc.value.message_dict
    keys.revoke_key(member, key)
    assert keys.create_key(teammate, team, None, "app")[0].name == "app"  # a revoked key's name is free again


def test_an_ended_endpoint_takes_no_new_key(member, team, endpoint):
    for state in ("deleted", "failed", "deleting"):
        InferenceEndpoint.objects.filter(pk=endpoint.pk).update(state=state)
        with pytest.raises(ValidationError) as exc:
            keys.create_key(member, team, endpoint, "late")
        assert "endpoint" in exc.value.message_dict
    assert not ApiKey.objects.exists()


def test_who_may_create(member, viewer, team_admin, outsider, staff, team, other_team, endpoint):
    assert keys.create_key(team_admin, team, endpoint, "admin's")[0].pk
    assert keys.create_key(member, team.slug, None, "member's team key")[0].endpoint is None
    with pytest.raises(PermissionDenied):
        keys.create_key(viewer, team, endpoint, "viewer's")
    with pytest.raises(Http404):
        keys.create_key(outsider, team, None, "outsider's")
    with pytest.raises(Http404):
        keys.create_key(staff, team, None, "staff's")  # staff revoke from the console; they create none
    with pytest.raises(Http404):  # another team's endpoint, named under one's own team
        keys.create_key(outsider, other_team, endpoint, "sneaky")
    assert ApiKey.objects.count() == 2


@pytest.mark.parametrize("action", ["revoke_key", "disable_key"])
def test_the_permission_matrix_of_changes(member, teammate, viewer, team_admin, outsider, staff, team, endpoint,
                                          action):
    mine, _ = keys.create_key(member, team, endpoint, "mine")
    move = getattr(keys, action)
    with pytest.raises(PermissionDenied):
        move(teammate, mine)  # a member manages their own keys only
    with pytest.raises(PermissionDenied):
        move(viewer, mine)
    with pytest.raises(Http404):
        move(outsider, mine)
    with pytest.raises(Http404):
        move(staff, mine)  # staff outside the team: only from the admin console
    mine.refresh_from_db()
    assert mine.revoked_at is None and mine.disabled_at is None
    assert move(member, mine).updated_at > mine.created_at
    theirs, _ = keys.create_key(teammate, team, None, "theirs")
    assert move(team_admin, theirs)  # admins manage every key of the team
    other, _ = keys.create_key(teammate, team, None, "other")
    assert move(staff, other, staff=True)  # the admin console: any team's key
    assert AuditEvent.objects.filter(action=f"api_key_{action.split('_')[0]}d").count() == 3
    assert AuditEvent.objects.filter(details__as_staff=True).count() == 1


def test_disable_and_enable_move_updated_at_and_are_audited_once(member, team, endpoint):
    key, _ = keys.create_key(member, team, endpoint, "app")
    created = key.updated_at
    key = keys.disable_key(member, key)
    assert key.disabled_at is not None and key.updated_at > created
    assert not ApiKey.objects.usable().filter(pk=key.pk).exists() and keys.key_state(key) == "disabled"
    again = keys.disable_key(member, key)  # already disabled: as it was, no second audit row
    assert again.updated_at == key.updated_at
    key = keys.enable_key(member, key)
    assert key.disabled_at is None and ApiKey.objects.usable().filter(pk=key.pk).exists()
    assert keys.enable_key(member, key).updated_at == key.updated_at
    assert [e.action for e in AuditEvent.objects.filter(action__startswith="api_key_").order_by("pk")] == [
        "api_key_created", "api_key_disabled", "api_key_enabled"]


def test_a_revoked_key_stays_revoked(member, team, endpoint):
    key, _ = keys.create_key(member, team, endpoint, "app")
    key = keys.revoke_key(member, key)
    revoked_at = key.revoked_at
    assert keys.revoke_key(member, key).revoked_at == revoked_at  # idempotent
    for move in (keys.disable_key, keys.enable_key):
        with pytest.raises(keys.KeyConflict):
            move(member, key)
    key.refresh_from_db()
    assert key.revoked_at == revoked_at and key.disabled_at is None and keys.key_state(key) == "revoked"
    assert AuditEvent.objects.filter(action="api_key_revoked").count() == 1


def test_an_expired_key_is_not_usable(member, team):
    key, _ = keys.create_key(member, team, None, "short", expires_at=timezone.now() + timedelta(hours=1))
    later = timezone.now() + timedelta(hours=2)
    assert keys.key_state(key, later) == "expired"
    assert not ApiKey.objects.usable(now=later).filter(pk=key.pk).exists()


def test_an_endpoints_keys_are_its_own_and_its_teams(member, team, endpoint, create):
    other_endpoint = create(name="other")
    own, _ = keys.create_key(member, team, endpoint, "own")
    team_key, _ = keys.create_key(member, team, None, "team")
    keys.create_key(member, team, other_endpoint, "elsewhere")
    assert set(keys.keys_of_endpoint(endpoint)) == {own, team_key}
    assert keys.keys_of_team(team).count() == 3
    with pytest.raises(Http404):
        keys.get_key(member, ApiKey.objects.get(name="elsewhere").pk, endpoint=endpoint)


def test_a_key_made_or_revoked_on_a_host_whose_clock_runs_behind_still_reaches_a_running_gateway(
        member, team, endpoint, monkeypatch):
    from gateway.keys import OVERLAP_SECONDS, KeyCache

    cache = KeyCache()
    keys.create_key(member, team, endpoint, "first")
    assert cache.refresh() == 1  # the gateway's mark: the newest updated_at it read
    at = timezone.now()
    behind = at - timedelta(seconds=OVERLAP_SECONDS * 12)
    # A portal host a minute behind (or a create that waited that long for the team's lock): its stamps, had they been
    # its own clock's, would fall before the mark less the overlap, and the refresh would never read them.
    monkeypatch.setattr(keys.timezone, "now", lambda: behind)
    key, raw = keys.create_key(member, team, endpoint, "late")
    cache.refresh()
    assert cache.check(f"Bearer {raw}", team.pk, endpoint.pk, at) is not None
    keys.revoke_key(member, key)
    cache.refresh()
    assert cache.check(f"Bearer {raw}", team.pk, endpoint.pk, at) is None
