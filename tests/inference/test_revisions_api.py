"""The revisions API: list with traffic figures, rollout (replace, canary), promote, rollback; bad input."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from inference import histogram
from inference.models import EndpointRevision, TrafficWindow
from teams.models import AuditEvent
from tests.inference.conftest import endpoint_payload

pytestmark = pytest.mark.django_db


@pytest.fixture
def ep(api, ep_quota, published, fake_backend) -> int:
    response = api.post("/api/v1/endpoints/", {"team": "ml-research", **endpoint_payload(max_replicas=1)},
                        format="json")
    assert response.status_code == 201
    return response.json()["id"]


def url(pk: int, verb: str) -> str:
    return f"/api/v1/endpoints/{pk}/{verb}/"


def test_a_canary_rolled_out_listed_with_its_traffic_then_promoted(api, ep):
    response = api.post(url(ep, "rollout"), {"image": "serve:2", "args": ["--model", "b"], "strategy": "canary",
                                             "weight": 20, "auto_promote_windows": 10}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["number"], body["state"], body["weight"], body["replicas"], body["rollout"]) == (
        2, "canary", 20, 1, "canary")
    assert body["summary"] == "serve:2 · --model b" and body["auto_promote_windows"] == 10

    # The gateway's rows of the last minutes: 4 % 5xx on the candidate.
    now = timezone.now().replace(microsecond=0)
    for revision, requests, errors in ((1, 100, 0), (2, 25, 1)):
        counts = histogram.empty()
        for _ in range(requests):
            histogram.add(counts, 40)
        TrafficWindow.objects.create(endpoint_id=ep, team_id=EndpointRevision.objects.get(
            endpoint_id=ep, number=1).endpoint.team_id, revision=revision, start=now - timedelta(seconds=60), step=10,
            requests=requests, status_5xx=errors, status_2xx=requests - errors, latency=counts)
    listed = api.get(url(ep, "revisions")).json()["results"]
    assert [(r["number"], r["state"], r["weight"]) for r in listed] == [(2, "canary", 20), (1, "stable", 80)]
    assert listed[0]["traffic"]["requests"] == 25 and listed[0]["traffic"]["error_rate"] == 0.04
    assert 30 < listed[0]["traffic"]["p95_ms"] <= 40
    assert listed[1]["traffic"] == {"requests": 100, "errors_5xx": 0, "error_rate": 0.0,
                                    "p95_ms": listed[1]["traffic"]["p95_ms"]}
    assert listed[1]["created_by"] == "mia" and listed[1]["image"] == "registry.example.com/serving/vllm:0.6"

    # A second rollout while the canary is live: 409.
    assert api.post(url(ep, "rollout"), {"image": "serve:3"}, format="json").status_code == 409
    promoted = api.post(url(ep, "promote"))
    assert promoted.status_code == 200 and promoted.json()["state"] == "rolling"
    assert promoted.json()["verdict"]["by"] == "mia"
    assert api.get(f"/api/v1/endpoints/{ep}/").json()["image"] == "serve:2"
    assert api.post(url(ep, "promote")).status_code == 409
    assert api.post(url(ep, "rollback")).status_code == 409


def test_a_canary_rolled_back_by_hand_says_by_whom(api, ep):
    api.post(url(ep, "rollout"), {"env": {"MODEL": "b"}, "strategy": "canary", "weight": 5}, format="json")
    response = api.post(url(ep, "rollback"))
    assert response.status_code == 200
    assert (response.json()["state"], response.json()["weight"], response.json()["verdict"]["by"]) == (
        "rolled_back", 0, "mia")


def test_a_replace_rollout_is_a_rolling_revision(api, ep):
    response = api.post(url(ep, "rollout"), {"image": "serve:2"}, format="json")
    assert response.status_code == 201 and response.json()["state"] == "rolling"
    assert api.get(f"/api/v1/endpoints/{ep}/").json()["image"] == "serve:2"
    # The same through a PATCH, with rollout.
    patched = api.patch(f"/api/v1/endpoints/{ep}/", {"command": ["python", "serve.py"], "rollout": "replace"},
                        format="json")
    assert patched.status_code == 200 and patched.json()["command"] == ["python", "serve.py"]
    assert EndpointRevision.objects.filter(endpoint_id=ep).count() == 3


@pytest.mark.parametrize(("body", "field"), [
    ({"image": "serve:2", "strategy": "blue-green"}, "strategy"),
    ({"image": "serve:2", "strategy": "canary"}, "weight"),
    ({"image": "serve:2", "strategy": "canary", "weight": 80}, "weight"),
    ({"image": "serve:2", "strategy": "canary", "weight": True}, "weight"),
    ({"image": "serve:2", "strategy": "canary", "weight": 5, "auto_promote_windows": 10**30}, "auto_promote_windows"),
    ({"image": ""}, "image"),
    ({"image": "serve:2", "min_replicas": 3}, "non_field_errors"),
    ({"strategy": "canary", "weight": 5}, "non_field_errors"),
    ({"image": "registry.example.com/serving/vllm:0.6"}, "non_field_errors"),  # nothing changes
    ({"env": {"A": 1}}, "env"),
    ({"args": "--model b"}, "args"),
    (["image", "serve:2"], "non_field_errors"),
])
def test_bad_rollouts_are_400s_with_the_field_and_change_nothing(api, ep, published, body, field):
    audited, applies = AuditEvent.objects.count(), len(published)
    response = api.post(url(ep, "rollout"), body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert field in response.json()["errors"], response.json()
    assert EndpointRevision.objects.filter(endpoint_id=ep).count() == 1
    # Nothing half-written: no "endpoint changed" audit row, no apply queued for a change refused.
    assert (AuditEvent.objects.count(), len(published)) == (audited, applies)
    assert api.get(f"/api/v1/endpoints/{ep}/").json()["image"] == "registry.example.com/serving/vllm:0.6"


def test_a_viewer_reads_revisions_but_rolls_nothing_out(api_client_for, viewer, api, ep):
    client = api_client_for(viewer)
    assert client.get(url(ep, "revisions")).status_code == 200
    for verb, body in (("rollout", {"image": "serve:2"}), ("promote", None), ("rollback", None)):
        assert client.post(url(ep, verb), body, format="json").status_code == 403
    assert EndpointRevision.objects.filter(endpoint_id=ep).count() == 1


def test_a_canary_while_a_replace_rolls_out_is_a_409_that_says_why(api, ep):
    assert api.post(url(ep, "rollout"), {"image": "serve:2"}, format="json").status_code == 201
    refused = api.post(url(ep, "rollout"), {"image": "serve:3", "strategy": "canary", "weight": 20}, format="json")
    assert refused.status_code == 409
    assert "Revision 2 is still rolling out" in str(refused.json())
    assert not EndpointRevision.objects.filter(endpoint_id=ep, number=3).exists()
