"""API keys in the portal: the endpoint page's Keys section, the team's keys page, the key buttons, the Usage card."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import ledger
from billing.models import UsageRecord
from core.formatting import format_money
from inference import keys
from inference.models import ApiKey, KeyUsage
from teams.models import AuditEvent, hash_token

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def endpoint(create):
    return create()


def test_the_endpoint_page_loads_its_keys_section(client, member, endpoint):
    client.force_login(member)
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    assert f'hx-get="/endpoints/{endpoint.pk}/keys/"' in page and 'hx-trigger="load"' in page
    section = client.get(f"/endpoints/{endpoint.pk}/keys/", **HTMX)
    assert section.status_code == 200
    html = section.content.decode()
    assert html.lstrip().startswith('<section class="card" id="keys"') and "<html" not in html
    assert "No API keys yet." in html and "Create a key" in html


def test_creating_shows_the_key_once_and_the_list_never_shows_it(client, member, endpoint):
    client.force_login(member)
    response = client.post(f"/endpoints/{endpoint.pk}/keys/", {"name": "chat app", "requests_per_minute": "60"},
                           **HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    key = ApiKey.objects.get()
    raw = html.split('<pre class="token" id="new-key">', 1)[1].split("</pre>", 1)[0]
    assert hash_token(raw) == key.digest and raw.startswith("sw-")
    assert "it will not be shown again" in html and 'data-copy="new-key"' in html
    assert html.count(raw) == 1 and f"<code>{key.prefix}…</code>" in html and "60 req/min" in html
    for path in (f"/endpoints/{endpoint.pk}/keys/", "/teams/ml-research/keys/", f"/endpoints/{endpoint.pk}/"):
        page = client.get(path).content.decode()
        assert raw not in page and raw[12:] not in page, path
    assert "chat app" in client.get("/teams/ml-research/keys/").content.decode()


def test_a_refused_key_is_a_form_error_and_nothing_is_written(client, member, endpoint):
    client.force_login(member)
    keys.create_key(member, endpoint.team, endpoint, "taken")
    past = (timezone.localtime() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    for data, words in [({"name": "taken"}, "already has a key named"), ({"name": "new", "expires_at": past},
                                                                          "Must be in the future."),
                        ({"name": "new", "tokens_per_minute": "0"}, "greater than or equal to 1")]:
        response = client.post(f"/endpoints/{endpoint.pk}/keys/", data, **HTMX)
        assert response.status_code == 400 and words in response.content.decode(), data
        assert 'id="new-key"' not in response.content.decode()
    assert ApiKey.objects.count() == 1


def test_buttons_revoke_disable_enable_with_confirmation(client, member, viewer, endpoint):
    key, _raw = keys.create_key(member, endpoint.team, endpoint, "app")
    client.force_login(viewer)
    section = client.get(f"/endpoints/{endpoint.pk}/keys/", **HTMX).content.decode()
    assert "Revoke" not in section and "Create a key" not in section  # a viewer reads only
    assert client.post(f"/keys/{key.pk}/revoke/", **HTMX).status_code == 403
    client.force_login(member)
    section = client.get(f"/endpoints/{endpoint.pk}/keys/", **HTMX).content.decode()
    assert 'hx-confirm="Revoke key app?' in section and 'hx-confirm="Disable key app?' in section
    row = client.post(f"/keys/{key.pk}/disable/", **HTMX).content.decode()
    assert row.lstrip().startswith(f'<tr id="key-{key.pk}"') and ">disabled<" in row and "Enable" in row
    row = client.post(f"/keys/{key.pk}/enable/", **HTMX).content.decode()
    assert ">active<" in row
    response = client.post(f"/keys/{key.pk}/revoke/")
    assert response.status_code == 302 and response["Location"] == f"/endpoints/{endpoint.pk}/keys/"
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert AuditEvent.objects.filter(action__in=["api_key_disabled", "api_key_enabled", "api_key_revoked"]).count() == 3


def test_the_team_keys_page_is_linked_from_the_team_page_and_creates_team_keys(client, member, endpoint):
    client.force_login(member)
    assert 'href="/teams/ml-research/keys/"' in client.get("/teams/ml-research/").content.decode()
    response = client.post("/teams/ml-research/keys/", {"name": "everywhere"})
    assert response.status_code == 200 and 'id="new-key"' in response.content.decode()
    assert ApiKey.objects.get().endpoint is None
    # A team key is valid for every endpoint: the endpoint's section lists it too.
    assert "everywhere" in client.get(f"/endpoints/{endpoint.pk}/keys/", **HTMX).content.decode()


def test_usage_per_key_this_month_on_the_endpoint_and_usage_pages(client, member, team, endpoint):
    key, _raw = keys.create_key(member, team, endpoint, "app")
    # This month's first half hour (or what of it has passed): its cost is the whole of the month's.
    start = ledger.month_start()
    ledger.record_usage(team, endpoint.ref, endpoint.flavor, member, start,
                        min(start + timedelta(minutes=30), timezone.now()), 1, False)
    KeyUsage.objects.create(key=key, endpoint=endpoint, team=team, hour=ledger.usage_hour(start), requests_2xx=9,
                            input_tokens=10, output_tokens=20)
    cost = format_money(UsageRecord.objects.get(ref=endpoint.ref).cost.quantize(Decimal("0.01")))
    client.force_login(member)
    section = client.get(f"/endpoints/{endpoint.pk}/keys/", **HTMX).content.decode()
    usage = section[section.index('id="key-usage"'):]
    assert "app" in usage and cost in usage and ">9<" in usage and "10 / 20" in usage
    page = client.get("/usage/").content.decode()
    card = page[page.index('id="usage-keys"'):]
    assert "app" in card and cost in card and ">30<" in card
