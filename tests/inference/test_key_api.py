"""The API keys' REST API (docs/api.md "API keys"): the contract, status codes, tenancy, usage as JSON and CSV."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from billing import ledger
from inference.models import ApiKey, KeyUsage
from teams.models import AuditEvent, hash_token

pytestmark = pytest.mark.django_db

FIELDS = {"id", "name", "prefix", "endpoint", "endpoint_name", "team", "created_by", "created_at", "updated_at",
          "expires_at", "disabled", "disabled_at", "revoked_at", "last_used_at", "state", "requests_per_minute",
          "tokens_per_minute"}


@pytest.fixture
def endpoint(create):
    return create()


def keys_path(endpoint) -> str:
    return f"/api/v1/endpoints/{endpoint.pk}/keys/"


def test_creating_a_key_answers_it_once(api, endpoint):
    expires = (timezone.now() + timedelta(days=30)).isoformat()
    response = api.post(keys_path(endpoint), {"name": "app", "expires_at": expires, "requests_per_minute": 100},
                        format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert set(body) == FIELDS | {"key"}
    raw = body["key"]
    assert raw.startswith("sw-") and body["prefix"] == raw[:12]
    assert (body["endpoint"], body["team"], body["created_by"]) == (endpoint.pk, "ml-research", "mia")
    assert (body["disabled"], body["revoked_at"], body["last_used_at"], body["state"]) == (False, None, None, "active")
    assert body["requests_per_minute"] == 100 and body["tokens_per_minute"] is None
    assert ApiKey.objects.get(pk=body["id"]).digest == hash_token(raw)

    listed = api.get(keys_path(endpoint))
    assert listed.status_code == 200 and listed.json()["count"] == 1
    assert set(listed.json()["results"][0]) == FIELDS and raw not in listed.content.decode()
    one = api.get(f"{keys_path(endpoint)}{body['id']}/")
    assert one.status_code == 200 and set(one.json()) == FIELDS and raw not in one.content.decode()


def test_revoke_disable_enable(api, endpoint):
    key = api.post(keys_path(endpoint), {"name": "app"}, format="json").json()
    path = f"{keys_path(endpoint)}{key['id']}/"
    disabled = api.post(f"{path}disable/")
    assert disabled.status_code == 200 and disabled.json()["disabled"] and disabled.json()["state"] == "disabled"
    enabled = api.post(f"{path}enable/")
    assert enabled.status_code == 200 and not enabled.json()["disabled"]
    assert api.delete(path).status_code == 204
    assert api.delete(path).status_code == 204  # revoked already: as it was
    assert api.post(f"{path}enable/").status_code == 409
    assert api.get(path).json()["state"] == "revoked"
    assert AuditEvent.objects.filter(action__startswith="api_key_").count() == 4


def test_team_keys(api, endpoint, viewer, api_client_for):
    created = api.post("/api/v1/teams/ml-research/keys/", {"name": "everywhere", "tokens_per_minute": 5000},
                       format="json")
    assert created.status_code == 201 and created.json()["endpoint"] is None and created.json()["key"]
    api.post(keys_path(endpoint), {"name": "one"}, format="json")
    listed = api.get("/api/v1/teams/ml-research/keys/").json()
    assert {k["name"] for k in listed["results"]} == {"everywhere", "one"}
    # A team key is valid for every endpoint of the team: the endpoint lists it too.
    assert {k["name"] for k in api.get(keys_path(endpoint)).json()["results"]} == {"everywhere", "one"}
    path = f"/api/v1/teams/ml-research/keys/{created.json()['id']}/"
    assert api.post(f"{path}disable/").json()["disabled"]
    assert api.post(f"{path}enable/").status_code == 200
    reader = api_client_for(viewer)
    assert reader.get("/api/v1/teams/ml-research/keys/").status_code == 200
    assert reader.post("/api/v1/teams/ml-research/keys/", {"name": "v"}, format="json").status_code == 403
    assert reader.delete(path).status_code == 403
    assert api.delete(path).status_code == 204


@pytest.mark.parametrize(("body", "field"), [
    ({}, "name"), ({"name": ""}, "name"), ({"name": "x" * 101}, "name"),
    ({"name": "a", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"), ({"name": "a", "expires_at": "soon"},
                                                                             "expires_at"),
    ({"name": "a", "requests_per_minute": 0}, "requests_per_minute"),
    ({"name": "a", "tokens_per_minute": "many"}, "tokens_per_minute"),
    ({"name": "a", "tokens_per_minute": 2**31}, "tokens_per_minute"),
])
def test_bad_input_is_a_400_with_field_errors_and_writes_nothing(api, endpoint, body, field):
    response = api.post(keys_path(endpoint), body, format="json")
    assert response.status_code == 400 and field in response.json()["errors"]
    assert not ApiKey.objects.exists()


def test_a_duplicate_name_and_an_ended_endpoint_are_400s(api, endpoint):
    assert api.post(keys_path(endpoint), {"name": "app"}, format="json").status_code == 201
    assert "name" in api.post("/api/v1/teams/ml-research/keys/", {"name": "app"}, format="json").json()["errors"]
    endpoint.state = "deleted"
    endpoint.save(update_fields=["state"])
    refused = api.post(keys_path(endpoint), {"name": "late"}, format="json")
    assert refused.status_code == 400 and "endpoint" in refused.json()["errors"]


def test_another_teams_keys_and_endpoints_are_404(api, endpoint, outsider, api_client_for):
    key = api.post(keys_path(endpoint), {"name": "app"}, format="json").json()
    stranger = api_client_for(outsider)
    for method, path in [("get", keys_path(endpoint)), ("post", keys_path(endpoint)),
                         ("get", f"{keys_path(endpoint)}{key['id']}/"), ("delete", f"{keys_path(endpoint)}{key['id']}/"),
                         ("post", f"{keys_path(endpoint)}{key['id']}/disable/"),
                         ("get", f"{keys_path(endpoint)}usage/"),
                         ("get", "/api/v1/teams/ml-research/keys/"), ("post", "/api/v1/teams/ml-research/keys/"),
                         ("delete", f"/api/v1/teams/ml-research/keys/{key['id']}/"),
                         ("get", "/api/v1/teams/ml-research/keys/usage/")]:
        assert getattr(stranger, method)(path, {"name": "x"} if method == "post" else None,
                                         format="json").status_code == 404, (method, path)
    # Their own team's URL with our key's id: still 404.
    assert stranger.delete(f"/api/v1/teams/vision/keys/{key['id']}/").status_code == 404
    assert ApiKey.objects.get(pk=key["id"]).revoked_at is None


def test_a_member_manages_their_own_keys_an_admin_all(api, endpoint, team, team_admin, api_client_for):
    from tests.factories import add_member, make_user

    teammate = make_user("tom")
    add_member(team, teammate, "member")
    key = api.post(keys_path(endpoint), {"name": "mine"}, format="json").json()
    path = f"{keys_path(endpoint)}{key['id']}/"
    assert api_client_for(teammate).delete(path).status_code == 403
    assert api_client_for(teammate).post(f"{path}disable/").status_code == 403
    assert api_client_for(team_admin).post(f"{path}disable/").status_code == 200
    assert api_client_for(team_admin).delete(path).status_code == 204


def _usage_world(member, team, endpoint):
    from inference import keys

    key, _ = keys.create_key(member, team, endpoint, "app")
    hour = datetime(2026, 11, 2, 9, tzinfo=UTC)
    ledger.record_usage(team, endpoint.ref, endpoint.flavor, member, hour, hour + timedelta(minutes=90), 1, False)
    KeyUsage.objects.create(key=key, endpoint=endpoint, team=team, hour=hour, requests_2xx=5, requests_5xx=1,
                            input_tokens=40, output_tokens=60)
    return key, hour


def test_usage_per_key_as_json_and_csv(api, member, team, endpoint):
    key, _hour = _usage_world(member, team, endpoint)
    params = {"since": "2026-11-02", "until": "2026-11-02"}
    body = api.get(f"{keys_path(endpoint)}usage/", params).json()
    assert body["ledger_cost"] == "6.15"  # 1.5 h at 4.10
    totals = {t["key_id"]: t for t in body["totals"]}
    assert totals[key.pk]["cost"] == "4.10" and totals[key.pk]["requests"] == 6 and totals[key.pk]["tokens"] == 100
    assert totals[None]["name"] == "unattributed (idle)" and totals[None]["cost"] == "2.05"
    assert [(h["hour"][:13], h["key_id"]) for h in body["hours"]] == [("2026-11-02T09", key.pk), ("2026-11-02T10", None)]
    for response in (api.get(f"{keys_path(endpoint)}usage/", {**params, "format": "csv"}),
                     api.get(f"{keys_path(endpoint)}usage/", params, HTTP_ACCEPT="text/csv")):
        assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(response.content.decode())))
        assert [(r["key_id"], r["cost"]) for r in rows] == [(str(key.pk), "4.10"), ("", "2.05")]
        assert rows[0]["requests_5xx"] == "1" and rows[0]["currency"] == "USD"
    team_body = api.get("/api/v1/teams/ml-research/keys/usage/", params).json()
    assert team_body["ledger_cost"] == "6.15" and team_body["hours"][0]["endpoint_name"] == endpoint.name


@pytest.mark.parametrize("params", [{"since": "yesterday"}, {"since": "2026-11-03", "until": "2026-11-01"},
                                    {"format": "xml"}])
def test_usage_refuses_bad_queries_with_400(api, endpoint, params):
    response = api.get(f"{keys_path(endpoint)}usage/", params)
    assert response.status_code == 400 and response.json()["errors"]
