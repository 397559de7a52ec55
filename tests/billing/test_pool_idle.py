"""Idle pool capacity (billing.pool_idle): an elastic pool's ready units that no pod uses, integrated between the
cycle's readings into hour rows, priced when read at the cluster's price of the flavor."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import pool_idle
from billing.models import ClusterPrice, PoolIdleHour, PoolReading
from cluster.backends.base import NodeCapacity
from cluster.manifests.common import node_selector
from fleet.models import Cluster, NodePool
from fleet.pools import HEADROOM_NAME
from workloads.cycle.reconcile import reconcile

pytestmark = pytest.mark.django_db

#: A quiet local hour: 10:00 on a day without a DST change.
T0 = timezone.make_aware(datetime(2026, 11, 2, 10, 0))


def node(name: str, flavor, in_use: int = 0, provisioning: bool = False) -> NodeCapacity:
    spec = flavor.to_spec()
    return NodeCapacity(name, spec.resource_name, flavor.max_units_per_node, in_use, node_selector(spec), provisioning)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def hours(cluster) -> dict[int, Decimal]:
    """``{local hour: unit-seconds}`` of ``cluster``'s idle rows."""
    return {timezone.localtime(row.hour).hour: row.unit_seconds
            for row in PoolIdleHour.objects.filter(cluster=cluster)}


def test_a_scripted_timeline_integrates_to_exact_unit_seconds_per_hour(east, flavors):
    h100, l4 = flavors["h100-80gb"], flavors["l4"]
    fixed = [node("l4-0", l4), node("l4-1", l4)]  # idle, but no pool: a fixed inventory counts nothing
    timeline = [
        # (seconds after 10:00, the H100 nodes): the reading's idle units in the comment
        (0, [node("h-0", h100), node("h-1", h100, provisioning=True)]),  # 8: the provisioning node counts nothing
        (120, [node("h-0", h100, in_use=8), node("h-1", h100, in_use=2)]),  # 6
        (180, [node("h-0", h100, in_use=8), node("h-1", h100, in_use=2)]),  # 6
        (180, [node("h-0", h100), node("h-1", h100)]),  # a replay of the same instant: nothing moves
        (3540, [node("h-0", h100, in_use=8), node("h-1", h100, in_use=4)]),  # 4, after 56 min with no reading
        (3660, [node("h-0", h100, in_use=8), node("h-1", h100, in_use=8)]),  # 0, across the hour
        (3720, [node("h-0", h100, in_use=8), node("h-1", h100, in_use=8)]),  # 0
    ]
    for seconds, nodes in timeline:
        pool_idle.record_readings(east, [*nodes, *fixed], at(seconds))
    # 10:00 8×120 + 6×60 + 6×300 (the 56 minutes count five) + 4×60 = 3,360; 11:00 4×60 = 240.
    assert hours(east) == {10: Decimal("3360.000"), 11: Decimal("240.000")}
    figures = pool_idle.idle_pool_capacity(T0, T0 + timedelta(days=1))
    assert [(r.cluster, r.flavor, r.unit_hours, r.gpu_hours, r.cost) for r in figures.rows] == [
        ("east", "h100-80gb", Decimal(1), Decimal(1), Decimal("6.88"))]  # 3,600 unit-s at 6.88 the unit-hour
    assert (figures.gpu_hours, figures.cost, figures.currency) == (Decimal(1), Decimal("6.88"), "USD")
    # The period's hours only: 10:00 alone is 3,360 of them.
    assert pool_idle.idle_pool_capacity(T0, at(3600)).rows[0].unit_hours == Decimal("0.9333333333")


def test_it_is_priced_at_the_clusters_price_of_the_flavor_when_read(east, flavors):
    h100 = flavors["h100-80gb"]
    pool_idle.record_readings(east, [node("h-0", h100, in_use=4)], at(0))
    pool_idle.record_readings(east, [node("h-0", h100, in_use=4)], at(300))  # 4 × 300 s = 1/3 unit-hour
    assert pool_idle.idle_pool_capacity(T0, at(3600)).cost == Decimal("2.2933333333")  # at 6.88
    ClusterPrice.objects.create(cluster=east, flavor=h100, price_per_hour=Decimal("9.00"))
    assert pool_idle.idle_pool_capacity(T0, at(3600)).cost == Decimal("3.0000000000")


def test_provisioning_and_headroom_nodes_count_nothing(east, flavors):
    h100 = flavors["h100-80gb"]
    provisioning = [node("h-0", h100, provisioning=True),
                    node(HEADROOM_NAME.format(flavor=h100.name, i=1), h100, provisioning=True)]
    assert pool_idle.idle_units(east.pools.get(), provisioning) == 0
    for seconds in (0, 60, 120):
        pool_idle.record_readings(east, provisioning, at(seconds))
    assert hours(east) == {}
    assert pool_idle.idle_pool_capacity(T0, at(3600)).rows == []


def test_a_fixed_inventory_counts_nothing(flavors):
    west = Cluster.objects.create(name="west")  # no pool: its H100s are a fixed inventory
    for seconds in (0, 60):
        pool_idle.record_readings(west, [node("h-0", flavors["h100-80gb"])], at(seconds))
    assert not PoolReading.objects.exists() and not PoolIdleHour.objects.exists()


def test_an_older_reading_than_the_mark_counts_nothing(east, flavors):
    """Two cycles of one cluster (a lock that expired mid-cycle): the later mark wins, the stale one adds nothing."""
    h100 = flavors["h100-80gb"]
    pool_idle.record_readings(east, [node("h-0", h100)], at(0))
    pool_idle.record_readings(east, [node("h-0", h100)], at(60))
    pool_idle.record_readings(east, [node("h-0", h100)], at(30))
    assert hours(east) == {10: Decimal("480.000")}
    assert PoolReading.objects.get().at == at(60)


def test_the_reconcile_cycle_takes_the_readings(fake_backend, flavors):
    """The cycle records the cluster's nodes with its pools' readings (workloads.cycle.reconcile)."""
    h100 = flavors["h100-80gb"]
    fake_backend.nodes = [node("h-0", h100, in_use=2)]
    reconcile(fake_backend, now=T0)
    NodePool.objects.create(cluster=Cluster.objects.get(), flavor=h100, max_nodes=2)
    reconcile(fake_backend, now=at(61))  # the nodes are read again after a minute
    reconcile(fake_backend, now=at(122))
    assert hours(Cluster.objects.get()) == {10: Decimal("366.000")}  # 6 idle × 61 s
