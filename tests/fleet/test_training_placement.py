"""Placement by training API (issue 51, point 2's last sentence; docs/training.md "Placement").

A distributed run (a PyTorchJob or a TrainJob) goes only to a cluster whose training API takes its framework; a
run no cluster could take is a 400 on ``workers`` (``framework`` when it names one) naming those that could; the
price it is quoted follows the same rule; single-node runs are unaffected. Two scripted clusters (tests/fleet/conftest.py): ``east``
with 2 free A100s, ``west`` with 8.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

import fleet.services as fleet
from billing.models import ClusterPrice
from cluster.errors import Transient
from cluster.placement import Rejected
from cluster.training import NONE, PYTORCHJOB, TRAINJOB
from fleet.models import Cluster
from jobs.models import TrainingRun
from tests.fleet.conftest import apply
from tests.jobs.conftest import run_payload
from workloads.cycle import placement
from workloads.models import ReasonCode
from workloads.registry import kind_for
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db


def training_apis(**apis: str) -> None:
    """What discovery found on each cluster (``east="none"``)."""
    for name, api in apis.items():
        Cluster.objects.filter(name=name).update(training_api=api)


def test_a_distributed_run_goes_only_where_the_training_api_takes_it_and_a_single_node_run_anywhere(clusters, submit):
    training_apis(east=PYTORCHJOB, west=NONE)
    single = apply(submit(name="single", gpus_per_worker=1))
    assert single.cluster.name == "west"  # the most free units: a plain Job needs no training API
    distributed = apply(submit(name="ddp", gpus_per_worker=1, workers=2))
    assert distributed.cluster.name == "east"  # west has more room, but no training API
    assert distributed.placement_reason.startswith("east: the only cluster that can take it now")
    assert [k for (_ns, k, _n) in clusters["east"].objects if k == "PyTorchJob"] == ["PyTorchJob"]
    rejected = placement.choose(kind_for("run"), distributed, timezone.now()).rejected
    assert [(r.cluster, r.reason.code) for r in rejected] == [("west", Rejected.TRAINING_API)]


def test_the_override_counts_as_discovery_does(clusters, submit, staff, api_client_for):
    training_apis(east=PYTORCHJOB, west=PYTORCHJOB)
    api_client_for(staff).patch("/api/v1/clusters/west/", {"training_api_override": NONE}, format="json")
    assert apply(submit(name="ddp", gpus_per_worker=1, workers=2)).cluster.name == "east"


def test_a_run_no_cluster_could_take_is_a_400_on_workers_naming_the_clusters_that_could(
    clusters, member, quota, api_client_for
):
    training_apis(east=NONE, west=PYTORCHJOB)
    client = api_client_for(member)
    onprem = run_payload(name="ddp", workers=2, gpus_per_worker=1, cluster_selector={"site": "onprem"})
    for url in ("/api/v1/runs/", "/api/v1/runs/?dry_run=1"):
        response = client.post(url, onprem, format="json")
        assert response.status_code == 400, response.json()
        [words] = response.json()["errors"]["workers"]
        assert words.startswith(
            "Only west takes distributed pytorch training, and the cluster selector leaves it out: east has no "
            "training API"
        )
        assert words.endswith("A run of 2 workers is distributed training; one worker needs no training API.")
    assert not TrainingRun.objects.filter(name="ddp").exists()
    # One worker on the same cluster needs no training API.
    single = run_payload(name="single", gpus_per_worker=1, cluster_selector={"site": "onprem"})
    assert client.post("/api/v1/runs/", single, format="json").status_code == 201
    # No cluster at all: it says so, and names why each cannot.
    training_apis(west=TRAINJOB)  # Trainer v2 with no runtime (discovery found none)
    response = client.post("/api/v1/runs/", run_payload(name="ddp2", workers=2, gpus_per_worker=1), format="json")
    [words] = response.json()["errors"]["workers"]
    assert words.startswith("No cluster takes distributed pytorch training now: east has no training API")
    assert "west has Trainer v2 (TrainJob) with no runtime for pytorch" in words


def test_a_framework_no_cluster_offers_is_a_400_on_framework_naming_the_clusters_that_do(
    clusters, member, quota, api_client_for
):
    training_apis(east=TRAINJOB, west=PYTORCHJOB)
    Cluster.objects.filter(name="east").update(training_runtimes=[{"name": "slipway-jax", "framework": "jax"}])
    client = api_client_for(member)
    jax = run_payload(name="jax", workers=2, gpus_per_worker=1, framework="jax", cluster_selector={"site": "cloud"})
    for url in ("/api/v1/runs/", "/api/v1/runs/?dry_run=1"):
        response = client.post(url, jax, format="json")
        assert response.status_code == 400, response.json()
        [words] = response.json()["errors"]["framework"]
        assert words.startswith("Only east takes distributed jax training, and the cluster selector leaves it out: "
                                "west has the v1 Training Operator (PyTorchJob), which runs pytorch only, not jax")
    assert not TrainingRun.objects.filter(name="jax").exists()
    # Without the selector it goes to east, the cluster with the runtime, as a TrainJob.
    placed = apply(TrainingRun.objects.get(pk=client.post(
        "/api/v1/runs/", {**jax, "cluster_selector": {}}, format="json").json()["id"]))
    assert placed.cluster.name == "east"
    assert [k for (_ns, k, _n) in clusters["east"].objects if k == "TrainJob"] == ["TrainJob"]
    unknown = client.post("/api/v1/runs/", {**jax, "framework": "caffe"}, format="json")
    assert unknown.status_code == 400 and unknown.json()["errors"]["framework"] == [
        "Must be one of: pytorch, deepspeed, jax, mpi, xgboost."]


def test_the_price_quoted_follows_the_same_rule(clusters, member, quota, api_client_for, flavors):
    a100 = flavors["a100-80gb"]
    ClusterPrice.objects.create(cluster=Cluster.objects.get(name="east"), flavor=a100, price_per_hour=Decimal("2.00"))
    ClusterPrice.objects.create(cluster=Cluster.objects.get(name="west"), flavor=a100, price_per_hour=Decimal("5.00"))
    for cluster in Cluster.objects.all():
        fleet.record_nodes(cluster, clusters[cluster.name].capacity(), timezone.now())
    training_apis(east=NONE, west=PYTORCHJOB)
    client = api_client_for(member)
    ddp = client.post("/api/v1/runs/?dry_run=1", run_payload(workers=2, gpus_per_worker=1), format="json").json()
    single = client.post("/api/v1/runs/?dry_run=1", run_payload(gpus_per_worker=1), format="json").json()
    assert (Decimal(ddp["price_per_hour"]), Decimal(single["price_per_hour"])) == (Decimal("5.00"), Decimal("2.00"))
    # A run submitted and not placed yet is quoted where placement would put it, and the range is of those clusters.
    run = TrainingRun.objects.get(
        pk=client.post("/api/v1/runs/", run_payload(workers=2, gpus_per_worker=1), format="json").json()["id"]
    )
    quote = run.price_quote()
    assert (quote.cluster, quote.price, quote.low, quote.high, quote.placed) == (
        "west",
        Decimal("5.00"),
        Decimal("5.00"),
        Decimal("5.00"),
        False,
    )


def test_an_admitted_run_no_cluster_can_take_any_more_says_why_where_the_queue_shows_it(clusters, submit):
    training_apis(east=NONE, west=PYTORCHJOB)
    run = submit(name="ddp", gpus_per_worker=1, workers=2)
    training_apis(west=NONE)  # staff removed the operator after the run was admitted
    with pytest.raises(Transient, match="no cluster can take run:"):
        apply_workload("run", run.pk)
    run.refresh_from_db()
    assert run.cluster is None and run.reason_code == ReasonCode.NO_CLUSTER
    assert run.reason == (
        "no cluster can take it: east: has no training API (neither Trainer v2's TrainJob nor "
        "the v1 PyTorchJob); west: has no training API (neither Trainer v2's TrainJob nor the v1 "
        "PyTorchJob)"
    )
    training_apis(west=PYTORCHJOB)  # reinstalled: the next try places it
    assert apply(run).cluster.name == "west"
    assert run.reason_code == ReasonCode.SUBMITTED


def test_a_single_cluster_install_keeps_its_shortcut_but_not_for_a_run_it_cannot_take(settings, submit, flavors):
    from tests.backends import use_backend
    from tests.fakes import FakeBackend
    from tests.fleet.conftest import node

    use_backend(settings, FakeBackend(nodes=[node("gpu-0", flavors["a100-80gb"], free=8)]))
    only = Cluster.objects.create(name="default", training_api=PYTORCHJOB)
    run = submit(name="ddp", gpus_per_worker=1, workers=2)
    Cluster.objects.filter(pk=only.pk).update(training_api_override=NONE)
    with pytest.raises(Transient):
        apply_workload("run", run.pk)
    run.refresh_from_db()
    assert run.reason.startswith("no cluster can take it: default: has no training API")


def test_a_distributed_run_waits_in_the_queue_while_the_only_cluster_that_takes_it_is_lost(clusters, submit):
    """Admission asks placement's rule (issue 51): east has no training API, west is lost, so the run waits
    with why, holding nothing — not admitted to an apply no cluster could take. Single-node work goes on."""
    training_apis(east=NONE, west=PYTORCHJOB)
    Cluster.objects.filter(name="west").update(health="lost")
    waiting = submit(name="ddp", gpus_per_worker=1, workers=2)
    assert waiting.state == "queued" and waiting.reason == "waiting: no cluster takes new work now: west is lost"
    assert submit(name="single", gpus_per_worker=1).state == "admitted"  # east takes a plain Job
