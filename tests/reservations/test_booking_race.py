"""Bookings under real concurrency on PostgreSQL: 64 bookings for the last 8 reservable units give exactly one; a
cancel committed while the reconcile cycle bills its window is not billed past the cancel.

Each thread books through the service on its own connection; a barrier releases them together, so they
race for the flavor's row lock (reservations.services.book). Without the lock, every thread would read
the same free room and book it.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from billing.ledger import interval_unit_hours
from billing.models import ReservedWindow
from reservations import services
from reservations.models import Reservation
from tests.factories import add_member, make_team, make_user
from tests.reservations.support import booking_of, clusters_with
from tests.threads import in_thread, paused_after, wait_until_lock_waiter
from workloads.cycle import windows

# 64 connections at once: the second serial lane, with the other such modules (tests/conftest.py lane).
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.slow,
              pytest.mark.many_connections]

THREADS = 64


def test_64_concurrent_bookings_for_the_last_8_units_give_exactly_one(flavors):
    flavor = flavors["a100-80gb"]
    clusters_with(flavor, east=32)  # 16 reservable
    team = make_team("racers")
    users = [make_user(f"racer{i}") for i in range(THREADS)]
    for user in users:
        add_member(team, user)
    services.book(users[0], booking_of(team, flavor, units=8, name="first"))  # 8 of 16 left
    barrier = threading.Barrier(THREADS)

    def one(i: int):
        try:
            barrier.wait()
            return services.book(users[i], booking_of(team, flavor, units=8, name=f"racer-{i}"))
        except services.BookingRefused as refused:
            return refused
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        results = list(pool.map(one, range(THREADS)))
    booked = [r for r in results if isinstance(r, Reservation)]
    refused = [r for r in results if isinstance(r, services.BookingRefused)]
    assert len(booked) == 1 and len(refused) == THREADS - 1
    assert all("8 units are not free on east from" in r.errors["start"][0] for r in refused)
    assert ReservedWindow.objects.filter(cluster__name="east").count() == 2
    assert sum(ReservedWindow.objects.values_list("units", flat=True)) == 16


def test_a_cancel_committed_while_the_cycle_bills_its_window_is_billed_up_to_the_cancel_only(flavors):
    """The cycle reads a window under way, a cancel ends it (its transaction holding the row), and the cycle's
    conditional update, waiting for that row, then finds the window's end moved: it bills nothing of it. Conditional on
    ``billed_until`` alone, it billed up to its own clock, past the cancel, and left the window billed past its end,
    so the "window ended" notice never went. The next cycle bills it up to the cancel."""
    flavor = flavors["a100-80gb"]
    clusters_with(flavor, east=16)
    team, user = make_team("billed"), make_user("canceller")
    add_member(team, user)
    reservation = services.book(user, booking_of(team, flavor, units=4, name="cancelled-under-way"))
    now = timezone.now()
    ReservedWindow.objects.filter(ref=reservation.ref).update(start=now - timedelta(hours=2),
                                                              end=now + timedelta(hours=6))
    inside, go = threading.Event(), threading.Event()
    errors: list[Exception] = []
    billed: dict[str, int] = {}

    def cancel() -> None:  # holds the window's row after ending it, its transaction open
        with paused_after('UPDATE "billing_reservedwindow" SET "end"', inside, go):
            services.cancel(user, Reservation.objects.get(pk=reservation.pk))

    first = in_thread(cancel, errors)
    assert inside.wait(10)
    cycle_now = timezone.now()  # the cycle's clock: after the cancel's
    try:
        second = in_thread(lambda: billed.__setitem__("windows", windows.bill(cycle_now)), errors)
        assert '"billing_reservedwindow"' in wait_until_lock_waiter(second).query  # it waits for the window's row
    finally:
        go.set()
    first.join(30)
    second.join(30)

    assert errors == []
    cancelled_at = Reservation.objects.get(pk=reservation.pk).cancelled_at
    window = ReservedWindow.objects.get(ref=reservation.ref)
    assert window.end == cancelled_at < cycle_now
    assert billed == {"windows": 0} and window.billed_until is None  # the race lost: nothing billed
    assert windows.bill(cycle_now) == 1  # the next cycle re-drives it
    window.refresh_from_db()
    assert window.billed_until == window.end == cancelled_at
    assert window.idle_unit_hours == interval_unit_hours(4, window.start, cancelled_at)
    ended = services.windows_ended(cancelled_at - timedelta(seconds=1), cycle_now)
    assert [w.pk for _reservation, w in ended] == [window.pk]  # its "ended" notice goes
