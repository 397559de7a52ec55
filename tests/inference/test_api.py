"""The endpoints API (docs/api.md "Inference endpoints"): fields, status codes, error shape, tenancy."""

from __future__ import annotations

import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models import QuotaHold
from inference.models import InferenceEndpoint
from tests.inference.conftest import endpoint_payload

pytestmark = pytest.mark.django_db


def post(client, **overrides):
    return client.post("/api/v1/endpoints/", {"team": "ml-research", **endpoint_payload(**overrides)}, format="json")


def test_it_creates_an_endpoint_and_shows_the_contracts_fields(api, ep_quota, published):
    response = post(api, min_replicas=1, max_replicas=3)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "deploying"
    assert (body["replicas"], body["desired_replicas"], body["replica_ceiling"]) == (0, 0, 1)
    assert body["object_name"] == f"ep-{body['id']}" and body["namespace"] == "team-ml-research"
    # The external URL through the gateway; the Service's in-cluster address stays as internal_url.
    assert body["url"] == f"http://127.0.0.1:8002/ml-research/{body['name']}"
    assert body["internal_url"] == f"http://ep-{body['id']}.team-ml-research.svc.cluster.local"
    assert body["cost_per_hour_range"] == ["4.1000", "12.3000"]
    assert body["cost_per_hour_now"] == "0.0000"  # nothing runs yet
    assert body["estimated_cost_per_hour"] == body["cost_per_hour_now"]  # deprecated (docs/api.md, Deprecated)
    assert body["autoscale"] == {"metric": "gpu_utilization", "target": 70}
    assert body["created_by"] == "mia" and body["team"] == "ml-research"
    assert body["queue_position"] is None


def test_the_url_is_the_gateways_public_base_url_with_the_team_and_the_name(api, ep_quota, published, settings):
    settings.SLIPWAY_GATEWAY_URL = "https://api.example.com/serve"
    body = post(api, name="chat").json()
    assert body["url"] == "https://api.example.com/serve/ml-research/chat"
    listed = api.get("/api/v1/endpoints/").json()["results"]
    assert [(e["url"], e["internal_url"]) for e in listed] == [(body["url"], body["internal_url"])]


def test_a_name_stays_taken_until_its_endpoint_is_deleted_or_failed(api, ep_quota, published):
    first = post(api, name="chat").json()
    InferenceEndpoint.objects.filter(pk=first["id"]).update(state="deleting")  # unfinished: still its name
    refused = post(api, name="chat")
    assert refused.status_code == 400
    assert refused.json()["errors"]["name"] == ["The team already has an endpoint named 'chat' that is not deleted or failed."]
    InferenceEndpoint.objects.filter(pk=first["id"]).update(state="deleted")
    assert post(api, name="chat").status_code == 201


def test_it_lists_and_filters_the_callers_endpoints(api, ep_quota, api_client_for, outsider, other_team):
    post(api, name="a")
    post(api, name="b", min_replicas=4, max_replicas=4)  # queued behind a
    listed = api.get("/api/v1/endpoints/?state=queued").json()
    assert [e["name"] for e in listed["results"]] == ["b"]
    assert listed["results"][0]["queue_position"] == 1
    assert api_client_for(outsider).get("/api/v1/endpoints/").json()["count"] == 0
    assert api.get("/api/v1/endpoints/?state=nope").status_code == 400


def test_patch_answers_400_with_the_reason_and_changes_nothing(api, ep_quota):
    first = post(api, name="a", min_replicas=2).json()
    post(api, name="b", min_replicas=2)
    response = api.patch(f"/api/v1/endpoints/{first['id']}/", {"min_replicas": 3}, format="json")
    assert response.status_code == 400
    assert "waiting for quota" in response.json()["errors"]["min_replicas"][0]
    assert QuotaHold.objects.held().get(ref=f"ep:{first['id']}").units == 2
    assert api.patch(f"/api/v1/endpoints/{first['id']}/", {"port": 9000}, format="json").status_code == 400
    ok = api.patch(f"/api/v1/endpoints/{first['id']}/", {"max_replicas": 6, "scale_down_delay_seconds": 60},
                   format="json")
    assert ok.status_code == 200 and ok.json()["max_replicas"] == 6


def test_delete_answers_202_then_409(api, ep_quota):
    created = post(api).json()
    response = api.delete(f"/api/v1/endpoints/{created['id']}/")
    assert response.status_code == 202 and response.json()["state"] == "deleting"
    again = api.delete(f"/api/v1/endpoints/{created['id']}/")
    assert again.status_code == 409 and "errors" in again.json()


def test_the_scaling_log_is_newest_first(api, ep_quota):
    created = post(api).json()
    body = api.get(f"/api/v1/endpoints/{created['id']}/scaling/").json()
    assert [row["decision"] for row in body["results"]] == ["admitted"]
    assert set(body["results"][0]) == {"at", "replicas", "desired_replicas", "replica_ceiling", "metric_value",
                                        "decision", "reason"}


def test_manifest_logs_and_events_answer_for_an_endpoint(api, ep_quota, fake_backend):
    created = post(api).json()
    assert api.get(f"/api/v1/endpoints/{created['id']}/logs/").json() == {"lines": [], "pod": None, "pods": [], "attempt": 1, "saved_at": None}  # not applied yet
    assert api.get(f"/api/v1/endpoints/{created['id']}/events/").json() == []


def test_the_yaml_manifest_is_one_document_a_list_of_every_object(api, ep_quota):
    created = post(api).json()
    objects = api.get(f"/api/v1/endpoints/{created['id']}/manifest/").json()
    assert len(objects) > 1  # a Deployment, a Service, ...: once a stream of documents
    response = api.get(f"/api/v1/endpoints/{created['id']}/manifest/?format=yaml")
    assert response["Content-Type"].startswith("application/yaml")
    assert yaml.safe_load(response.content) == {"apiVersion": "v1", "kind": "List", "items": objects}


def test_outsiders_get_404_and_viewers_403(api, ep_quota, api_client_for, outsider, viewer):
    created = post(api).json()
    stranger, reader = api_client_for(outsider), api_client_for(viewer)
    path = f"/api/v1/endpoints/{created['id']}/"
    assert stranger.get(path).status_code == 404
    assert stranger.delete(path).status_code == 404
    assert stranger.patch(path, {"min_replicas": 2}, format="json").status_code == 404
    assert reader.get(path).status_code == 200
    assert reader.delete(path).status_code == 403
    assert reader.patch(path, {"min_replicas": 2}, format="json").status_code == 403
    assert post(reader).status_code == 403
    assert post(stranger).status_code == 404  # a team of others answers as if it did not exist
    assert InferenceEndpoint.objects.count() == 1


@pytest.mark.parametrize("payload", [
    {"min_replicas": "many"}, {"max_replicas": 0}, {"autoscale": "fast"}, {"gpus_per_replica": -1},
    {"env": {"1BAD": "x"}}, {"image": "not an image"}, {"readiness_path": "health"}, {"port": 70000},
])
def test_bad_input_is_a_400_with_field_errors(api, ep_quota, payload):
    response = post(api, **payload)
    assert response.status_code == 400, response.content
    assert response.json()["errors"]
    assert not InferenceEndpoint.objects.exists()


def test_an_idempotency_key_returns_the_first_response(api, ep_quota):
    headers = {"HTTP_IDEMPOTENCY_KEY": "ep-create-1"}
    first = api.post("/api/v1/endpoints/", {"team": "ml-research", **endpoint_payload()}, format="json", **headers)
    second = api.post("/api/v1/endpoints/", {"team": "ml-research", **endpoint_payload()}, format="json", **headers)
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] == second.json()["id"]
    assert InferenceEndpoint.objects.count() == 1


def test_a_list_reads_the_clusters_and_prices_once_whatever_its_length(api, ep_quota):
    # An endpoint's cost per hour and its range come before price_per_hour: each row is quoted
    # from the page's one PriceBook (workloads.api.queue_context), not from a read of its own.
    def statements() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert api.get("/api/v1/endpoints/").status_code == 200
        return len(ctx.captured_queries)

    post(api, name="a")
    one = statements()
    for name in "bcd":
        post(api, name=name)
    assert statements() == one


@pytest.mark.postgres  # PostgreSQL's statements and locks
def test_a_creation_writes_under_the_teams_lock_once(api, ep_quota):
    # Under the team's lock: the lock, the facts, the month's open segments (the team has a
    # budget), then the hold, the endpoint's state move, its first scaling event and
    # replica sample and its audit row as one statement (PostgreSQL's data-modifying CTEs),
    # then the end.
    api.get("/api/v1/flavors/")  # the token's first last-used write is behind us
    with CaptureQueriesContext(connection) as ctx:
        assert post(api, name="locked").status_code == 201
    statements = [query["sql"] for query in ctx.captured_queries]
    lock = next(i for i, sql in enumerate(statements) if sql.endswith("FOR NO KEY UPDATE"))
    held = statements[lock + 1:]
    assert [sql.split()[0] for sql in held] == ["SELECT", "SELECT", "WITH", "RELEASE"], held
    tables = ("quotas_quotahold", "inference_scalingevent", "inference_replicasample", "portal_auditevent")
    assert all(f'INSERT INTO "{table}"' in held[2] for table in tables)
    assert 'UPDATE "workloads_workload" SET' in held[2]  # the endpoint's state move, on the one table
    endpoint = InferenceEndpoint.objects.get(name="locked")
    assert endpoint.scaling_events.get().at == endpoint.replica_samples.get().at == endpoint.admitted_at
