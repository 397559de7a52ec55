"""A lowered maximum applies at once, on the simulated cluster: ceiling, replicas, quota and billing.

An endpoint runs four burst replicas at full load; its maximum is lowered (by the API, then by
the edit form) below what runs. At once the ceiling drops and the hold shrinks; the
ScaledObject is re-applied with the new ``maxReplicaCount`` and the cluster stops the replicas
above it without waiting for the scale-down delay (as Kubernetes' HPA does); and from the
change on, the endpoint is never billed for more than its new ceiling, while the Capacity
page's figures agree (what runs never exceeds what is reserved).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.ledger import cost_per_hour
from billing.models import QuotaHold, flavor_price
from cluster.backends.base import ClusterAddress
from inference import services
from inference.constants import EndpointState, ScalingDecision
from inference.models import InferenceEndpoint
from quotas.services import capacity_rows
from workloads.registry import resource_kinds

pytestmark = pytest.mark.django_db(transaction=True)


def endpoint(pk) -> InferenceEndpoint:
    return InferenceEndpoint.objects.select_related("team", "flavor").get(pk=pk)


def reserved(ref: str) -> int:
    return QuotaHold.objects.held().get(ref=ref).units


def running_pods(cluster, ep) -> int:
    observed = next(o for o in cluster.backend.observe(resource_kinds()) if o.object_name == ep.object_name)
    return sum(1 for pod in observed.pods if pod["status"].get("phase") == "Running")


def a100_capacity() -> dict:
    rows, _nodes, error, _pools = capacity_rows()
    assert not error
    return next(row for row in rows if row["flavor"].name == "a100-80gb")


def check_billing_under(cluster, pk: int, ceiling: int, cycles: int) -> None:
    """Run ``cycles`` reconcile cycles: at every one, what is billed stays within ``ceiling`` replicas."""
    ep = endpoint(pk)
    rate = cost_per_hour(flavor_price(ep.flavor, ep.spot), ceiling * ep.gpus_per_replica)
    since, cost_before = cluster.now, ep.cost_at(cluster.now)
    for _ in range(cycles):
        cluster.cycle()
        ep = endpoint(pk)
        assert ep.open_units <= ceiling * ep.gpus_per_replica, (ep.open_units, ceiling)
        assert ep.cost_per_hour_now <= rate
        hours = Decimal((cluster.now - since).total_seconds()) / 3600
        assert ep.cost_at(cluster.now) - cost_before <= rate * hours + Decimal("0.0001")
        capacity = a100_capacity()
        assert capacity["cluster_in_use"] <= capacity["in_use"], capacity  # running within what is reserved
    assert running_pods(cluster, ep) == ceiling and ep.replicas == ceiling


def test_a_lowered_maximum_applies_at_once_and_bills_no_more_than_the_new_ceiling(
        cluster, client, api, member, team, ep_quota):
    created = services.create_endpoint(member, team, {
        "name": "chat", "image": "registry.example.com/serving/vllm:0.6", "flavor": "a100-80gb",
        "min_replicas": 1, "max_replicas": 4, "autoscale": {"metric": "gpu_utilization", "target": 70},
        "scale_down_delay_seconds": 600, "env": {"SLIPWAY_SIM_LOAD_SECONDS": "10"}})
    cluster.backend.set_load(ClusterAddress(created.namespace, created.object_name), 1000)
    for _ in range(40):
        cluster.cycle()
    ep = endpoint(created.pk)
    assert (ep.state, ep.replicas, ep.replica_ceiling, reserved(ep.ref)) == (EndpointState.READY, 4, 4, 4)
    assert running_pods(cluster, ep) == 4

    # 1. The API lowers the maximum to 3, below the four that run: the ceiling and the
    #    hold drop at once (no waiting for the ten-minute scale-down delay).
    response = api.patch(f"/api/v1/endpoints/{ep.pk}/", {"max_replicas": 3}, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["replica_ceiling"], reserved(ep.ref)) == (3, 3)
    changed = endpoint(ep.pk).scaling_events.get(decision=ScalingDecision.MINIMUM_CHANGED)
    assert changed.reason.startswith("min 1, max 3: ceiling 4 \u2192 3;")
    check_billing_under(cluster, ep.pk, 3, cycles=6)

    # 2. The edit form lowers it to 2: the same.
    client.force_login(member)
    response = client.post(f"/endpoints/{ep.pk}/edit/", {
        "image": "registry.example.com/serving/vllm:0.6", "min_replicas": "1", "max_replicas": "2",
        "metric": "gpu_utilization", "target": "70", "scale_down_delay_seconds": "600",
        "env": "SLIPWAY_SIM_LOAD_SECONDS=10"})
    assert response.status_code == 302
    assert (endpoint(ep.pk).replica_ceiling, reserved(ep.ref)) == (2, 2)
    check_billing_under(cluster, ep.pk, 2, cycles=6)


def test_raising_the_maximum_keeps_the_burst_it_holds(cluster, api, member, team, ep_quota):
    created = services.create_endpoint(member, team, {
        "name": "chat", "image": "registry.example.com/serving/vllm:0.6", "flavor": "a100-80gb",
        "min_replicas": 1, "max_replicas": 3, "autoscale": {"metric": "gpu_utilization", "target": 70},
        "env": {"SLIPWAY_SIM_LOAD_SECONDS": "10"}})
    cluster.backend.set_load(ClusterAddress(created.namespace, created.object_name), 1000)
    for _ in range(30):
        cluster.cycle()
    assert endpoint(created.pk).replica_ceiling == 3
    # Editing the maximum no longer drops granted burst back to the minimum (which would stop
    # replicas the load needs): the ceiling stays, and grows again on demand.
    assert api.patch(f"/api/v1/endpoints/{created.pk}/", {"max_replicas": 4}, format="json").status_code == 200
    assert (endpoint(created.pk).replica_ceiling, reserved(created.ref)) == (3, 3)
    for _ in range(3):
        cluster.cycle()
        assert running_pods(cluster, endpoint(created.pk)) >= 3
    assert endpoint(created.pk).replica_ceiling == 4
