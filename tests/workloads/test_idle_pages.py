"""Idle GPUs where users meet them: the run and endpoint pages flag them with their cost, the lists badge them."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.ledger import record_usage
from inference.models import InferenceEndpoint
from jobs.models import TrainingRun
from tests.factories import hold_of


@pytest.fixture
def idle_run(member, team, quota, flavors):
    """A run on 2 A100s, busy for its first half hour (ledger), idle since 40 minutes (open segment)."""
    now = timezone.now()
    run = TrainingRun.objects.create(team=team, created_by=member, name="stuck", flavor=flavors["a100-80gb"], state="running",
                                     image="registry.example.com/ml/t:1", command=["python"], gpus_per_worker=2,
                                     started_at=now - timedelta(minutes=70), idle_since=now - timedelta(minutes=40))
    hold_of(run, now - timedelta(minutes=40), 2, open_idle=True)
    record_usage(team, run.ref, "a100-80gb", member, now - timedelta(minutes=70), now - timedelta(minutes=60), 2, False,
                 idle=True)
    return run


def test_the_run_page_flags_idle_gpus_with_what_they_cost(client, member, idle_run):
    client.force_login(member)
    page = client.get(f"/runs/{idle_run.pk}/").content.decode()
    assert 'id="idle-flag"' in page and "GPUs idle since" in page and "cancel the run if it is stuck" in page
    # Idle: 10 minutes closed in the ledger + 40 open, on 2 GPUs at 4.10/h = 1.67 GPU-hours, 6.83.
    assert "Idle GPU time has cost 6.83 USD so far" in page
    assert "1.67 GPU-hours, 6.83 USD" in page


def test_a_short_idle_stretch_is_counted_but_not_flagged(client, member, idle_run, settings):
    settings.SLIPWAY_IDLE_WINDOW_MINUTES = 60
    client.force_login(member)
    page = client.get(f"/runs/{idle_run.pk}/").content.decode()
    assert 'id="idle-flag"' not in page
    assert "1.67 GPU-hours, 6.83 USD" in page


def test_the_run_list_badges_idle_runs(client, member, idle_run):
    client.force_login(member)
    page = client.get("/runs/").content.decode()
    assert 'class="badge idle"' in page and "idle GPUs" in page


def idle_hours_between(run, start, end) -> tuple[Decimal, Decimal]:
    """The bounds of the run's idle GPU-hours for a request answered between ``start`` and ``end``.

    10 closed idle minutes in the ledger plus the open stretch since ``idle_since``, on 2 GPUs, to the API's 4 places:
    a fixed tolerance of 0.0002 was a guess at how long the requests take, and a slow boot read 1.6670.
    """
    def at(moment) -> Decimal:
        return Decimal(2 * (600 + (moment - run.idle_since).total_seconds()) / 3600)
    return at(start) - Decimal("0.0001"), at(end) + Decimal("0.0001")


def test_the_api_reports_idle_time(api, idle_run):
    start = timezone.now()
    body = api.get(f"/api/v1/runs/{idle_run.pk}/").json()
    listed = api.get("/api/v1/runs/").json()["results"][0]
    low, high = idle_hours_between(idle_run, start, timezone.now())
    # 50 idle minutes on 2 GPUs, and the few seconds at most that the fixture and the requests took.
    assert Decimal("1.6665") < low and high < Decimal("1.6667") + Decimal("0.01")
    assert low <= Decimal(body["idle_gpu_hours"]) <= high
    assert low <= Decimal(listed["idle_gpu_hours"]) <= high
    assert abs(Decimal(body["idle_cost"]) - Decimal(body["idle_gpu_hours"]) * Decimal("4.10")) < Decimal("0.001")
    assert body["idle_since"] is not None


def test_the_endpoint_page_shows_its_idle_time(client, member, team, ep_quota, flavors):
    now = timezone.now()
    endpoint = InferenceEndpoint.objects.create(
        team=team, created_by=member, name="quiet", flavor=flavors["a100-80gb"],
        state="ready", image="registry.example.com/s:1", min_replicas=1, max_replicas=1, replicas=1,
        idle_since=now - timedelta(minutes=30))
    hold_of(endpoint, now - timedelta(minutes=30), 1, open_idle=True)
    client.force_login(member)
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    assert "lower its minimum replicas or delete it if nobody uses it" in page
    assert "0.50 GPU-hours, 2.05 USD" in page
    assert Decimal("2.05") == endpoint.cost_to_date.quantize(Decimal("0.01"))
