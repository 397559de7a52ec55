"""An endpoint's life on the simulated cluster, through the real reconcile cycle and apply task.

Deploy → ready; load up → burst granted one replica at a time while the team has free units,
then capped by the team quota; a training run queued for the same flavor takes the reclaimed
burst and is admitted; load down → replicas fall after the scale-down delay; a new image rolls;
delete → quota released, objects gone. Cost follows the running replica-seconds. The sandbox
clock is driven explicitly, so each step is deterministic.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.models import QuotaHold
from cluster.backends.base import ClusterAddress
from inference import services
from inference.constants import EndpointState, ScalingDecision
from inference.models import InferenceEndpoint
from jobs.services import submit_run
from workloads.registry import resource_kinds

# Real commits: the tasks the portal publishes after commit are run as a worker would run them.
pytestmark = pytest.mark.django_db(transaction=True)


def endpoint(pk) -> InferenceEndpoint:
    return InferenceEndpoint.objects.select_related("team", "flavor").get(pk=pk)


def reserved(ref: str) -> int:
    found = QuotaHold.objects.held().filter(ref=ref).first()
    return found.units if found else 0


def test_an_endpoint_deploys_bursts_is_capped_gives_back_and_is_deleted(cluster, member, team, ep_quota):
    created = services.create_endpoint(member, team, {
        "name": "chat", "image": "registry.example.com/serving/vllm:0.6", "flavor": "a100-80gb",
        "min_replicas": 1, "max_replicas": 6, "autoscale": {"metric": "gpu_utilization", "target": 70},
        "scale_down_delay_seconds": 60, "env": {"SLIPWAY_SIM_LOAD_SECONDS": "20"}})
    ref = ClusterAddress(created.namespace, created.object_name)
    cluster.backend.set_load(ref, 10)

    # 1. Deploying, then ready once the model loaded.
    for _ in range(10):
        cluster.cycle()
    ep = endpoint(created.pk)
    assert (ep.state, ep.replicas, ep.replica_ceiling) == (EndpointState.READY, 1, 1)

    # 2. Load up: burst granted one replica at a time until the team quota (4 A100s) is full,
    #    then half an hour at four replicas.
    cluster.backend.set_load(ref, 1000)
    for _ in range(30):
        cluster.cycle()
    for _ in range(360):
        cluster.cycle()
    ep = endpoint(created.pk)
    assert ep.replica_ceiling == 4 and reserved(ep.ref) == 4
    decisions = list(ep.scaling_events.order_by("at", "pk").values_list("decision", flat=True))
    assert decisions[:4] == [ScalingDecision.ADMITTED] + [ScalingDecision.BURST_GRANTED] * 3
    assert decisions[-1] == ScalingDecision.CAPPED_BY_QUOTA
    assert ep.reason == "capped at 4 replicas by the team quota (a100-80gb 4 of 4 in use)"
    assert ep.replicas == 4

    # 3. A run queued for the same flavor takes the reclaimed burst units.
    run = submit_run(member, team, {"name": "train", "image": "registry.example.com/ml/t:1",
                                    "command": ["python", "t.py"], "flavor": "a100-80gb", "gpus_per_worker": 2})
    assert run.state == "queued"
    cluster.cycle()
    run.refresh_from_db()
    assert run.state in ("admitted", "pending", "running")
    ep = endpoint(created.pk)
    assert ep.scaling_events.filter(decision=ScalingDecision.BURST_RECLAIMED).exists()
    assert reserved(ep.ref) + reserved(run.ref) <= 4

    # 4. Load down: the replicas fall back after the scale-down delay.
    cluster.backend.set_load(ref, 10)
    for _ in range(40):
        cluster.cycle()
    ep = endpoint(created.pk)
    assert ep.replicas == 1 and ep.replica_ceiling == 1

    # 5. Cost follows the replicas that held GPUs: within 1% of their running GPU-seconds × price
    #    (billing sees a replica change at the next cycle, so each change costs at most one cycle).
    billed, truth = ep.cost_at(cluster.now), cluster.replica_hours() * Decimal("4.10")
    assert abs(billed - truth) / truth < Decimal("0.01"), (billed, truth)

    # 6. A new image rolls out; delete releases the quota and removes the objects.
    services.update_endpoint(member, ep, {"image": "registry.example.com/serving/vllm:0.7"})
    for _ in range(12):
        cluster.cycle()
    deployment = next(o for o in cluster.backend.observe(resource_kinds()) if o.object_name == ep.object_name).first("Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].endswith("vllm:0.7")
    assert endpoint(created.pk).state == EndpointState.READY
    services.delete_endpoint(member, endpoint(created.pk))
    assert reserved(ep.ref) == 0
    cluster.published.append(("workloads.tasks.delete_workload", ("ep", created.pk)))
    for _ in range(3):
        cluster.cycle()
    assert endpoint(created.pk).state == EndpointState.DELETED
    assert not [o for o in cluster.backend.observe(resource_kinds()) if o.object_name == ep.object_name]
