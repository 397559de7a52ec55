"""The run and endpoint forms' live preview says when the work would borrow from the team's
cohort, and that borrowed work is preemptible; an endpoint's minimum never borrows."""

from __future__ import annotations

import pytest

from inference import services as endpoints
from jobs.services import submit_run
from quotas import services
from quotas.demo import seed_team_quotas
from tests.factories import make_team
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
ENDPOINT_FORM = {"name": "chat", "image": "registry.example.com/serving/vllm:0.6", "flavor": "a100-80gb",
                 "gpus_per_replica": "1", "min_replicas": "1", "max_replicas": "3", "metric": "gpu_utilization",
                 "target": "70", "scale_down_delay_seconds": "300", "port": "8080",
                 "readiness_path": "/health/ready", "startup_timeout_seconds": "600"}


def cohort_with_lender(staff, team, units: int = 4):
    """``team`` shares the cohort "research" with nlp-platform, which holds ``units`` idle A100s."""
    lender = make_team("nlp-platform")
    seed_team_quotas(lender, {"a100-80gb": units})
    services.set_cohort(staff, "research", teams=[team, lender])
    return lender


def run_preview(client, **fields) -> str:
    data = {"flavor": "a100-80gb", "gpus_per_worker": "2", "workers": "1", **fields}
    response = client.post("/runs/preview/", data, **HTMX)
    assert response.status_code == 200
    return response.content.decode()


def test_the_run_preview_says_it_borrows_and_is_preemptible_when_the_nominal_quota_is_full(
        client, member, team, quota, staff, published):
    cohort_with_lender(staff, team)
    submit_run(member, team, run_payload(name="own", gpus_per_worker=8))
    client.force_login(member)
    html = run_preview(client)
    assert ('<strong>Starts now</strong> — <strong id="preview-borrows">borrows 2\u00d7 a100-80gb from the cohort; '
            "preemptible (nlp-platform may take them back)</strong>") in html
    assert "admitted: 2\u00d7 a100-80gb, 10 of 8 now in use, 2 borrowed from the cohort" in html


def test_the_run_preview_within_the_nominal_quota_borrows_nothing(client, member, team, quota, staff):
    cohort_with_lender(staff, team)
    client.force_login(member)
    html = run_preview(client)
    assert "<strong>Starts now</strong> <span class=\"muted\">— admitted: 2\u00d7 a100-80gb, 2 of 8 now in use" in html
    assert "preview-borrows" not in html and "preemptible" not in html


def test_the_run_preview_shows_the_queue_reason_when_the_cohort_cannot_lend_enough(
        client, member, team, quota, staff, published):
    cohort_with_lender(staff, team, units=2)
    submit_run(member, team, run_payload(name="own", gpus_per_worker=8))
    client.force_login(member)
    html = run_preview(client, gpus_per_worker="4")
    assert ("<strong>Will queue:</strong> waiting for quota: needs 4\u00d7 a100-80gb, 8 of 8 in use; "
            "the cohort can lend 2 (nlp-platform uses 0 of its 2)") in html
    assert "preview-borrows" not in html


def test_the_run_preview_of_a_team_outside_any_cohort_is_unchanged(client, member, team, quota, published):
    submit_run(member, team, run_payload(name="own", gpus_per_worker=8))
    client.force_login(member)
    html = run_preview(client)
    assert "<strong>Will queue:</strong> waiting for quota: needs 2\u00d7 a100-80gb, 8 of 8 in use<" in html
    assert "cohort" not in html


def test_the_endpoint_preview_says_the_minimum_never_borrows_and_borrowed_burst_is_preemptible(
        client, member, team, ep_quota, staff, published):
    cohort_with_lender(staff, team)
    endpoints.create_endpoint(member, team, endpoint_payload(name="busy", min_replicas=3, max_replicas=3))
    client.force_login(member)
    html = client.post("/endpoints/preview/", ENDPOINT_FORM, **HTMX).content.decode()
    # The minimum takes the team's 4th A100; the 2 burst replicas would be the lender's.
    assert "<strong>Starts now</strong>" in html
    assert ("burst to all 3 replicas would be granted now \u2014 it borrows 2\u00d7 a100-80gb from the cohort; "
            "preemptible (nlp-platform may take them back).") in html
    assert "The minimum never borrows from the team's cohort: it is guaranteed and never preempted." in html


def test_the_endpoint_preview_queues_or_refuses_a_minimum_the_cohort_could_lend(
        client, member, team, ep_quota, staff, published):
    cohort_with_lender(staff, team)
    endpoints.create_endpoint(member, team, endpoint_payload(name="busy", min_replicas=4, max_replicas=4))
    client.force_login(member)
    html = client.post("/endpoints/preview/", ENDPOINT_FORM, **HTMX).content.decode()
    assert "<strong>Will queue:</strong>" in html and "but a guaranteed minimum never borrows" in html
    html = client.post("/endpoints/preview/", {**ENDPOINT_FORM, "min_replicas": "5", "max_replicas": "5"},
                       **HTMX).content.decode()
    assert ("<strong>Refused:</strong> needs 5\u00d7 a100-80gb, more than the team&#x27;s limit of 4; "
            "a guaranteed minimum never borrows from the cohort") in html


def test_the_endpoint_preview_outside_a_cohort_says_nothing_of_borrowing(client, member, team, ep_quota):
    client.force_login(member)
    html = client.post("/endpoints/preview/", ENDPOINT_FORM, **HTMX).content.decode()
    assert "<strong>Starts now</strong>" in html and "burst to all 3 replicas would be granted now." in html
    assert "borrow" not in html and "preview-min-borrows" not in html
