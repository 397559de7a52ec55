"""The drain journey on the demo's two sandbox clusters, through the public API (issue 34, item 1's proof).

The demo inventory (``sandbox/inventory.yaml``) offers on-demand L4s on ``east`` only (west's are
spot). Staff drain east; the next L4 run waits in the queue with the drain's reason — the dry run
says so before the submission — while the run already on east keeps running; once east is ready
again the waiting run is admitted, placed on east and runs. Nothing fails on the way.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.conf import settings as django_settings
from django.utils import timezone
from rest_framework.test import APIClient

from billing.services import seed_cluster_prices
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.demo import seed_team_quotas
from tests.factories import make_team, member_api
from tests.workloads.timeline import FleetTimeline

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 11, 24, 9, 0, 0, tzinfo=UTC)
DRAINED = "waiting: l4 is only offered by east, which is draining"


@pytest.fixture
def timeline(published, monkeypatch, settings, flavors):
    settings.SLIPWAY_SANDBOX_INVENTORY = str(django_settings.BASE_DIR / "sandbox" / "inventory.yaml")
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    made = FleetTimeline(published, START)
    monkeypatch.setattr(timezone, "now", lambda: made.now)
    return made


def l4_run(client: APIClient, name: str, dry_run: bool = False):
    return client.post(f"/api/v1/runs/{'?dry_run=1' if dry_run else ''}", {
        "team": "vision", "name": name, "image": "registry.example.com/ml/trainer:1.4", "command": ["python", "t.py"],
        "flavor": "l4", "gpus_per_worker": 1, "env": {"SLIPWAY_SIM_DURATION": "3h"},
    }, format="json")


def until(timeline: FleetTimeline, run_id: int, state: str, cycles: int = 12) -> TrainingRun:
    for _ in range(cycles):
        timeline.cycle()
        run = TrainingRun.objects.get(pk=run_id)
        if run.state == state:
            return run
    raise AssertionError(f"run {run_id} not {state} after {cycles} cycles: {run.state} ({run.reason})")


def test_a_drained_clusters_next_run_waits_with_the_drain_reason_then_runs_when_it_is_ready(timeline, staff):
    seed_team_quotas(make_team("vision"), {"l4": 2}, Decimal("100000"))
    seed_cluster_prices()
    alice, _ = member_api("vision", "alice")
    ops = APIClient()
    ops.force_authenticate(staff)

    # 1. An L4 run goes to east, the only cluster with on-demand L4s, and runs.
    first = l4_run(alice, "first").json()["id"]
    assert until(timeline, first, RunState.RUNNING).cluster.name == "east"

    # 2. East drains: the next L4 run waits, and says why before and after it is submitted.
    assert ops.patch("/api/v1/clusters/east/", {"state": "draining"}, format="json").json()["state"] == "draining"
    dry = l4_run(alice, "next", dry_run=True).json()
    assert (dry["outcome"], dry["message"]) == ("queue", DRAINED)
    response = l4_run(alice, "next")
    assert response.status_code == 201 and (response.json()["state"], response.json()["reason"]) == ("queued", DRAINED)
    waiting = response.json()["id"]
    timeline.cycles(6)
    run = TrainingRun.objects.get(pk=waiting)
    assert (run.state, run.reason) == (RunState.QUEUED, DRAINED)
    assert TrainingRun.objects.get(pk=first).state == RunState.RUNNING  # a drain finishes what runs
    assert not timeline.unapplied  # nothing was retried towards a failure

    # 3. East ready again: the waiting run is admitted, placed on east and runs.
    assert ops.patch("/api/v1/clusters/east/", {"state": "ready"}, format="json").json()["state"] == "ready"
    run = until(timeline, waiting, RunState.RUNNING)
    body = alice.get(f"/api/v1/runs/{waiting}/").json()
    assert (body["state"], body["cluster"]) == ("running", "east")
    assert run.attempt == 1
