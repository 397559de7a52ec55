"""Two cycles of one cluster take a pool's reading at once (a single-flight lock that expired mid-cycle), on
PostgreSQL: the mark moves once, and the stretch since it is counted once."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest

from billing import pool_idle
from billing.models import PoolIdleHour, PoolReading
from tests.billing.test_pool_idle import at, node
from tests.threads import in_thread, paused_after, wait_until_lock_waiter

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_two_cycles_reading_at_once_count_the_stretch_once(east, flavors):
    nodes = [node("h-0", flavors["h100-80gb"], in_use=2)]  # 6 idle
    pool_idle.record_readings(east, nodes, at(0))
    inside, go, errors = threading.Event(), threading.Event(), []

    def first() -> None:
        with paused_after('UPDATE "billing_poolreading"', inside, go):
            pool_idle.record_readings(east, nodes, at(60))

    one = in_thread(first, errors)
    assert inside.wait(10)
    two = in_thread(lambda: pool_idle.record_readings(east, nodes, at(60)), errors)
    # The second read the old mark too, and waits on the first's move of it.
    assert wait_until_lock_waiter(two).lock == "transactionid"
    go.set()
    one.join(10)
    two.join(10)
    assert not errors
    assert PoolReading.objects.get().at == at(60)
    assert list(PoolIdleHour.objects.values_list("unit_seconds", flat=True)) == [Decimal("360.000")]  # 6 × 60 s once
