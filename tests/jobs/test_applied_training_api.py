"""A run is what it was applied as: a PyTorchJob stays one when its cluster moves to Trainer v2 (docs/training.md
"Moving a cluster from v1 to v2": work running under v1 finishes under v1).

The cluster's discovery finds Trainer v2 while a distributed run applied as a PyTorchJob runs. The run's kind is
still the PyTorchJob's everywhere: the API's ``resource_kind``, the manifest endpoint (what was applied, not a
TrainJob nobody applied), and a drained pod, which a PyTorchJob restarts itself — not the TrainJob's rule that
takes the whole on-demand run back to the queue at zero grace as "spot capacity reclaimed". Its next attempt is
applied as the cluster has it then: a TrainJob.
"""

from __future__ import annotations

from datetime import timedelta
from importlib import import_module

import pytest
from celery.exceptions import Retry
from django.apps import apps
from django.utils import timezone

from billing.models import PreemptionEvent
from cluster.errors import Transient
from cluster.training import PYTORCHJOB, TRAINJOB
from fleet.models import Cluster
from jobs.constants import RunState
from jobs.models import TrainingRun
from tests.jobs.conftest import submit_run_as
from tests.jobs.test_spot_interruption import disrupt
from workloads.cycle import reconcile as rec
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db
NS = "team-ml-research"
RUNTIMES = [{"name": "slipway-pytorch", "framework": "pytorch"}]


def iso(dt) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def v1_cluster(fake_backend):
    """The one cluster, found to have the v1 Training Operator."""
    return Cluster.objects.create(name="default", training_api=PYTORCHJOB)


@pytest.fixture
def running_v1(v1_cluster, fake_backend, member, team, quota, published, api_client_for):
    """``make(spot)``: a distributed pytorch run applied as a PyTorchJob and running; then the cluster's discovery
    finds Trainer v2 (installed beside the v1 operator, with Slipway's runtimes)."""
    api = api_client_for(member)

    def make(spot: bool = False) -> tuple[TrainingRun, dict]:
        created = api.post("/api/v1/runs/", {
            "team": team.slug, "name": "ddp", "image": "registry.example.com/t:1", "command": ["python", "train.py"],
            "flavor": "a100-80gb", "gpus_per_worker": 1, "workers": 2, "spot": spot}, format="json")
        assert created.status_code == 201, created.json()
        run = TrainingRun.objects.get(pk=created.json()["id"])
        assert apply_workload("run", run.pk) == "applied"
        applied = fake_backend.main_object(NS, run.object_name)
        assert applied["kind"] == "PyTorchJob"
        t0 = timezone.now().replace(microsecond=0) - timedelta(minutes=12)
        fake_backend.set_running(NS, run.object_name, units=2, started=iso(t0))
        rec.reconcile(fake_backend, now=t0 + timedelta(minutes=2))
        run.refresh_from_db()
        assert run.state == RunState.RUNNING
        Cluster.objects.filter(pk=v1_cluster.pk).update(training_api=TRAINJOB, training_runtimes=RUNTIMES)
        return run, applied

    return make


def test_a_run_applied_as_a_pytorchjob_stays_one_on_the_api_and_its_manifest(running_v1, member, api_client_for):
    run, applied = running_v1()
    api = api_client_for(member)
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["resource_kind"] == "PyTorchJob"
    shown = api.get(f"/api/v1/runs/{run.pk}/manifest/").json()
    assert [o["kind"] for o in shown] == ["PyTorchJob"] and shown[0]["spec"] == applied["spec"]


def test_a_drained_pod_of_an_on_demand_pytorchjob_is_its_own_to_restart_after_the_move(running_v1, fake_backend):
    run, _applied = running_v1(spot=False)
    disrupt(fake_backend, run, "EvictionByEvictionAPI")
    report = rec.reconcile(fake_backend)
    run.refresh_from_db()
    assert report.preempted == [] and run.preempting_since is None and run.state == RunState.RUNNING
    assert not PreemptionEvent.objects.exists()
    assert "delete" not in fake_backend.calls


def test_a_requeued_runs_next_attempt_is_applied_as_its_cluster_has_it_then(running_v1, fake_backend, published):
    run, _applied = running_v1(spot=True)
    disrupt(fake_backend, run)  # its spot node reclaimed: back to the queue, as under v1
    assert rec.reconcile(fake_backend).preempted == [run.ref]
    assert rec.reconcile(fake_backend).requeued == [run.ref]
    run.refresh_from_db()
    assert (run.state, run.attempt, run.resource_kind) == (RunState.ADMITTED, 2, "TrainJob")  # what it would be now
    assert apply_workload("run", run.pk) == "applied"
    run.refresh_from_db()
    assert fake_backend.main_object(NS, run.object_name)["kind"] == "TrainJob"
    assert (run.applied_training_api, run.resource_kind) == (TRAINJOB, "TrainJob")
    # Fixed for this attempt: a cluster moved back to v1 meanwhile does not make it a PyTorchJob.
    Cluster.objects.filter(name="default").update(training_api_override=PYTORCHJOB)
    assert TrainingRun.objects.get(pk=run.pk).resource_kind == "TrainJob"


def submitted_with_a_failed_first_try(api, team, fake_backend) -> TrainingRun:
    """A distributed pytorch run whose first apply try failed (503): what it rendered may have reached the cluster."""
    created = api.post("/api/v1/runs/", {
        "team": team.slug, "name": "ddp", "image": "registry.example.com/t:1", "command": ["python"],
        "flavor": "a100-80gb", "gpus_per_worker": 1, "workers": 2}, format="json").json()
    run = TrainingRun.objects.get(pk=created["id"])
    fake_backend.fail_with = Transient("503 Service Unavailable", status=503)
    with pytest.raises(Retry):
        apply_workload.apply(args=("run", run.pk), throw=True)
    fake_backend.fail_with = None
    return run


def test_a_retried_apply_keeps_the_api_its_first_try_fixed(v1_cluster, fake_backend, member, team, quota, published,
                                                           api_client_for):
    # The first try's PyTorchJob may have reached the cluster before the error: a retry renders what it did.
    run = submitted_with_a_failed_first_try(api_client_for(member), team, fake_backend)
    Cluster.objects.filter(pk=v1_cluster.pk).update(training_api=TRAINJOB, training_runtimes=RUNTIMES)
    assert apply_workload("run", run.pk) == "applied"
    assert [o["kind"] for o in fake_backend.applied[-1]][-1] == "PyTorchJob"


def test_the_migration_gives_runs_whose_apply_began_their_clusters_api_now(v1_cluster, member, team, quota):
    """What existing runs were applied as was never kept: the data step takes what the portal took them for."""
    applied, trying, _queued = (submit_run_as(member, team, name=name, gpus_per_worker=1, workers=2)
                                for name in ("applied", "trying", "queued"))
    TrainingRun.objects.filter(pk=applied.pk).update(cluster=v1_cluster, applied_at=timezone.now())
    TrainingRun.objects.filter(pk=trying.pk).update(cluster=v1_cluster, apply_attempts=2)
    Cluster.objects.filter(pk=v1_cluster.pk).update(training_api_override=TRAINJOB)
    import_module("jobs.migrations.0019_applied_training_api").fix_applied_runs(apps, None)
    fixed = dict(TrainingRun.objects.values_list("name", "applied_training_api"))
    assert fixed == {"applied": TRAINJOB, "trying": TRAINJOB, "queued": ""}


def test_a_trainjobs_runtime_is_the_one_its_attempt_was_first_applied_with(fake_backend, member, team, quota,
                                                                            published, api_client_for):
    """A TrainJob's runtimeRef cannot change once it exists: a retry of its attempt, after discovery found Slipway's
    own runtime beside the one it was applied with, named the new one (a 422 on a real cluster) and the manifest
    showed a runtime the run did not run on."""
    cluster = Cluster.objects.create(name="default", training_api=TRAINJOB,
                                     training_runtimes=[{"name": "torch-distributed", "framework": "pytorch"}])
    api = api_client_for(member)
    run = submitted_with_a_failed_first_try(api, team, fake_backend)
    Cluster.objects.filter(pk=cluster.pk).update(training_runtimes=[
        {"name": "torch-distributed", "framework": "pytorch"}, *RUNTIMES])
    assert apply_workload("run", run.pk) == "applied"
    trainjob = fake_backend.applied[-1][-1]
    assert (trainjob["kind"], trainjob["spec"]["runtimeRef"]["name"]) == ("TrainJob", "torch-distributed")
    shown = api.get(f"/api/v1/runs/{run.pk}/manifest/").json()
    assert [o["spec"]["runtimeRef"]["name"] for o in shown if o["kind"] == "TrainJob"] == ["torch-distributed"]
    # Its next attempt is applied as its cluster has it then: with Slipway's own runtime.
    TrainingRun.objects.filter(pk=run.pk).update(applied_at=None, apply_attempts=0)
    assert TrainingRun.objects.get(pk=run.pk).training_runtime == "slipway-pytorch"
