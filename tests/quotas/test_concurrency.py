"""Admission under real concurrency on PostgreSQL: never over-admit, keep queue order.

Each thread uses its own database connection (Django opens one per thread), and all start
together on a barrier so the admissions really race for the team's lock.
"""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.db.models import Sum

from billing.models import QuotaHold
from core.priority import Priority
from quotas.admission import admit, admit_waiting, release, resize
from quotas.decide import ResourceRequest
from quotas.models import QueuedRequest
from quotas.queue import queue_positions
from tests.factories import make_team
from tests.threads import in_thread, paused_after, wait_until_lock_waiter

# 64 connections at once: the second serial lane, with the other such modules (tests/conftest.py lane).
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.slow,
              pytest.mark.many_connections]

THREADS = 64
ROUNDS = 20
LIMIT = 10


def race(team, requests: list[tuple[str, ResourceRequest]]) -> list:
    """Admit every (ref, request) from its own thread, all released at once by a barrier."""
    barrier = threading.Barrier(len(requests))

    def one(item):
        ref, request = item
        try:
            barrier.wait()
            return admit(team, request, ref)
        finally:
            connection.close()  # each thread's own connection

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(one, requests))


def in_use(team) -> int:
    return QuotaHold.objects.held().filter(team=team).aggregate(t=Sum("units"))["t"] or 0


@pytest.fixture
def limited_team(flavors):
    from quotas.demo import seed_team_quotas

    team = make_team("race")
    seed_team_quotas(team, {"a100-80gb": LIMIT})
    return team


def test_the_reads_sent_behind_the_lock_see_what_its_holder_committed(limited_team):
    """Admission sends its lock and its reads in one round trip (core.rawsql.read_together): the waiting
    side's facts must still be read after the lock is granted, so it sees the holder's hold and queues."""
    for i in range(LIMIT - 1):
        admit(limited_team, ResourceRequest("a100-80gb", 1, 1), f"before:{i}")
    inside, go, errors, decisions = threading.Event(), threading.Event(), [], {}

    def holder():
        with paused_after("INSERT", inside, go):  # its hold written, the lock held, not committed
            decisions["holder"] = admit(limited_team, ResourceRequest("a100-80gb", 1, 1), "holder")

    first = in_thread(holder, errors)
    assert inside.wait(10), errors
    second = in_thread(lambda: decisions.update(waiter=admit(limited_team, ResourceRequest("a100-80gb", 1, 1),
                                                                   "waiter")), errors)
    waiting = wait_until_lock_waiter(second)
    assert "FOR NO KEY UPDATE" in waiting.query  # it waits on the lock, its reads queued behind it
    go.set()
    first.join(10), second.join(10)
    assert errors == []
    assert decisions["holder"].admitted and decisions["waiter"].queued
    assert in_use(limited_team) == LIMIT


def test_it_never_admits_more_than_the_limit_under_concurrency(limited_team):
    for round_ in range(ROUNDS):
        requests = [(f"r{round_}:{i}", ResourceRequest("a100-80gb", 1, 1)) for i in range(THREADS)]
        decisions = race(limited_team, requests)
        assert sum(d.admitted for d in decisions) == LIMIT
        assert sum(d.queued for d in decisions) == THREADS - LIMIT
        assert in_use(limited_team) == LIMIT
        for ref, _ in requests:
            release(ref)
        assert in_use(limited_team) == 0 and not QueuedRequest.objects.exists()


def test_it_never_over_admits_mixed_sizes(limited_team):
    rng = random.Random(5)
    for round_ in range(ROUNDS):
        sizes = [rng.choice([1, 1, 2, 3, 4, 8]) for _ in range(THREADS)]
        requests = [(f"m{round_}:{i}", ResourceRequest("a100-80gb", n, n)) for i, n in enumerate(sizes)]
        decisions = race(limited_team, requests)
        admitted_units = sum(n for n, d in zip(sizes, decisions, strict=True) if d.admitted)
        assert 0 < admitted_units <= LIMIT
        assert in_use(limited_team) == admitted_units
        assert all(d.admitted or d.queued for d in decisions)
        for ref, _ in requests:
            release(ref)


def test_it_admits_the_queue_in_order_when_capacity_frees(limited_team):
    assert admit(limited_team, ResourceRequest("a100-80gb", LIMIT, 8), "big").admitted
    order = [("n1", Priority.NORMAL), ("l1", Priority.LOW), ("h1", Priority.HIGH), ("n2", Priority.NORMAL),
             ("h2", Priority.HIGH)]
    for ref, priority in order:
        assert admit(limited_team, ResourceRequest("a100-80gb", 2, 2, priority=priority), ref).queued
    assert list(queue_positions(limited_team)) == ["h1", "h2", "n1", "n2", "l1"]
    release("big")

    # Several reconcilers admitting at once still admit each entry exactly once, in order.
    barrier = threading.Barrier(4)

    def one(_):
        try:
            barrier.wait()
            return admit_waiting(limited_team)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, range(4)))
    admitted = [ref for batch in results for ref in batch]
    assert admitted == ["h1", "h2", "n1", "n2", "l1"]
    assert in_use(limited_team) == LIMIT
    assert QuotaHold.objects.held().count() == 5


def test_it_reserves_a_ref_once_when_admitted_concurrently(limited_team):
    decisions = race(limited_team, [("same:1", ResourceRequest("a100-80gb", 1, 1))] * 16)
    assert all(d.admitted for d in decisions)
    assert QuotaHold.objects.filter(ref="same:1").count() == 1
    assert in_use(limited_team) == 1


def _grow_and_submit(team, growers: list[str], submissions: list[tuple[str, int]]) -> None:
    """Each grower resizes 1 → 2 → 3 → 4 while each submission admits, all released at once."""
    barrier = threading.Barrier(len(growers) + len(submissions))

    def grow(ref):
        try:
            barrier.wait()
            return [resize(team, ref, size).admitted for size in (2, 3, 4)]
        finally:
            connection.close()

    def submit(item):
        ref, size = item
        try:
            barrier.wait()
            return admit(team, ResourceRequest("a100-80gb", size, 1), ref)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(growers) + len(submissions)) as pool:
        futures = [pool.submit(grow, ref) for ref in growers] + [pool.submit(submit, item) for item in submissions]
        for future in futures:
            future.result()


def test_burst_growth_racing_submissions_never_over_admits(limited_team):
    """Endpoints growing their holds step by step race new admissions for the same units."""
    rng = random.Random(11)
    for round_ in range(ROUNDS):
        growers = [f"ep{round_}:{i}" for i in range(4)]
        for ref in growers:
            assert admit(limited_team, ResourceRequest("a100-80gb", 1, 1), ref).admitted
        submissions = [(f"s{round_}:{i}", rng.choice([1, 2])) for i in range(16)]
        _grow_and_submit(limited_team, growers, submissions)
        assert in_use(limited_team) <= LIMIT  # the team's units in use never exceed its limit
        for ref in growers + [ref for ref, _size in submissions]:
            release(ref)
        assert in_use(limited_team) == 0
