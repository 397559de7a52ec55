"""Bookings under real concurrency on PostgreSQL: 64 bookings for the last 8 reservable units give exactly one.

Each thread books through the service on its own connection; a barrier releases them together, so they
race for the flavor's row lock (reservations.services.book). Without the lock, every thread would read
the same free room and book it.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from billing.models import ReservedWindow
from reservations import services
from reservations.models import Reservation
from tests.factories import add_member, make_team, make_user
from tests.reservations.support import booking_of, clusters_with

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
