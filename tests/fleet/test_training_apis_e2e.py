"""Distributed training on both training APIs end to end, through the public API (issue 51, "Proof").

``east`` has Kubeflow Trainer v2 (the sandbox's TrainJob controller, Slipway's runtimes), ``west`` the v1
Training Operator (PyTorchJob). The same two-node spec succeeds on each, billed at each cluster's price; on
east a run with the checkpoint contract is preempted by its cohort's reclaim — rank 0 checkpoints at the
notice, the TrainJob goes — and its next attempt resumes from the reported checkpoint.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from billing.models import PreemptionEvent, UsageRecord
from billing.services import seed_cluster_prices
from jobs import metrics
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.demo import seed_team_quotas
from sandbox import faults
from sandbox.models import SimObject
from tests.factories import cohort_pair, make_team, member_api, secret_values
from tests.jobs.conftest import post_run
from tests.workloads.timeline import FleetTimeline

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 11, 24, 9, 0, 0, tzinfo=UTC)
A100 = "NVIDIA-A100-SXM4-80GB"
INVENTORY = f"""
clusters:
  - name: east
    labels: {{site: onprem}}
    training: trainjob
    prices: {{a100-80gb: "2.00"}}
    spot_prices: {{a100-80gb: "0.80"}}
    pools:
      - {{prefix: east-a100, count: 1, cpu: "96", memory: 1152Gi, gpu: {{product: {A100}, count: 8}}}}
      - prefix: east-spot
        count: 3
        cpu: "24"
        memory: 256Gi
        gpu: {{product: {A100}, count: 2}}
        labels: {{slipway.dev/capacity-type: spot}}
        taints: [{{key: slipway.dev/capacity-type, value: spot, effect: NoSchedule}}]
  - name: west
    labels: {{site: cloud}}
    prices: {{a100-80gb: "3.00"}}
    pools:
      - {{prefix: west-a100, count: 1, cpu: "96", memory: 1152Gi, gpu: {{product: {A100}, count: 8}}}}
"""
#: One spec, two nodes of two GPUs.
TWO_NODES = {"workers": 2, "gpus_per_worker": 2}


@pytest.fixture
def timeline(published, monkeypatch, settings, tmp_path, flavors):
    path = tmp_path / "east-west.yaml"
    path.write_text(INVENTORY)
    settings.SLIPWAY_SANDBOX_INVENTORY = str(path)
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    settings.SLIPWAY_PREEMPTION_GRACE_SECONDS = 30
    made = FleetTimeline(published, START)
    monkeypatch.setattr(timezone, "now", lambda: made.now)
    return made


def until(timeline: FleetTimeline, run_id: int, states: tuple[str, ...], cycles: int = 40) -> TrainingRun:
    for _ in range(cycles):
        timeline.cycle()
        run = TrainingRun.objects.get(pk=run_id)
        if run.state in states:
            return run
    return TrainingRun.objects.get(pk=run_id)


def node_env(timeline: FleetTimeline, run: TrainingRun) -> dict[str, str]:
    """Rank 0's env as its pod shows it: the trainer's and the runtime patch's, merged by the Trainer."""
    pods = [p for p in timeline.backend_of("east").pods(run.address)
            if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0"]
    return {e["name"]: e.get("value", "") for e in pods[0]["spec"]["containers"][0]["env"]}


def test_the_same_two_node_spec_succeeds_as_a_trainjob_on_east_and_a_pytorchjob_on_west(timeline):
    team = make_team("vision")
    seed_team_quotas(team, {"a100-80gb": 16}, Decimal("100000"))
    alice, _ = member_api("vision", "alice")
    assert seed_cluster_prices() == 2
    runs = {site: post_run(alice, "60s", team="vision", name=f"ddp-{site}", cluster_selector={"site": site},
                           env={"SLIPWAY_SIM_LOG_EVERY": "1"}, **TWO_NODES)["id"] for site in ("onprem", "cloud")}
    timeline.cycles(3)
    assert SimObject.objects.get(cluster="east", resource_kind="TrainJob", name=f"run-{runs['onprem']}")
    assert SimObject.objects.get(cluster="west", resource_kind="PyTorchJob", name=f"run-{runs['cloud']}")
    # The same progress: both report SLIPWAY_PROGRESS lines, which the portal reads from rank 0's log; east's
    # trainer says its own (trainerStatus) beside them, and the run's own fresh reports win (jobs.progress.pick).
    for run_id in runs.values():
        assert until(timeline, run_id, (RunState.RUNNING,)).state == RunState.RUNNING
    timeline.cycles(2)
    assert metrics.read_run_logs(now=timeline.now).runs == 2
    for site, run_id in runs.items():
        progress = alice.get(f"/api/v1/runs/{run_id}/").json()["progress"]
        assert progress["source"] == "run" and progress["step"] > 0, (site, progress)
    # The same telemetry: the exporter's readings of both nodes' GPUs, mapped to the run by its pods' labels
    # (a TrainJob's come through its runtime patch), so the GPU alerts and idle waste read them too.
    for site, run_id in runs.items():
        series = alice.get(f"/api/v1/runs/{run_id}/telemetry/").json()["series"]["util_pct"]
        assert len(series) == 4 and all(any(v is not None for v in gpu["v"]) for gpu in series), (site, series)
    trainer = TrainingRun.objects.get(pk=runs["onprem"]).trainer_status
    assert trainer is not None and 0 < trainer["percent"] <= 100
    assert TrainingRun.objects.get(pk=runs["cloud"]).trainer_status is None  # a PyTorchJob has no trainer status
    for site, cluster, price in (("cloud", "west", Decimal("3.00")), ("onprem", "east", Decimal("2.00"))):
        run = until(timeline, runs[site], (RunState.SUCCEEDED, RunState.FAILED))
        assert (run.cluster.name, run.state) == (cluster, RunState.SUCCEEDED), run.reason
        shown = alice.get(f"/api/v1/runs/{run.pk}/").json()
        assert shown["resource_kind"] == ("TrainJob" if cluster == "east" else "PyTorchJob")
        # The same logs: rank 0 first (a TrainJob's node-0, a PyTorchJob's master-0), its lines read from the cluster.
        logs = alice.get(f"/api/v1/runs/{run.pk}/logs/").json()
        assert logs["pods"][0]["label"] == ("node-0" if cluster == "east" else "master-0"), logs["pods"]
        assert logs["pod"] == logs["pods"][0]["name"] and logs["lines"]
        rows = list(UsageRecord.objects.filter(ref=run.ref))
        hours = sum((r.gpu_hours for r in rows), Decimal(0))
        assert hours > 0 and sum((r.cost for r in rows), Decimal(0)) == pytest.approx(hours * price)
        assert alice.get(f"/api/v1/runs/{run.pk}/").json()["cost_to_date"]


def test_a_preempted_trainjob_resumes_from_its_checkpoint_on_east(timeline, staff):
    cohort_pair(staff, reclaim="any", min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = member_api("vision", "alice")[0], member_api("nlp-platform", "noor")[0]
    east = {"cluster_selector": {"site": "onprem"}}
    post_run(alice, "2h", team="vision", name="own", gpus_per_worker=4, **east)
    borrowed = post_run(alice, "4m", team="vision", name="borrowed", checkpoint={"grace_seconds": 45},
                        env={"SLIPWAY_SIM_CHECKPOINT_EVERY": "30s", "SLIPWAY_SIM_HONOUR_NOTICE": "1"},
                        **TWO_NODES, **east)["id"]
    run = until(timeline, borrowed, (RunState.RUNNING,), cycles=8)
    assert run.state == RunState.RUNNING, run.reason
    assert SimObject.objects.filter(cluster="east", resource_kind="TrainJob", name=f"run-{borrowed}").exists()
    assert node_env(timeline, run)["SLIPWAY_ATTEMPT"] == "1"

    token = secret_values(f"run:{borrowed}")["SLIPWAY_RUN_TOKEN"]
    pods = APIClient()
    pods.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert pods.post(f"/api/v1/runs/{borrowed}/checkpoints/", {"step": 300, "path": "/slipway/checkpoints/step-300"},
                     format="json").status_code == 201
    mine = post_run(noor, "2m", team="nlp-platform", name="short", gpus_per_worker=4, **east)["id"]
    run = until(timeline, borrowed, (RunState.QUEUED,), cycles=16)
    assert (run.state, run.preemptions, run.attempt) == (RunState.QUEUED, 1, 2)
    # The last checkpoint reported wins: the one its rank 0 saved on the preemption notice, after the one posted.
    saved = run.last_checkpoint_path
    assert saved.startswith("/slipway/checkpoints/step-") and run.last_checkpoint_at is not None
    assert not SimObject.objects.filter(cluster="east", resource_kind="TrainJob", name=f"run-{borrowed}").exists()

    run = until(timeline, borrowed, (RunState.RUNNING,), cycles=60)
    assert TrainingRun.objects.get(pk=mine).state == RunState.SUCCEEDED
    assert run.state == RunState.RUNNING
    env = node_env(timeline, run)
    assert (env["SLIPWAY_ATTEMPT"], env["SLIPWAY_RESUME_FROM"]) == ("2", saved)
    rank0 = timeline.backend_of("east").logs(run.address, next(
        p["metadata"]["name"] for p in timeline.backend_of("east").pods(run.address)
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0"), tail=None)
    assert any(f"resuming from step {saved.rsplit('-', 1)[1]}" in line for line in rank0)
    assert until(timeline, borrowed, (RunState.SUCCEEDED, RunState.FAILED), cycles=70).state == RunState.SUCCEEDED


def test_a_spot_trainjob_whose_node_is_reclaimed_waits_for_capacity_again_and_runs_on(timeline):
    """Issue 51 point 6: a spot interruption of a TrainJob's node is no failure of the run's own — it goes back to
    the queue spending no retry, as a Job or a PyTorchJob does, and its next attempt is a new TrainJob."""
    team = make_team("vision")
    seed_team_quotas(team, {"a100-80gb": 16}, Decimal("100000"))
    alice, _ = member_api("vision", "alice")
    seed_cluster_prices()
    run_id = post_run(alice, "3h", team="vision", name="spotty", spot=True, cluster_selector={"site": "onprem"},
                      **TWO_NODES)["id"]
    run = until(timeline, run_id, (RunState.RUNNING,), cycles=12)
    assert run.state == RunState.RUNNING, run.reason
    east = timeline.backend_of("east")
    nodes = {p["spec"]["nodeName"] for p in east.pods(run.address)}
    assert len(nodes) == 2 and all(n.startswith("east-spot") for n in nodes)
    faults.reclaim_node(east, sorted(nodes)[0], now=timeline.now)
    seen = set()
    for _ in range(6):
        timeline.cycle()
        seen.add(TrainingRun.objects.get(pk=run_id).state)
    assert RunState.FAILED not in seen, (seen, TrainingRun.objects.get(pk=run_id).reason,
                                         [p["status"] for p in east.pods(run.address)])
    event = PreemptionEvent.objects.get(ref=run.ref)
    assert event.cause == "spot" and event.reason.startswith("interrupted: spot capacity reclaimed")
    run = until(timeline, run_id, (RunState.RUNNING,), cycles=20)
    assert (run.state, run.attempt) == (RunState.RUNNING, 2), run.reason
    assert SimObject.objects.filter(cluster="east", resource_kind="TrainJob", name=f"run-{run_id}").exists()
    assert sorted(nodes)[0] not in {p["spec"]["nodeName"] for p in east.pods(run.address)}
