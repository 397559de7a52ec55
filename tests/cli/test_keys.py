"""``slipway endpoint keys``: create (printed once), list, revoke, disable, enable, usage — against a live server."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from billing import ledger
from inference import services
from inference.models import ApiKey, KeyUsage
from teams.models import hash_token
from tests.inference.conftest import endpoint_payload


@pytest.fixture
def endpoint(member, team, ep_quota):
    return services.create_endpoint(member, team, endpoint_payload())


def test_create_prints_the_key_once_and_list_never(cli, endpoint):
    created = cli("endpoint", "keys", "create", "llama-chat", "--name", "app", "--expires", "30d", "--rpm", "60")
    assert created.exit_code == 0, created.output
    lines = created.stdout.splitlines()
    raw = lines[-1]
    key = ApiKey.objects.get()
    assert hash_token(raw) == key.digest and lines[0] == f"key {key.pk} app for endpoint llama-chat: {key.prefix}…"
    assert "will not be shown again" in created.stderr
    assert key.requests_per_minute == 60 and timedelta(days=29) < key.expires_at - datetime.now(UTC) <= timedelta(days=30)
    listed = cli("endpoint", "keys", "list", str(endpoint.pk))
    assert listed.exit_code == 0 and "app" in listed.stdout and key.prefix in listed.stdout
    assert raw not in listed.stdout and raw[12:] not in listed.stdout
    as_json = cli("endpoint", "keys", "list", "--team", "ml-research", "-o", "json")
    assert raw not in as_json.stdout and '"prefix"' in as_json.stdout


def test_revoke_disable_enable_by_name_or_id_and_team_keys(cli, endpoint):
    assert cli("endpoint", "keys", "create", "--team", "ml-research", "--name", "everywhere").exit_code == 0
    key = ApiKey.objects.get()
    assert key.endpoint is None
    disabled = cli("endpoint", "keys", "disable", "--team", "ml-research", "everywhere")
    assert disabled.exit_code == 0 and disabled.stdout.strip() == f"key {key.pk} everywhere: disabled"
    enabled = cli("endpoint", "keys", "enable", "llama-chat", str(key.pk))  # a team key, reached by its endpoint
    assert enabled.exit_code == 0 and enabled.stdout.strip().endswith("active")
    revoked = cli("endpoint", "keys", "revoke", "llama-chat", key.prefix)
    assert revoked.exit_code == 0 and revoked.stdout.strip() == f"key {key.pk}: revoked"
    key.refresh_from_db()
    assert key.revoked_at is not None
    again = cli("endpoint", "keys", "enable", "--team", "ml-research", str(key.pk))
    assert again.exit_code != 0 and "revoked" in again.output


def test_refusals_are_messages_not_tracebacks(cli, endpoint, other_team):
    taken = cli("endpoint", "keys", "create", "llama-chat", "--name", "app")
    assert taken.exit_code == 0
    dup = cli("endpoint", "keys", "create", "llama-chat", "--name", "app")
    assert dup.exit_code != 0 and "name" in dup.output and "already has a key" in dup.output
    past = cli("endpoint", "keys", "create", "llama-chat", "--name", "old", "--expires", "2001-01-01T00:00:00Z")
    assert past.exit_code != 0 and "expires_at" in past.output
    both = cli("endpoint", "keys", "list", "llama-chat", "--team", "ml-research")
    assert both.exit_code == 2 and "not both" in both.output
    neither = cli("endpoint", "keys", "revoke", "1")
    assert neither.exit_code == 2 and "ENDPOINT KEY" in neither.output
    other = cli("endpoint", "keys", "list", "--team", other_team.slug)
    assert other.exit_code != 0 and "Traceback" not in other.output
    unknown = cli("endpoint", "keys", "revoke", "llama-chat", "nope")
    assert unknown.exit_code != 0 and "no key named nope" in unknown.output
    assert ApiKey.objects.count() == 1


def test_usage_per_key_as_a_table_and_csv(cli, member, team, endpoint):
    cli("endpoint", "keys", "create", "llama-chat", "--name", "app")
    key = ApiKey.objects.get()
    hour = datetime(2026, 11, 2, 9, tzinfo=UTC)
    ledger.record_usage(team, endpoint.ref, endpoint.flavor, member, hour, hour + timedelta(hours=1), 1, False)
    KeyUsage.objects.create(key=key, endpoint=endpoint, team=team, hour=hour, requests_2xx=3, requests_4xx=1,
                            input_tokens=7, output_tokens=8)
    shown = cli("endpoint", "keys", "usage", "llama-chat", "--since", "2026-11-02", "--until", "2026-11-02")
    assert shown.exit_code == 0, shown.output
    assert "app" in shown.stdout and "4.10" in shown.stdout and "Ledger cost" in shown.stdout
    as_csv = cli("endpoint", "keys", "usage", "--team", "ml-research", "--since", "2026-11-02", "--until",
                 "2026-11-02", "--csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [(r["name"], r["requests"], r["tokens"], r["cost"]) for r in rows] == [("app", "4", "15", "4.10")]
