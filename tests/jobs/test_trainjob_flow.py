"""A distributed run on a Trainer v2 cluster (issue 51 points 2, 3, 5; docs/training.md), through the product's
seams: submitted with a framework, applied as a TrainJob on the cluster's runtime, observed with its trainer's
status, whose progress answers on the API, the run page and the queue's estimates while the run reports nothing
of its own — and yields to the run's own reports once they come.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from cluster.training import TRAINJOB
from fleet.models import Cluster
from jobs import metrics
from jobs.constants import RunState
from jobs.models import TrainingRun
from workloads.registry import kind_for
from workloads.tasks import apply_workload, reconcile_cluster

pytestmark = pytest.mark.django_db
NS = "team-ml-research"


def iso(dt) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def trainer_v2(fake_backend):
    """The one cluster runs Kubeflow Trainer v2 with Slipway's runtimes for pytorch and jax."""
    return Cluster.objects.create(name="default", training_api=TRAINJOB, training_runtimes=[
        {"name": "slipway-jax", "framework": "jax"}, {"name": "slipway-pytorch", "framework": "pytorch"}])


def test_a_jax_run_is_a_trainjob_on_the_clusters_runtime_and_shows_its_trainers_progress(
        trainer_v2, fake_backend, member, team, quota, published, api_client_for, client):
    api = api_client_for(member)
    created = api.post("/api/v1/runs/", {"team": team.slug, "name": "jaxrun", "image": "registry.example.com/t:1",
                                         "command": ["python", "train.py"], "flavor": "a100-80gb",
                                         "gpus_per_worker": 2, "workers": 2, "framework": "jax"}, format="json")
    assert created.status_code == 201, created.json()
    assert (created.json()["framework"], created.json()["resource_kind"]) == ("jax", "TrainJob")
    run = TrainingRun.objects.get(pk=created.json()["id"])
    assert apply_workload("run", run.pk) == "applied"
    trainjob = fake_backend.main_object(NS, run.object_name)
    assert trainjob["kind"] == "TrainJob" and trainjob["spec"]["runtimeRef"]["name"] == "slipway-jax"
    assert trainjob["spec"]["trainer"]["numNodes"] == 2
    assert trainjob["spec"]["trainer"]["command"] == ["python", "train.py"]  # no torchrun: jax runs its own
    # What was applied is what the manifest endpoint shows.
    shown = api.get(f"/api/v1/runs/{run.pk}/manifest/").json()
    assert [o["kind"] for o in shown] == ["TrainJob"] and shown[0]["spec"] == trainjob["spec"]

    now = timezone.now().replace(microsecond=0)
    started = now - timedelta(minutes=10)
    fake_backend.set_running(NS, run.object_name, 4, started=iso(started))
    trainjob["status"] = {"conditions": [{"type": "Created", "status": "True", "lastTransitionTime": iso(started)}],
                          "trainerStatus": {"progressPercentage": 25, "estimatedRemainingSeconds": 1800,
                                            "lastUpdatedTime": iso(now),
                                            "metrics": [{"name": "loss", "value": "1.25"}]}}
    assert reconcile_cluster("default").startswith("observed=")
    run.refresh_from_db()
    assert run.state == RunState.RUNNING
    assert run.trainer_status["percent"] == 25 and run.trainer_status["metrics"] == [["loss", "1.25"]]
    progress = api.get(f"/api/v1/runs/{run.pk}/").json()["progress"]
    assert (progress["source"], progress["percent"], progress["step"]) == ("trainer", 25.0, None)
    assert progress["trainer_metrics"] == {"loss": "1.25"}
    assert progress["eta"] is not None and 1700 <= progress["eta_seconds"] <= 1800
    # The queue's start estimates read the same ETA.
    ends = kind_for("run").progress_ends([run], timezone.now())
    assert abs((ends[run.ref] - (now + timedelta(seconds=1800))).total_seconds()) < 1
    client.force_login(member)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "25.0 % (the trainer's status)" in page and "says the trainer" in page

    # The run reports its own progress: fresh, it wins (it counts steps and measures a rate).
    metrics.report_metrics(TrainingRun.objects.get(pk=run.pk), {"progress": {"step": 300, "total": 1000}}, now)
    progress = api.get(f"/api/v1/runs/{run.pk}/").json()["progress"]
    assert (progress["source"], progress["step"], progress["total"]) == ("run", 300, 1000)


def test_a_framework_only_trainer_v2_runs_is_refused_on_a_v1_cluster_naming_the_api(
        fake_backend, member, team, quota, published, api_client_for):
    Cluster.objects.create(name="default")  # never asked: taken to have the v1 PyTorchJob
    api = api_client_for(member)
    payload = {"team": team.slug, "name": "jaxrun", "image": "registry.example.com/t:1", "command": ["python"],
               "flavor": "a100-80gb", "gpus_per_worker": 1, "workers": 2, "framework": "jax"}
    refused = api.post("/api/v1/runs/", payload, format="json")
    assert refused.status_code == 400
    assert refused.json()["errors"]["framework"] == [
        "No cluster takes distributed jax training now: default has the v1 Training Operator (PyTorchJob), which "
        "runs pytorch only, not jax. A run of 2 workers is distributed training; one worker needs no training API."]
    # One worker is a plain Job: any cluster runs it, whatever its framework.
    assert api.post("/api/v1/runs/", {**payload, "workers": 1}, format="json").status_code == 201


def test_the_new_run_forms_framework_picker_names_the_clusters_that_offer_each(trainer_v2, member, team, quota, client):
    client.force_login(member)
    page = client.get(reverse("jobs:run-new")).content.decode()
    assert '<option value="jax">jax (default)</option>' in page
    assert '<option value="pytorch" selected>pytorch (default)</option>' in page
    assert '<option value="mpi">mpi (no cluster offers it now)</option>' in page
