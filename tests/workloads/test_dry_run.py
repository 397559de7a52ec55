"""``POST …?dry_run=1``: the preview before submitting — cost, budget share, start now / queue / refuse."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from billing.ledger import month_end
from billing.models import QuotaHold, TeamBudget
from inference.models import InferenceEndpoint
from jobs.models import TrainingRun
from quotas.models import QueuedRequest
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db


def dry(api, path: str, payload: dict, **headers):
    return api.post(f"{path}?dry_run=1", payload, format="json", **headers)


def test_a_dry_run_previews_and_writes_nothing(api, quota):
    TeamBudget.objects.filter(team__slug="ml-research").update(monthly_limit=Decimal("100"))
    response = dry(api, "/api/v1/runs/", run_payload(gpus_per_worker=2, max_runtime_minutes=120))
    assert response.status_code == 200
    body = response.json()
    assert body["outcome"] == "admit"
    assert (body["cost_per_hour"], body["estimated_total_cost"]) == ("8.2000", "16.4000")
    assert body["estimated_total"] == body["estimated_total_cost"]  # the deprecated name, a run's meaning
    assert body["share_of_budget_left"] == "0.1640"  # 16.40 of the 100 left
    assert not TrainingRun.objects.exists() and not QuotaHold.objects.exists()


def test_it_says_where_it_would_queue_and_when_it_would_start(api, member, team, quota):
    busy = api.post("/api/v1/runs/", run_payload(name="busy", gpus_per_worker=8, max_runtime_minutes=60),
                    format="json").json()
    TrainingRun.objects.filter(pk=busy["id"]).update(state="running", started_at=timezone.now())
    body = dry(api, "/api/v1/runs/", run_payload(name="next", gpus_per_worker=4)).json()
    assert body["outcome"] == "queue" and body["queue_position"] == 1
    # No run has ended yet, so no figure of limit use: busy's limit is all that is known, a bound (issue 46).
    assert body["start"].startswith("starts within 60 min, when busy ends, by ") and body["start"].endswith(" at the latest")
    assert body["estimated_start_latest"] == body["estimated_start_earliest"] == body["estimated_start_at"]
    assert body["estimated_start_at"] is not None
    assert not QueuedRequest.objects.exists()


def test_it_says_when_it_would_be_refused_and_bad_input_is_still_a_400(api, quota):
    assert dry(api, "/api/v1/runs/", run_payload(flavor="h100-80gb")).json()["outcome"] == "reject"
    bad = dry(api, "/api/v1/runs/", run_payload(gpus_per_worker="many"))
    assert bad.status_code == 400 and "gpus_per_worker" in bad.json()["errors"]


@pytest.mark.parametrize("key", [{}, {"HTTP_IDEMPOTENCY_KEY": "k-1"}], ids=["no key", "a key"])
def test_a_dry_run_flag_that_is_no_yes_or_no_is_a_400_not_a_real_submission(api, quota, key):
    """``?dry_run=ture`` (or empty) is neither a preview nor a submission: a 400 on ``dry_run``, nothing written —
    read as "no" it would have spent the team's money on what its caller only meant to price."""
    for value in ("ture", "", "2"):
        for path, payload in (("/api/v1/runs/", run_payload()), ("/api/v1/endpoints/", {"team": "ml-research", **endpoint_payload()})):
            answer = api.post(f"{path}?dry_run={value}", payload, format="json", **key)
            assert answer.status_code == 400 and answer.json() == {"errors": {"dry_run": ["Must be true or false."]}}
    assert not TrainingRun.objects.exists() and not InferenceEndpoint.objects.exists()
    assert not QuotaHold.objects.exists() and not QueuedRequest.objects.exists()
    # The words a flag takes, any case: yes previews, no submits.
    assert api.post("/api/v1/runs/?dry_run=YES", run_payload(), format="json").json()["outcome"] == "admit"
    assert api.post("/api/v1/runs/?dry_run=No", run_payload(), format="json").status_code == 201


def test_a_dry_run_is_not_replayed_to_the_real_submission(api, quota):
    headers = {"HTTP_IDEMPOTENCY_KEY": "k-1"}
    assert dry(api, "/api/v1/runs/", run_payload(), **headers).status_code == 200
    real = api.post("/api/v1/runs/", run_payload(), format="json", **headers)
    assert real.status_code == 201 and TrainingRun.objects.count() == 1


@pytest.mark.parametrize("value", ["0", "false", "no", "off"])
def test_a_submission_saying_dry_run_no_is_idempotent_like_any_other(api, quota, value):
    # The views read these as "not a dry run": the idempotency layer must too, or a replay
    # runs the view again and creates a second run.
    headers = {"HTTP_IDEMPOTENCY_KEY": f"real-{value}"}
    first = api.post(f"/api/v1/runs/?dry_run={value}", run_payload(), format="json", **headers)
    again = api.post(f"/api/v1/runs/?dry_run={value}", run_payload(), format="json", **headers)
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true" and again.json()["id"] == first.json()["id"]
    assert TrainingRun.objects.count() == 1


def test_viewers_and_outsiders_get_no_preview(api_client_for, viewer, outsider, quota):
    assert dry(api_client_for(viewer), "/api/v1/runs/", run_payload()).status_code == 403
    assert dry(api_client_for(outsider), "/api/v1/runs/", run_payload()).status_code == 404


def test_an_endpoint_dry_run_counts_its_minimum_to_the_months_end(api, ep_quota):
    body = dry(api, "/api/v1/endpoints/", {"team": "ml-research", **endpoint_payload(min_replicas=2)}).json()
    assert body["outcome"] == "admit" and body["cost_per_hour"] == "8.2000"
    # No end, so no total: 2 replicas until the month's end is what the budget counts (and what the
    # deprecated estimated_total held for an endpoint).
    assert body["estimated_total_cost"] is None
    assert Decimal(body["committed_cost"]) > 0 and body["estimated_total"] == body["committed_cost"]
    assert not InferenceEndpoint.objects.exists()
    full = dry(api, "/api/v1/endpoints/", {"team": "ml-research", **endpoint_payload(min_replicas=5,
                                                                                      max_replicas=5)}).json()
    assert full["outcome"] == "reject"


def test_the_run_form_shows_the_preview(client, member, quota):
    TeamBudget.objects.filter(team__slug="ml-research").update(monthly_limit=Decimal("100"))
    client.force_login(member)
    form = {"name": "x", "image": "registry.example.com/ml/t:1", "command": "python t.py", "flavor": "a100-80gb",
            "gpus_per_worker": "2", "workers": "1", "max_retries": "2", "priority": "normal",
            "max_runtime_minutes": "120"}
    page = client.post("/runs/preview/", form, HTTP_HX_REQUEST="true").content.decode()
    assert "16.40 USD" in page and "16% of what the budget leaves this month" in page


def test_a_run_without_a_limit_is_counted_until_the_months_end(api, client, member, quota):
    TeamBudget.objects.filter(team__slug="ml-research").update(monthly_limit=Decimal("100000"))
    def hours_left() -> Decimal:
        now = timezone.now()
        return Decimal((month_end(now) - now).total_seconds()) / 3600

    # Read before and after the call, not beside it: at 8.20 USD/h the figure moves a cent every ~4 s, which a
    # loaded machine's request can take.
    most = Decimal("8.20") * hours_left()
    body = dry(api, "/api/v1/runs/", run_payload(gpus_per_worker=2)).json()
    least = Decimal("8.20") * hours_left()
    assert body["estimated_total_cost"] is None and body["estimated_total"] is None
    assert least - Decimal("0.0001") <= Decimal(body["committed_cost"]) <= most + Decimal("0.0001")
    limited = dry(api, "/api/v1/runs/", run_payload(gpus_per_worker=2, max_runtime_minutes=120)).json()
    assert limited["committed_cost"] == limited["estimated_total_cost"] == "16.4000"
    client.force_login(member)
    form = {"name": "x", "image": "registry.example.com/ml/t:1", "command": "python t.py", "flavor": "a100-80gb",
            "gpus_per_worker": "2", "workers": "1", "max_retries": "2", "priority": "normal"}
    page = client.post("/runs/preview/", form, HTTP_HX_REQUEST="true").content.decode()
    assert "No runtime limit: the budget counts <strong>" in page and "A runtime limit counts less." in page
