"""Elastic pools end to end on the sandbox, through the public API and the reconcile cycle (issue 52, "Proof").

``east`` has one fixed A100 node; ``west`` an atomic pool of up to 4 A100 nodes of 8 GPUs, none up, whose nodes
come up after a drawn delay (median 60 s, tail 120 s here, so the test's clock moves in minutes, not hours).

* A 4-node gang asks for its nodes with a ProvisioningRequest and waits, admitted, with the pool's words; it
  starts only once all 4 nodes are up, on them, and nothing is billed before its pods run.
* A failed provisioning requeues it with the autoscaler's words and Kueue's backoff, and it is not admitted
  before the backoff is over; it then asks again and runs.
* Once the run ends, its nodes stand idle and go after their unneeded minutes plus one cycle (that a node with a
  running pod is never taken is tests/sandbox/test_pools.py's).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import UsageRecord
from fleet.models import Cluster, GpuFlavor, NodePool
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.demo import seed_team_quotas
from quotas.models import QueuedRequest
from sandbox import pools as sandbox_pools
from sandbox.models import SimNode, SimObject, SimPod
from tests.factories import make_team, member_api
from tests.jobs.conftest import post_run
from tests.workloads.timeline import FleetTimeline
from workloads.models import ReasonCode

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 11, 24, 9, 0, 0, tzinfo=UTC)
A100 = "NVIDIA-A100-SXM4-80GB"
INVENTORY = f"""
clusters:
  - name: east
    labels: {{site: onprem}}
    pools:
      - {{prefix: east-a100, count: 1, cpu: "96", memory: 1152Gi, gpu: {{product: {A100}, count: 8}}}}
  - name: west
    labels: {{site: cloud}}
    pools:
      - prefix: west-a100
        cpu: "96"
        memory: 1152Gi
        gpu: {{product: {A100}, count: 8}}
        elastic: {{min: 0, max: 4, mode: atomic, delay_median_seconds: 60, delay_tail_seconds: 120,
                  failure_probability: 0, revoke_probability: 0, unneeded_minutes: 2}}
"""
WEST = {"cluster_selector": {"site": "cloud"}}
GANG = {"workers": 4, "gpus_per_worker": 8}


@pytest.fixture
def timeline(published, monkeypatch, settings, tmp_path, flavors):
    path = tmp_path / "elastic.yaml"
    path.write_text(INVENTORY)
    settings.SLIPWAY_SANDBOX_INVENTORY = str(path)
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    made = FleetTimeline(published, START)
    monkeypatch.setattr(timezone, "now", lambda: made.now)
    made.cycle()  # the clusters are registered, their nodes read
    NodePool.objects.create(cluster=Cluster.objects.get(name="west"), flavor=GpuFlavor.objects.get(name="a100-80gb"),
                            min_nodes=0, max_nodes=4, mode="atomic", unneeded_minutes=2)
    return made


def west_nodes(state: str | None = None) -> int:
    nodes = SimNode.objects.filter(cluster="west")
    return (nodes.filter(state=state) if state else nodes).count()


def test_a_gang_waits_for_all_four_nodes_then_runs_on_them_billed_only_from_then_and_idle_nodes_go(timeline):
    team = make_team("vision")
    seed_team_quotas(team, {"a100-80gb": 32}, Decimal("100000"))
    alice, _ = member_api("vision", "alice")
    run_id = post_run(alice, "3m", team="vision", name="gang", **GANG, **WEST)["id"]
    timeline.cycles(2)
    run = TrainingRun.objects.get(pk=run_id)
    assert (run.state, run.reason_code, run.cluster.name) == (RunState.ADMITTED, ReasonCode.PROVISIONING, "west")
    assert run.reason.startswith("pool a100-80gb on west growing: node 0 of 4 ready"), run.reason
    assert alice.get(f"/api/v1/runs/{run_id}/").json()["reason_code"] == "provisioning"
    kinds = [o["kind"] for o in alice.get(f"/api/v1/runs/{run_id}/manifest/").json()]
    assert "ProvisioningRequest" in kinds and "PodTemplate" in kinds
    assert not SimObject.objects.filter(cluster="west", resource_kind="PyTorchJob").exists()
    assert west_nodes() == 4  # asked for all at once

    # Until the last node is up, nothing of the run exists and nothing is billed.
    started = None
    for _ in range(40):
        timeline.cycle(10)
        run = TrainingRun.objects.get(pk=run_id)
        if SimObject.objects.filter(cluster="west", resource_kind="PyTorchJob").exists():
            started = timeline.now
            break
        assert not UsageRecord.objects.filter(ref=run.ref).exists() and run.started_at is None
    assert started is not None and west_nodes("ready") == 4, run.reason
    assert len(NodePool.objects.get().history_seconds) == 1  # the pool learnt how long it took
    run = TrainingRun.objects.get(pk=run_id)
    for _ in range(20):
        if run.state == RunState.RUNNING:
            break
        timeline.cycle()
        run = TrainingRun.objects.get(pk=run_id)
    assert run.state == RunState.RUNNING and run.started_at >= started - timezone.timedelta(seconds=10)
    assert {p.node for p in SimPod.objects.filter(cluster="west", active=True, phase="Running")} == {
        f"west-a100-{i}" for i in range(4)}

    # It ends; its four nodes stand idle and go after 2 minutes and one cycle.
    for _ in range(60):
        timeline.cycle(10)
        if TrainingRun.objects.get(pk=run_id).state == RunState.SUCCEEDED:
            break
    run = TrainingRun.objects.get(pk=run_id)
    assert run.state == RunState.SUCCEEDED, run.reason
    billed = sum((r.gpu_hours for r in UsageRecord.objects.filter(ref=run.ref)), Decimal(0))
    ran_hours = Decimal((run.finished_at - run.started_at).total_seconds()) / 3600 * 32
    assert 0 < billed <= ran_hours + Decimal("0.01")  # billed only while its pods ran: no provisioning minute
    timeline.cycle(60)
    assert west_nodes() == 4  # idle for a minute: kept
    for _ in range(12):
        timeline.cycle(15)
    assert west_nodes() == 0


def test_a_failed_provisioning_requeues_with_its_reason_and_backoff_then_runs(timeline):
    team = make_team("vision")
    seed_team_quotas(team, {"a100-80gb": 32}, Decimal("100000"))
    alice, _ = member_api("vision", "alice")
    sandbox_pools.change("west", "west-a100", {"failure_probability": 1.0}, timeline.now)
    run_id = post_run(alice, "2m", team="vision", name="gang", workers=2, gpus_per_worker=8, **WEST)["id"]
    for _ in range(40):
        timeline.cycle(10)
        run = TrainingRun.objects.get(pk=run_id)
        if run.state == RunState.QUEUED:
            break
    assert (run.state, run.reason_code, run.cluster) == (RunState.QUEUED, ReasonCode.PROVISIONING_FAILED, None)
    assert "its nodes could not be provisioned (pool a100-80gb on west: " in run.reason
    assert "(try 2 of 3)" in run.reason and run.provisioning_failures == 1
    entry = QueuedRequest.objects.get(ref=run.ref)
    assert (entry.not_before - timeline.now).total_seconds() > 40  # 60 s from the failure
    assert not UsageRecord.objects.filter(ref=run.ref).exists()  # a failed gang bills 0 GPU-minutes
    assert not SimObject.objects.filter(cluster="west", resource_kind="ProvisioningRequest").exists()
    # Not admitted while it backs off.
    timeline.cycle(20)
    assert TrainingRun.objects.get(pk=run_id).state == RunState.QUEUED
    # The cloud has capacity again: after the backoff it asks again (a new request) and runs.
    sandbox_pools.change("west", "west-a100", {"failure_probability": 0.0}, timeline.now)
    for _ in range(60):
        timeline.cycle(10)
        run = TrainingRun.objects.get(pk=run_id)
        if run.state == RunState.RUNNING:
            break
    assert run.state == RunState.RUNNING, run.reason
    assert SimObject.objects.filter(cluster="west", resource_kind="ProvisioningRequest",
                                    name=f"run-{run_id}-nodes-1-2").exists()
