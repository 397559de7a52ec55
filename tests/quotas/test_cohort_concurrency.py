"""Borrowing under real concurrency on PostgreSQL: two teams of one cohort never borrow the
same idle unit (the cohort's lock), and a team outside it never waits for that lock."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.db.models import Sum

from billing.models import QuotaHold
from quotas import services
from quotas.admission import admit, release
from quotas.decide import ResourceRequest
from quotas.demo import seed_team_quotas
from quotas.models import QueuedRequest
from tests.factories import make_team

# 64 connections at once: the second serial lane, with the other such modules (tests/conftest.py lane).
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.slow,
              pytest.mark.many_connections]

THREADS = 64
ROUNDS = 20


def race(requests: list[tuple[object, str, ResourceRequest]]) -> list:
    """Admit every (team, ref, request) from its own thread, all released at once by a barrier."""
    barrier = threading.Barrier(len(requests))

    def one(item):
        team, ref, request = item
        try:
            barrier.wait()
            return admit(team, request, ref)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(one, requests))


def test_two_teams_racing_for_two_lendable_units_borrow_exactly_two(flavors, staff):
    """A lender with 2 idle units of its 4; two full teams submit 64 one-unit runs at once."""
    lender, first, second = make_team("lender"), make_team("first"), make_team("second")
    seed_team_quotas(lender, {"a100-80gb": 4})
    seed_team_quotas(first, {"a100-80gb": 2})
    seed_team_quotas(second, {"a100-80gb": 2})
    services.set_cohort(staff, "shared", teams=[lender, first, second])
    one = ResourceRequest("a100-80gb", 1, 1)
    assert admit(lender, ResourceRequest("a100-80gb", 2, 1), "run:lender").admitted
    for team in (first, second):
        for i in range(2):
            assert admit(team, one, f"run:{team.slug}-own{i}").admitted
    for round_ in range(ROUNDS):
        requests = [((first, second)[i % 2], f"r{round_}:{i}", one) for i in range(THREADS)]
        decisions = race(requests)
        borrowed = [d for d in decisions if d.admitted]
        assert len(borrowed) == 2 and all(d.borrows == 1 for d in borrowed)
        assert sum(d.queued for d in decisions) == THREADS - 2
        held = QuotaHold.objects.held()
        assert held.aggregate(units=Sum("units"))["units"] == 8  # the cohort's nominal sum (4 + 2 + 2), never more
        assert held.aggregate(borrowed=Sum("borrowed_units"))["borrowed"] == 2
        for _, ref, _ in requests:
            release(ref)
        assert not QueuedRequest.objects.exists()
