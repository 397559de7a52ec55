"""Two staff changing one cluster's pools at once, on PostgreSQL (issue 52): every change of a cluster's pools takes
the cluster's row lock first (:func:`fleet.pools.lock_pools`), so two creates of the same pool are one create and
one change — never a unique-constraint error (a 500 in the API) — and each audit row tells what happened."""

from __future__ import annotations

import threading

import pytest

from fleet.models import Cluster, NodePool
from fleet.pools import change_pools
from teams.models import AuditEvent
from tests.threads import in_thread, paused_after, wait_until_lock_waiter

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_two_creates_of_one_pool_at_once_are_a_create_then_a_change(clusters, flavors, staff):
    east, a100 = Cluster.objects.get(name="east"), flavors["a100-80gb"]
    inside, go = threading.Event(), threading.Event()
    errors: list[Exception] = []

    def first() -> None:
        with paused_after('INSERT INTO "fleet_nodepool"', inside, go):
            change_pools(east, [(a100, {"max_nodes": 4})], staff)

    creating = in_thread(first, errors)
    assert inside.wait(10)  # the first has inserted its pool and not committed
    second = in_thread(lambda: change_pools(east, [(a100, {"max_nodes": 6, "min_nodes": 1})], staff), errors)
    assert '"fleet_cluster"' in wait_until_lock_waiter(second).query  # waits for the cluster, not the insert
    go.set()
    creating.join(10)
    second.join(10)
    assert errors == []
    assert list(NodePool.objects.values_list("min_nodes", "max_nodes")) == [(1, 6)]
    assert [e.details["change"] for e in AuditEvent.objects.order_by("pk") if "pool" in e.details] == [
        "pool created", "pool changed"]
