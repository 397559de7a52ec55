"""Two clusters end to end on the sandbox, through the public API (issue #25, "Proof").

``east`` is cheaper for A100s and small, ``west`` dearer and larger; both are simulated clusters
of one inventory (``SLIPWAY_CLUSTER_BACKEND=sandbox``), priced from the inventory's ``prices``.
Runs go to east until it is full, then to west; a drained east sends the next run to west. Then
east stops answering (``manage.py sandbox silence east``): degraded, then lost; its work is billed
up to when it was last seen and not a second after while it stays lost; the run with the checkpoint
contract that reported a checkpoint is queued again after the replace timeout and resumes on west
from that checkpoint as attempt 2. When east answers again the copy it kept running is deleted,
and no piece of the run's time is billed twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from billing.models import ClusterPrice, UsageRecord
from billing.services import seed_cluster_prices
from cluster.status import parse_time
from fleet.models import Cluster
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.demo import seed_team_quotas
from sandbox.models import SimObject, SimPod
from tests.factories import make_team, member_api, secret_values
from tests.jobs.conftest import post_run
from tests.workloads.timeline import INTERVAL, FleetTimeline

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 11, 24, 9, 0, 0, tzinfo=UTC)
A100 = "NVIDIA-A100-SXM4-80GB"
#: east: one node of 4 A100s at 2.00/h; west: one node of 8 at 3.00/h.
INVENTORY = f"""
clusters:
  - name: east
    region: on-prem-east
    labels: {{site: onprem}}
    prices: {{a100-80gb: "2.00"}}
    pools:
      - {{prefix: east-a100, count: 1, cpu: "96", memory: 1152Gi, gpu: {{product: {A100}, count: 4}}}}
  - name: west
    region: us-west1
    labels: {{site: cloud}}
    prices: {{a100-80gb: "3.00"}}
    pools:
      - {{prefix: west-a100, count: 1, cpu: "96", memory: 1152Gi, gpu: {{product: {A100}, count: 8}}}}
"""
REPLACE_AFTER_MINUTES = 2
LOST_AFTER_CYCLES = 3
CHECKPOINT = "/slipway/checkpoints/step-300.pt"


@pytest.fixture
def timeline(published, monkeypatch, settings, tmp_path, flavors):
    path = tmp_path / "east-west.yaml"
    path.write_text(INVENTORY)
    settings.SLIPWAY_SANDBOX_INVENTORY = str(path)
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    settings.SLIPWAY_LOST_REPLACE_AFTER_MINUTES = REPLACE_AFTER_MINUTES
    settings.SLIPWAY_CLUSTER_LOST_AFTER_CYCLES = LOST_AFTER_CYCLES
    made = FleetTimeline(published, START)
    monkeypatch.setattr(timezone, "now", lambda: made.now)
    return made


def run_until_running(timeline: FleetTimeline, run_id: int, cycles: int = 12) -> TrainingRun:
    for _ in range(cycles):
        timeline.cycle()
        run = TrainingRun.objects.get(pk=run_id)
        if run.state == RunState.RUNNING:
            return run
    raise AssertionError(f"run {run_id} not running after {cycles} cycles: {run.state} ({run.reason})")


def job_env(cluster: str, run_id: int) -> dict[str, str]:
    job = SimObject.objects.get(cluster=cluster, resource_kind="Job", name=f"run-{run_id}")
    return {e["name"]: e.get("value", "") for e in job.manifest["spec"]["template"]["spec"]["containers"][0]["env"]}


def container_start(timeline: FleetTimeline, cluster: str, run: TrainingRun) -> datetime:
    """When the run's container started on ``cluster``, as that cluster reports it."""
    (pod,) = timeline.backend_of(cluster).pods(run.address)
    (status,) = pod["status"]["containerStatuses"]
    return parse_time(status["state"]["running"]["startedAt"])


def billed(ref: str) -> tuple[Decimal, Decimal, int]:
    """The ledger's (GPU hours, cost, rows) of ``ref``."""
    rows = list(UsageRecord.objects.filter(ref=ref))
    return sum((r.gpu_hours for r in rows), Decimal(0)), sum((r.cost for r in rows), Decimal(0)), len(rows)


def test_two_clusters_place_drain_lose_and_resume_a_run_billed_once(timeline, staff):
    team = make_team("vision")
    seed_team_quotas(team, {"a100-80gb": 16}, Decimal("100000"))
    alice, _ = member_api("vision", "alice")
    ops = APIClient()
    ops.force_authenticate(staff)
    # The inventory's clusters, priced from its ``prices``.
    assert seed_cluster_prices() == 2
    assert sorted(ClusterPrice.objects.values_list("cluster__name", "price_per_hour")) == [
        ("east", Decimal("2.00")), ("west", Decimal("3.00"))]

    # 1. The cheaper cluster first.
    ckpt = post_run(alice, "3h", team="vision", name="ckpt", checkpoint={"grace_seconds": 30})["id"]
    run_until_running(timeline, ckpt)
    body = alice.get(f"/api/v1/runs/{ckpt}/").json()
    assert body["cluster"] == "east"
    assert body["placement_reason"] == "east: cheapest with 4 free a100-80gb (2.00/h; west 3.00/h)"

    # 2. Draining east (staff, through the API) sends the next run to west though east has room ...
    response = ops.patch("/api/v1/clusters/east/", {"state": "draining"}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "draining"
    drained = post_run(alice, "3h", team="vision", name="while-draining")["id"]
    run_until_running(timeline, drained)
    body = alice.get(f"/api/v1/runs/{drained}/").json()
    assert body["cluster"] == "west"
    assert body["placement_reason"] == "west: the only cluster that can take it now, 8 free a100-80gb at 3.00/h"
    assert TrainingRun.objects.get(pk=ckpt).state == RunState.RUNNING  # running work on east goes on
    # ... and once it is placeable again, east takes work until it is full.
    assert ops.patch("/api/v1/clusters/east/", {"state": "ready"}, format="json").json()["state"] == "ready"
    fills = post_run(alice, "3h", team="vision", name="fills-east")["id"]
    run_until_running(timeline, fills)
    body = alice.get(f"/api/v1/runs/{fills}/").json()
    assert (body["cluster"], body["placement_reason"]) == (
        "east", "east: cheapest with 2 free a100-80gb (2.00/h; west 3.00/h)")
    overflow = post_run(alice, "3h", team="vision", name="overflow")["id"]
    run_until_running(timeline, overflow)
    body = alice.get(f"/api/v1/runs/{overflow}/").json()
    assert (body["cluster"], body["placement_reason"]) == (
        "west", "west: the only cluster that can take it now, 6 free a100-80gb at 3.00/h")

    # 3. The checkpointing run reports a checkpoint with its own token.
    timeline.cycles(12)
    pods = APIClient()
    pods.credentials(HTTP_AUTHORIZATION=f"Bearer {secret_values(f'run:{ckpt}')['SLIPWAY_RUN_TOKEN']}")
    assert pods.post(f"/api/v1/runs/{ckpt}/checkpoints/", {"step": 300, "path": CHECKPOINT},
                     format="json").status_code == 201
    timeline.cycles(6)
    east_start = TrainingRun.objects.get(pk=ckpt).started_at
    assert job_env("east", ckpt)["SLIPWAY_ATTEMPT"] == "1"

    # 4. East stops answering: degraded for a few cycles, then lost; the others go on.
    call_command("sandbox", "silence", "east")
    states = []
    for _ in range(LOST_AFTER_CYCLES):
        timeline.cycle()
        listed = {c["name"]: c["state"] for c in ops.get("/api/v1/clusters/").json()}
        states.append(listed["east"])
        assert listed["west"] == "ready"
    assert states == ["degraded", "degraded", "lost"]
    east = Cluster.objects.get(name="east")
    last_seen = east.last_seen
    assert last_seen == east.silent_since - timedelta(seconds=INTERVAL)  # the cycle before the first silent one
    for run_id in (ckpt, fills):
        run = TrainingRun.objects.get(pk=run_id)
        assert (run.billed_until, run.open_units) == (last_seen, 0)
        assert run.reason.startswith("cluster east unreachable since ")
    lost_bills = {run_id: billed(f"run:{run_id}") for run_id in (ckpt, fills)}
    lost_costs = {run_id: alice.get(f"/api/v1/runs/{run_id}/").json()["cost_to_date"] for run_id in (ckpt, fills)}
    # East's work was billed up to the last sighting, at east's price.
    hours = Decimal((last_seen - east_start).total_seconds()) * 2 / 3600
    assert lost_bills[ckpt][0] == pytest.approx(hours, abs=Decimal("1e-6"))
    assert lost_bills[ckpt][1] == pytest.approx(hours * 2, abs=Decimal("1e-6"))

    # 5. While east stays lost nothing more is billed for its work, and before the replace timeout
    #    the checkpointing run stays where it is.
    replace_at = east.silent_since + timedelta(minutes=REPLACE_AFTER_MINUTES)
    while timeline.now + timedelta(seconds=INTERVAL) < replace_at:
        timeline.cycle()
        assert TrainingRun.objects.get(pk=ckpt).attempt == 1
        for run_id in (ckpt, fills):
            assert billed(f"run:{run_id}") == lost_bills[run_id]
            assert alice.get(f"/api/v1/runs/{run_id}/").json()["cost_to_date"] == lost_costs[run_id]

    # 6. Past it, the run is queued again and resumes on west from its checkpoint, as attempt 2.
    report = timeline.cycle()
    assert f"run:{ckpt}" in report.requeued and report.lost == ["east"]
    resumed = run_until_running(timeline, ckpt)
    body = alice.get(f"/api/v1/runs/{ckpt}/").json()
    assert (body["cluster"], body["attempt"], body["state"]) == ("west", 2, "running")
    assert body["placement_reason"] == "west: the only cluster that can take it now, 4 free a100-80gb at 3.00/h"
    assert body["last_checkpoint"]["path"] == CHECKPOINT
    env = job_env("west", ckpt)
    assert (env["SLIPWAY_ATTEMPT"], env["SLIPWAY_RESUME_FROM"]) == ("2", CHECKPOINT)
    west_start = container_start(timeline, "west", resumed)
    # The run without the contract waits on the lost cluster (for staff), billed nothing more.
    assert TrainingRun.objects.get(pk=fills).cluster.name == "east"
    assert billed(f"run:{fills}") == lost_bills[fills]

    # 7. East answers again: the copy it kept running is deleted, east's own work is seen again.
    timeline.cycles(6)
    # It ran on there, unseen.
    assert SimObject.objects.filter(cluster="east", resource_kind="Job", name=f"run-{ckpt}").exists()
    assert SimPod.objects.filter(cluster="east", workload=f"run-{ckpt}", active=True).exists()
    call_command("sandbox", "answer", "east")
    report = timeline.cycle()
    seen_again = timeline.now
    assert f"run-{ckpt}" in report.orphans_deleted
    assert Cluster.objects.get(name="east").state == "ready"
    timeline.cycles(6)
    assert not SimObject.objects.filter(cluster="east", resource_kind="Job", name=f"run-{ckpt}").exists()
    assert SimObject.objects.filter(cluster="west", resource_kind="Job", name=f"run-{ckpt}").exists()
    assert TrainingRun.objects.get(pk=fills).state == RunState.RUNNING
    assert alice.get(f"/api/v1/runs/{fills}/").json()["reason"] == ""  # "unreachable" no longer holds
    # Nothing of the run is left on east (its Job, its pods, its checkpoint claim); west has its own.
    assert not SimObject.objects.filter(cluster="east", name__startswith=f"run-{ckpt}").exists()
    assert not SimPod.objects.filter(cluster="east", workload=f"run-{ckpt}").exists()
    assert SimObject.objects.filter(cluster="west", resource_kind="PersistentVolumeClaim",
                                    name=f"run-{ckpt}-checkpoints").exists()

    # 8. Every run is cancelled through the API, which closes its billing. Nothing was billed twice:
    #    the ledger intervals of a run never overlap, across both clusters, and the checkpointing
    #    run's billed time is the time it was seen running: on east from its start to the last
    #    sighting, then on west from its container's start to the cancel (to within a reconcile interval).
    for run_id in (ckpt, drained, fills, overflow):
        assert alice.post(f"/api/v1/runs/{run_id}/cancel/").status_code == 202
    cancelled_at = timeline.now
    timeline.cycles(3)
    for run_id in (ckpt, drained, fills, overflow):
        run = TrainingRun.objects.get(pk=run_id)
        assert run.state == RunState.CANCELLED and run.open_units == 0
        rows = list(UsageRecord.objects.filter(ref=run.ref).order_by("start"))
        assert rows and all(a.end <= b.start for a, b in pairwise(rows)), run_id
        assert alice.get(f"/api/v1/runs/{run_id}/").json()["cost_to_date"] == f"{sum(r.cost for r in rows):.4f}"
    # (The ledger keeps one row per run and hour: both attempts' intervals add up in this one.)
    (row,) = UsageRecord.objects.filter(ref=f"run:{ckpt}")
    assert (row.start, row.end) == (east_start, cancelled_at)
    hours, cost, _ = billed(f"run:{ckpt}")
    ran = Decimal((last_seen - east_start).total_seconds() + (cancelled_at - west_start).total_seconds()) * 2 / 3600
    assert ran - Decimal(INTERVAL * 2) / 3600 <= hours <= ran
    west_hours = hours - lost_bills[ckpt][0]
    assert cost == pytest.approx(lost_bills[ckpt][1] + west_hours * 3, abs=Decimal("1e-6"))  # each cluster's price
    # The minutes east was silent are in nobody's bill: the run without the contract was billed again
    # from when east was seen again.
    fills_run = TrainingRun.objects.get(pk=fills)
    seen = (last_seen - fills_run.started_at) + (cancelled_at - seen_again)
    assert billed(fills_run.ref)[0] == pytest.approx(Decimal(seen.total_seconds()) * 2 / 3600, abs=Decimal("1e-6"))


def lost_with_nowhere_to_go(timeline: FleetTimeline, staff) -> tuple[APIClient, APIClient, int]:
    """A checkpointing run on east (the first cluster by name, which a single cluster's rules call the
    default), west drained, east silenced past the replace timeout: the run is queued again, and waits
    in the queue, holding nothing, since no cluster that offers its flavor takes new work (issue 34: it
    used to be admitted, placed nowhere, and retried). ``(alice, staff client, run id)``."""
    team = make_team("vision")
    seed_team_quotas(team, {"a100-80gb": 16}, Decimal("100000"))
    alice, _ = member_api("vision", "alice")
    ops = APIClient()
    ops.force_authenticate(staff)
    seed_cluster_prices()
    ckpt = post_run(alice, "3h", team="vision", name="ckpt", checkpoint={"grace_seconds": 30})["id"]
    assert run_until_running(timeline, ckpt).cluster.name == "east"
    pods = APIClient()
    pods.credentials(HTTP_AUTHORIZATION=f"Bearer {secret_values(f'run:{ckpt}')['SLIPWAY_RUN_TOKEN']}")
    assert pods.post(f"/api/v1/runs/{ckpt}/checkpoints/", {"step": 300, "path": CHECKPOINT},
                     format="json").status_code == 201
    assert ops.patch("/api/v1/clusters/west/", {"state": "draining"}, format="json").status_code == 200
    call_command("sandbox", "silence", "east")
    for _ in range(200):
        if f"run:{ckpt}" in timeline.cycle().requeued:
            break
    timeline.cycle()
    run = TrainingRun.objects.get(pk=ckpt)
    assert (run.state, run.attempt, run.cluster_id) == (RunState.QUEUED, 2, None)
    assert run.reason == "waiting: a100-80gb is only offered by east (lost) and west (draining)"
    assert not timeline.unapplied  # never retried towards a failure
    return alice, ops, ckpt


def test_a_run_placed_nowhere_is_redriven_while_the_first_cluster_stays_lost(timeline, staff):
    """Admitted work not placed yet is re-driven by the queue's step: not by the first cluster's cycle,
    which does not run while that cluster is lost (it used to wait there until east answered)."""
    alice, ops, ckpt = lost_with_nowhere_to_go(timeline, staff)
    assert ops.patch("/api/v1/clusters/west/", {"state": "ready"}, format="json").status_code == 200
    run_until_running(timeline, ckpt)
    assert Cluster.objects.get(name="east").state == "lost"
    body = alice.get(f"/api/v1/runs/{ckpt}/").json()
    assert (body["cluster"], body["attempt"], body["state"]) == ("west", 2, "running")
    assert job_env("west", ckpt)["SLIPWAY_RESUME_FROM"] == CHECKPOINT


def test_the_copy_a_lost_cluster_kept_is_not_taken_for_the_run_placed_nowhere(timeline, staff):
    """East answers while the run it held waits, placed nowhere, for its next attempt: the copy east
    kept running is an earlier attempt's, deleted as a leftover, never followed as the run's (it used
    to be: "running" on no cluster, attempt 2 in name but never resumed, billed again)."""
    alice, _ops, ckpt = lost_with_nowhere_to_go(timeline, staff)
    call_command("sandbox", "answer", "east")
    report = timeline.cycle()
    assert f"run-{ckpt}" in report.orphans_deleted
    run = TrainingRun.objects.get(pk=ckpt)
    assert run.state != RunState.RUNNING or run.cluster_id is not None
    # Placed afresh on east, the one cluster that takes work now, and resumed there from its checkpoint.
    resumed = run_until_running(timeline, ckpt)
    body = alice.get(f"/api/v1/runs/{ckpt}/").json()
    assert (body["cluster"], body["attempt"], body["state"]) == ("east", 2, "running")
    env = job_env("east", ckpt)
    assert (env["SLIPWAY_ATTEMPT"], env["SLIPWAY_RESUME_FROM"]) == ("2", CHECKPOINT)
    rows = list(UsageRecord.objects.filter(ref=resumed.ref).order_by("start"))
    assert all(a.end <= b.start for a, b in pairwise(rows))
