"""A spot run whose node the provider reclaims goes back to the queue, not to failed (issue #24 point 6).

The pod's condition ``DisruptionTarget`` (what Kubernetes sets when a node is shut down or
garbage-collected) is read by ``cluster.status.disruption`` (for ``jobs.status``); the run's objects are deleted, it waits in
its old place with "interrupted: spot capacity reclaimed", its lost work is logged, no retry
is spent, and an on-demand run's disruption is left to the Job.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import PreemptionEvent
from cluster.training import TRAINJOB
from fleet.models import Cluster
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import submit_run
from quotas.models import QueuedRequest
from tests.jobs.conftest import run_payload
from tests.jobs.test_reconcile import NS, applied, iso
from workloads.cycle import reconcile as rec
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db


def disrupt(backend, run, reason: str = "DeletionByPodGC") -> None:
    for pod in backend.pod_lists[(NS, run.object_name)]:
        pod["status"].setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": reason,
             "message": "PodGC: node no longer exists"})


@pytest.fixture
def running(member, team, quota, published, fake_backend):
    def make(spot: bool):
        data = {k: v for k, v in run_payload(spot=spot, gpus_per_worker=2).items() if k != "team"}
        run = applied(submit_run(member, team, data), fake_backend)
        t0 = timezone.now().replace(microsecond=0) - timedelta(minutes=12)
        TrainingRun.objects.filter(pk=run.pk).update(admitted_at=t0 - timedelta(seconds=30))  # admitted, then started
        fake_backend.set_running(NS, run.object_name, units=2, started=iso(t0))
        rec.reconcile(fake_backend, now=t0 + timedelta(minutes=2))
        run.refresh_from_db()
        assert run.state == RunState.RUNNING
        return run

    return make


def test_a_spot_run_whose_node_is_reclaimed_waits_again_and_resumes_later(running, fake_backend, client, member):
    run = running(spot=True)
    disrupt(fake_backend, run)
    report = rec.reconcile(fake_backend)
    run.refresh_from_db()
    assert report.preempted == [run.ref] and run.state == RunState.RUNNING and run.preempting_since is not None
    assert run.reason == "interrupted: spot capacity reclaimed; its pods are stopping"
    assert "delete" in fake_backend.calls and (NS, run.object_name) not in fake_backend.pod_lists
    event = PreemptionEvent.objects.get(ref=run.ref)
    assert (event.cause, event.by_team, event.units, event.grace_seconds) == ("spot", None, 2, 0)
    assert event.lost_gpu_hours > 0  # since its start: no checkpoints reported

    # Its objects are gone: it queues again (at its old place), billed to now, no retry spent.
    report = rec.reconcile(fake_backend)
    run.refresh_from_db()
    assert report.requeued == [run.ref]
    # The quota was free: admitted again in the same cycle, the apply published for attempt 2.
    assert run.state == RunState.ADMITTED and not QueuedRequest.objects.filter(ref=run.ref).exists()
    assert run.preemptions == 0 and run.open_units == 0
    assert run.reason != "" and run.applied_at is None
    client.force_login(member)
    log = client.get(f"/api/v1/runs/{run.pk}/preemptions/").json()
    assert log[0]["cause"] == "spot" and log[0]["by_team"] is None
    assert log[0]["reason"].startswith("interrupted: spot capacity reclaimed (DeletionByPodGC); 12 min of work")
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Spot capacity reclaimed by the provider" in page
    # Its pod's log was saved before the delete (issue 34.4): attempt 1 is still readable.
    saved = client.get(f"/api/v1/runs/{run.pk}/logs/", {"attempt": "1"}).json()
    assert saved["lines"] == ["log line 0", "log line 1", "log line 2"] and saved["attempt"] == 1
    [first] = client.get(f"/api/v1/runs/{run.pk}/attempts/").json()
    assert (first["ended"], first["started_at"] is not None, first["stopped_at"] is not None) == (
        "interrupted", True, True)
    assert "attempt 1 (interrupted)" in client.get(f"/runs/{run.pk}/").content.decode()


def test_an_on_demand_runs_disruption_is_the_jobs_own_to_retry(running, fake_backend):
    run = running(spot=False)
    disrupt(fake_backend, run, "EvictionByEvictionAPI")
    report = rec.reconcile(fake_backend)
    run.refresh_from_db()
    assert report.preempted == [] and run.preempting_since is None and run.state == RunState.RUNNING
    assert not PreemptionEvent.objects.exists()


def test_a_checkpoint_the_run_printed_to_its_log_is_where_it_resumes_after_an_interruption(
        member, team, quota, published, fake_backend):
    """A run that prints ``SLIPWAY_CHECKPOINT step=… path=…`` instead of POSTing: the interruption reads the
    line, as a reclaim does, while its pods still answer — its lost work counts from it, and attempt 2 resumes
    from it rather than from scratch."""
    data = {k: v for k, v in run_payload(spot=True, gpus_per_worker=2, checkpoint={"grace_seconds": 30}).items()
            if k != "team"}
    run = applied(submit_run(member, team, data), fake_backend)
    t0 = timezone.now().replace(microsecond=0) - timedelta(minutes=12)
    fake_backend.set_running(NS, run.object_name, units=2, started=iso(t0))
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=2))
    written = t0 + timedelta(minutes=10)
    [pod] = fake_backend.pod_lists[(NS, run.object_name)]
    fake_backend.log_lines[pod["metadata"]["name"]] = [
        f"{iso(t0 + timedelta(minutes=5))} SLIPWAY_CHECKPOINT step=100 path=/slipway/checkpoints/step-100",
        f"{iso(written)} SLIPWAY_CHECKPOINT step=200 path=/slipway/checkpoints/step-200", "epoch 3"]
    disrupt(fake_backend, run)
    assert rec.reconcile(fake_backend).preempted == [run.ref]
    run.refresh_from_db()
    assert (run.last_checkpoint_step, run.last_checkpoint_path) == (200, "/slipway/checkpoints/step-200")
    assert run.last_checkpoint_at == written
    event = PreemptionEvent.objects.get(ref=run.ref)
    assert "2 min of work since its last checkpoint lost" in event.reason  # from the line's time, not the start

    assert rec.reconcile(fake_backend).requeued == [run.ref]
    assert applied(TrainingRun.objects.get(pk=run.pk), fake_backend).attempt == 2
    job = fake_backend.main_object(NS, run.object_name)
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["SLIPWAY_ATTEMPT"], env["SLIPWAY_RESUME_FROM"]) == ("2", "/slipway/checkpoints/step-200")


def test_an_on_demand_trainjobs_drained_node_is_an_interruption_not_a_spot_reclaim(
        fake_backend, member, team, quota, published, api_client_for, client):
    """A TrainJob's set fails at once on a disrupted pod (Slipway's runtimes), so an on-demand run goes back to the
    queue too; but no provider reclaimed spot capacity: its log, reason, attempt and notice say its node was drained
    or lost (cause ``disruption``), never "spot capacity reclaimed"."""
    Cluster.objects.create(name="default", training_api=TRAINJOB,
                           training_runtimes=[{"name": "slipway-pytorch", "framework": "pytorch"}])
    api = api_client_for(member)
    created = api.post("/api/v1/runs/", {
        "team": team.slug, "name": "ddp", "image": "registry.example.com/t:1", "command": ["python", "train.py"],
        "flavor": "a100-80gb", "gpus_per_worker": 1, "workers": 2}, format="json")
    assert created.status_code == 201, created.json()
    run = TrainingRun.objects.get(pk=created.json()["id"])
    assert apply_workload("run", run.pk) == "applied"
    assert fake_backend.main_object(NS, run.object_name)["kind"] == "TrainJob"
    t0 = timezone.now().replace(microsecond=0) - timedelta(minutes=12)
    fake_backend.set_running(NS, run.object_name, units=2, started=iso(t0))
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=2))

    disrupt(fake_backend, run, "EvictionByEvictionAPI")
    assert rec.reconcile(fake_backend).preempted == [run.ref]
    run.refresh_from_db()
    assert run.reason == "interrupted: its node drained or lost; its pods are stopping"
    event = PreemptionEvent.objects.get(ref=run.ref)
    assert (event.cause, event.by_team, event.grace_seconds) == ("disruption", None, 0)
    assert event.reason.startswith("interrupted: its node drained or lost (EvictionByEvictionAPI); 12 min of work")
    assert "spot" not in event.reason
    assert rec.reconcile(fake_backend).requeued == [run.ref]

    client.force_login(member)
    [log] = client.get(f"/api/v1/runs/{run.pk}/preemptions/").json()
    assert (log["cause"], log["by_team"]) == ("disruption", None)
    [first] = client.get(f"/api/v1/runs/{run.pk}/attempts/").json()
    assert first["ended"] == "interrupted"
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Its on-demand node drained or lost" in page and "Spot capacity reclaimed" not in page
