"""A run's nodes asked for all at once on an atomic elastic pool (issue 52; workloads/provisioning.py).

``east`` has no A100 node up and an atomic pool that may grow to 4 nodes of 8 (a scripted cluster, tests/fakes.py,
whose ProvisioningRequest conditions the test writes as Cluster Autoscaler would). A 4-worker run of 8 GPUs each:

* its apply creates the ProvisioningRequest and its PodTemplates, nothing that runs; the run waits, admitted, with
  the reason code ``provisioning`` and words naming the pool; the manifest API shows the request;
* Provisioned: the pool remembers how long it took and the run starts, its pods consuming the booking;
* Failed: the request goes, the run queues again with the autoscaler's words and Kueue's backoff (60 s, then
  120 s), is not admitted before it, and fails after the third try — nothing billed at any point.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import QuotaHold, UsageRecord
from cluster.pools import CONSUME_ANNOTATION, DO_NOT_DISRUPT, MAX_TRIES
from fleet.models import Cluster, NodePool
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas import admission
from quotas.demo import seed_team_quotas
from quotas.models import QueuedRequest
from tests.backends import use_backends
from tests.fakes import FakeBackend
from tests.fleet.conftest import node
from tests.jobs.conftest import submit_run_as
from workloads.cycle import reconcile as rec
from workloads.models import ReasonCode
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def east(settings, flavors, published, team):
    """``east``: no A100 node up, an atomic pool of at most 4 A100 nodes; the team may hold 32 A100s."""
    seed_team_quotas(team, {"a100-80gb": 32}, Decimal("1000000"))
    backend = use_backends(settings, {"east": FakeBackend(nodes=[])})["east"]
    cluster = Cluster.objects.create(name="east")
    NodePool.objects.create(cluster=cluster, flavor=flavors["a100-80gb"], min_nodes=0, max_nodes=4, mode="atomic")
    rec.reconcile()
    return backend


def gang(member, team) -> TrainingRun:
    run = submit_run_as(member, team, name="big", gpus_per_worker=8, workers=4)
    assert run.state == RunState.ADMITTED
    return run


def objects_of(backend: FakeBackend, kind: str) -> dict[str, dict]:
    return {name: obj for (_ns, k, name), obj in backend.objects.items() if k == kind}


def set_request(backend: FakeBackend, name: str, condition: str, message: str = "") -> None:
    request = objects_of(backend, "ProvisioningRequest")[name]
    request["status"] = {"conditions": [
        {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "", "lastTransitionTime": "2026-11-28T10:00:00Z"},
        {"type": condition, "status": "True", "reason": condition, "message": message,
         "lastTransitionTime": "2026-11-28T10:04:00Z"}]}


def nodes_up(backend: FakeBackend, flavors, count: int) -> None:
    backend.nodes = [node(f"east-a100-{i}", flavors["a100-80gb"], free=8) for i in range(count)]


def test_while_its_request_is_applied_the_run_already_says_what_it_waits_for(east, member, team, monkeypatch):
    """The reason code and its words move in one write: a reader during the apply (seconds on a slow boot) saw
    ``provisioning`` beside "admitted; waiting for a worker…", the words of the step before."""
    run = gang(member, team)
    seen = []
    apply = east.apply

    def reading_the_row(objects, resources=()):
        seen.append(TrainingRun.objects.values_list("reason_code", "reason").get(pk=run.pk))
        return apply(objects, resources)

    monkeypatch.setattr(east, "apply", reading_the_row)
    assert apply_workload("run", run.pk) == "provisioning"
    [(code, reason)] = seen
    assert code == ReasonCode.PROVISIONING and reason.startswith("pool a100-80gb on east growing: node 0 of 4 ready"), (
        code, reason)


def test_a_gang_waits_for_all_its_nodes_then_starts_on_them_and_nothing_is_billed_before(east, member, team,
                                                                                        flavors, api_client_for):
    run = gang(member, team)
    assert apply_workload("run", run.pk) == "provisioning"
    run.refresh_from_db()
    name = f"{run.object_name}-nodes-1-1"
    requests = objects_of(east, "ProvisioningRequest")
    assert list(requests) == [name] and not objects_of(east, "PyTorchJob")
    request = requests[name]
    assert request["spec"]["provisioningClassName"] == "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    assert sum(s["count"] for s in request["spec"]["podSets"]) == 4
    assert {s["podTemplateRef"]["name"] for s in request["spec"]["podSets"]} == set(objects_of(east, "PodTemplate"))
    assert (run.state, run.reason_code) == (RunState.ADMITTED, ReasonCode.PROVISIONING)
    assert run.reason.startswith("pool a100-80gb on east growing: node 0 of 4 ready, about ")
    # The manifest API shows the request and its templates while it exists, before the run's own objects.
    shown = api_client_for(member).get(f"/api/v1/runs/{run.pk}/manifest/").json()
    kinds = [o["kind"] for o in shown]
    assert kinds[-1] == "PyTorchJob" and kinds.index("ProvisioningRequest") < kinds.index("PyTorchJob")
    assert "PodTemplate" in kinds

    # Pending: two of its nodes are up, the words say so; still nothing runs, nothing is billed.
    nodes_up(east, flavors, 2)
    rec.reconcile()
    run.refresh_from_db()
    assert run.reason_code == ReasonCode.PROVISIONING and "node 2 of 4 ready" in run.reason
    assert not objects_of(east, "PyTorchJob")

    # Provisioned: the pool remembers how long it took, and the cycle re-drives the apply, which starts it.
    nodes_up(east, flavors, 4)
    set_request(east, name, "Provisioned")
    report = rec.reconcile()
    assert run.identity in report.redriven
    assert len(NodePool.objects.get().history_seconds) == 1
    assert apply_workload("run", run.pk) == "applied"
    job = next(iter(objects_of(east, "PyTorchJob").values()))
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        annotations = replica["template"]["metadata"]["annotations"]
        assert annotations[CONSUME_ANNOTATION] == name
        assert DO_NOT_DISRUPT.items() <= annotations.items()  # no checkpoint contract: never evicted by scale-down
    assert not UsageRecord.objects.filter(ref=run.ref).exists()
    assert QuotaHold.objects.get(ref=run.ref).started_at is None


def test_ready_nodes_that_hold_it_start_it_at_once(east, member, team, flavors):
    nodes_up(east, flavors, 4)
    rec.reconcile()
    run = gang(member, team)
    assert apply_workload("run", run.pk) == "applied"
    assert not objects_of(east, "ProvisioningRequest") and objects_of(east, "PyTorchJob")


def test_an_any_pool_never_asks_its_autoscaler_adds_nodes_for_the_pods_as_they_come(east, member, team):
    NodePool.objects.update(mode="any")
    run = gang(member, team)
    assert apply_workload("run", run.pk) == "applied"
    assert not objects_of(east, "ProvisioningRequest") and objects_of(east, "PyTorchJob")


def test_a_failed_provisioning_requeues_with_its_words_and_backoff_and_the_last_try_fails_it(east, member, team):
    run = gang(member, team)
    for attempt in range(1, MAX_TRIES + 1):
        assert apply_workload("run", run.pk) == "provisioning"
        name = f"{run.object_name}-nodes-1-{attempt}"
        assert name in objects_of(east, "ProvisioningRequest")
        set_request(east, name, "Failed", "NotEnoughCapacity: zone us-east1-b has no a2-ultragpu-8g left")
        before = timezone.now()
        rec.reconcile()
        run.refresh_from_db()
        assert name not in objects_of(east, "ProvisioningRequest")  # the request went with the try
        assert not objects_of(east, "PyTorchJob")
        if attempt == MAX_TRIES:
            break
        assert (run.state, run.reason_code, run.cluster_id) == (RunState.QUEUED, ReasonCode.PROVISIONING_FAILED, None)
        assert "zone us-east1-b has no a2-ultragpu-8g left" in run.reason
        assert f"(try {attempt + 1} of {MAX_TRIES})" in run.reason
        entry = QueuedRequest.objects.get(ref=run.ref)
        backoff = (entry.not_before - before).total_seconds()
        assert 60 * 2 ** (attempt - 1) - 5 <= backoff <= 60 * 2 ** (attempt - 1) + 5
        # Not admitted while it backs off, whatever frees up; admitted once the backoff is over.
        assert admission.admit_waiting(team) == []
        QueuedRequest.objects.filter(pk=entry.pk).update(not_before=timezone.now() - timedelta(seconds=1))
        assert admission.admit_waiting(team) == [run.ref]
        run.refresh_from_db()
    assert run.state == RunState.FAILED and run.reason_code == ReasonCode.PROVISIONING_FAILED
    assert f"could not be provisioned in {MAX_TRIES} tries (pool a100-80gb on east)" in run.reason
    assert not QuotaHold.objects.filter(ref=run.ref, released_at__isnull=True).exists()
    assert run.billed_cost == 0 and not UsageRecord.objects.filter(ref=run.ref).exists()


def test_a_failed_provisionings_backoff_is_the_configured_one_doubling_to_its_cap(east, member, team, settings):
    """SLIPWAY_PROVISIONING_BACKOFF_SECONDS and its cap, as Kueue's retryStrategy sets them (docs/pools.md)."""
    settings.SLIPWAY_PROVISIONING_BACKOFF_SECONDS, settings.SLIPWAY_PROVISIONING_BACKOFF_MAX_SECONDS = 7, 10
    run = gang(member, team)
    for attempt, waits in ((1, 7), (2, 10)):  # 7 s, then 14 s held to 10
        assert apply_workload("run", run.pk) == "provisioning"
        set_request(east, f"{run.object_name}-nodes-1-{attempt}", "Failed", "NotEnoughCapacity: no a2-ultragpu-8g")
        before = timezone.now()
        rec.reconcile()
        entry = QueuedRequest.objects.get(ref=run.ref)
        assert waits - 2 <= (entry.not_before - before).total_seconds() <= waits + 2
        assert admission.admit_waiting(team) == []
        QueuedRequest.objects.filter(pk=entry.pk).update(not_before=timezone.now() - timedelta(seconds=1))
        assert admission.admit_waiting(team) == [run.ref]
        run.refresh_from_db()


def test_a_failed_provisioning_keeps_a_run_that_resumes_a_checkpoint_on_its_cluster(east, member, team, settings):
    """A run that goes on from a checkpoint on east (its next attempt, kept there as a preempted run is) is queued
    again on east when its nodes do not come: placed afresh it would start elsewhere without its checkpoint, and
    the claim holding it would be deleted. Its wait for east counts from when it is placed there again."""
    run = submit_run_as(member, team, name="big", gpus_per_worker=8, workers=4, checkpoint={"grace_seconds": 30})
    assert run.state == RunState.ADMITTED
    cluster = Cluster.objects.get(name="east")
    # Its next attempt, kept on east, where its earlier one saved a checkpoint in its claim.
    TrainingRun.objects.filter(pk=run.pk).update(attempt=2, cluster=cluster, last_checkpoint_at=timezone.now(),
                                                 last_checkpoint_step=300, last_checkpoint_path="/checkpoints/step-300")
    assert apply_workload("run", run.pk) == "provisioning"
    set_request(east, f"{run.object_name}-nodes-2-1", "Failed", "NotEnoughCapacity: no a2-ultragpu-8g left")
    rec.reconcile()
    run.refresh_from_db()
    assert (run.state, run.reason_code, run.cluster_id) == (RunState.QUEUED, ReasonCode.PROVISIONING_FAILED, cluster.pk)
    assert run.placed_at is None
    QueuedRequest.objects.filter(ref=run.ref).update(not_before=timezone.now() - timedelta(seconds=1))
    assert admission.admit_waiting(team) == [run.ref]
    before = timezone.now()
    assert apply_workload("run", run.pk) == "provisioning"
    run.refresh_from_db()
    assert run.cluster_id == cluster.pk and run.placed_at >= before
