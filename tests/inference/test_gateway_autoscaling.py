"""Autoscaling on the gateway's figures and waking from zero, on the simulated cluster: the portal's endpoint, the
real apply task, sandbox tick and reconcile cycle, and GatewayLoad rows written as the gateways write them (the
contract: inference.models.GatewayLoad, one row per gateway process and endpoint, every ~2 s)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster.backends.base import ClusterAddress, EndpointDemand
from inference import traffic
from inference.constants import EndpointState
from inference.models import GatewayLoad, InferenceEndpoint
from tests.factories import make_team

# Real commits: the tasks the portal publishes after commit are run as a worker would run them.
pytestmark = pytest.mark.django_db(transaction=True)


def endpoint(pk) -> InferenceEndpoint:
    return InferenceEndpoint.objects.select_related("team", "flavor").get(pk=pk)


def report(endpoint, gateway: str, *, held=0, in_flight=0, rate=0.0, age=0.0) -> None:
    """What one gateway process writes of one endpoint (``age``: seconds since it wrote it)."""
    GatewayLoad.objects.update_or_create(endpoint=endpoint, gateway=gateway, defaults={
        "held": held, "in_flight": in_flight, "requests_per_second": rate,
        "updated_at": timezone.now() - timedelta(seconds=age)})


def sleeping(cluster, create, **autoscale):
    """An endpoint at min_replicas 0 on the gateway's metric, deployed and asleep at zero replicas."""
    created = create(min_replicas=0, max_replicas=4, scale_down_delay_seconds=30,
                     autoscale={"metric": "gateway_in_flight", "target": 4, **autoscale})
    for _ in range(4):
        cluster.cycle()
    ep = endpoint(created.pk)
    assert (ep.state, ep.replicas, ep.desired_replicas) == (EndpointState.SCALED_TO_ZERO, 0, 0)
    return ep


def test_a_request_held_at_a_gateway_wakes_an_endpoint_at_zero_on_the_next_tick(cluster, create):
    ep = sleeping(cluster, create)
    # A gateway that went away (its row is stale) holds nothing: the endpoint sleeps on.
    report(ep, "gw-a:101", held=3, age=traffic.FRESH_SECONDS + 5)
    cluster.cycle()
    assert endpoint(ep.pk).desired_replicas == 0
    # One request held at a live gateway: the next tick wants a replica, which starts and serves.
    report(ep, "gw-b:202", held=1)
    cluster.cycle()
    assert endpoint(ep.pk).desired_replicas == 1
    for _ in range(30):
        report(ep, "gw-b:202", held=1)
        cluster.cycle()
        if endpoint(ep.pk).replicas == 1:
            break
    woken = endpoint(ep.pk)
    assert (woken.state, woken.replicas) == (EndpointState.READY, 1)
    # Served: nothing held, nothing in flight; after the scale-down delay it sleeps again.
    report(ep, "gw-b:202")
    for _ in range(20):
        report(ep, "gw-b:202")
        cluster.cycle()
    assert endpoint(ep.pk).desired_replicas == 0


def test_requests_in_flight_at_the_gateways_size_the_endpoint_per_replica(cluster, create):
    ep = sleeping(cluster, create)
    # Eleven in flight over two gateways, four a replica: ceil(11 / 4) = 3 replicas, burst granted one at a time.
    for _ in range(60):
        report(ep, "gw-a:101", in_flight=5, rate=2.5)
        report(ep, "gw-b:202", in_flight=6, rate=3.0)
        cluster.cycle()
        if endpoint(ep.pk).replicas == 3:
            break
    grown = endpoint(ep.pk)
    assert (grown.desired_replicas, grown.replicas, grown.replica_ceiling) == (3, 3, 3)
    for _ in range(5):  # steady: no fourth replica
        report(ep, "gw-a:101", in_flight=5, rate=2.5)
        report(ep, "gw-b:202", in_flight=6, rate=3.0)
        cluster.cycle()
    assert endpoint(ep.pk).desired_replicas == 3


def test_requests_a_second_at_the_gateways_size_the_endpoint_per_replica(cluster, create):
    ep = sleeping(cluster, create, metric="gateway_requests_per_second", target=10)
    for _ in range(40):
        report(ep, "gw-a:101", rate=12.5)
        report(ep, "gw-b:202", rate=2.0)
        cluster.cycle()
        if endpoint(ep.pk).replicas == 2:
            break
    assert (endpoint(ep.pk).desired_replicas, endpoint(ep.pk).replicas) == (2, 2)  # ceil(14.5 / 10)


def test_the_demand_is_the_fresh_rows_summed_for_the_endpoints_own_address(create, flavors):
    ep = create(min_replicas=0, autoscale={"metric": "gateway_in_flight", "target": 4})
    here = ClusterAddress(ep.namespace, ep.object_name)
    report(ep, "gw-a:1", held=2, in_flight=3, rate=1.25)
    report(ep, "gw-b:2", held=1, in_flight=4, rate=0.5)
    report(ep, "gw-c:3", held=50, in_flight=50, rate=50, age=60)  # gone
    elsewhere = ClusterAddress(make_team("other").namespace, ep.object_name)
    assert traffic.gateway_demand([here, elsewhere, ClusterAddress(ep.namespace, "run-1")]) == {
        here: EndpointDemand(held=3, in_flight=7, requests_per_second=1.75)}
