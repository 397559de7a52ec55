"""A kind without cluster objects (issue 48, point 3): work that only holds units, and is billed for them.

The block kind (tests/workloads/holdkind) declares ``cluster_objects = False``: "N units of a flavor held
from its start to its end", the shape of the calendar reservations to come. Nothing of it is ever applied,
observed or deleted; its own status (a window the clock opens and closes) is what the reconcile cycle
follows, and billing charges the units it holds, through the quota hold's open segment, the ledger, spend
and budgets — as for any work. ``test_second_kind.py`` is the same proof for a kind with objects.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from billing.ledger import record_usage
from billing.models import QuotaHold, TeamBudget, UsageRecord
from quotas.models import QueuedRequest
from sandbox.models import SimObject
from tests.workloads.holdkind.kind import BlockKind
from tests.workloads.holdkind.models import BlockState, UnitBlock
from tests.workloads.timeline import scripted_timeline
from workloads import services
from workloads.cycle import reconcile as rec
from workloads.models import ReasonCode
from workloads.registry import kind_for
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db

#: 10:50:00 UTC: a window opened a little later crosses 11:00, so the ledger has two hour rows.
T0 = datetime(2026, 11, 27, 10, 50, tzinfo=UTC)


class Clock:
    """What ``timezone.now`` says (the :func:`clock` fixture): admission, ends and the ledger read it."""

    now = T0 - timedelta(minutes=1)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """A clock the test moves, as the scripted timelines do (tests/workloads/timeline.py), with a fake cluster."""
    made = Clock()
    monkeypatch.setattr(timezone, "now", lambda: made.now)
    return made


def cycle(backend, clock: Clock, at: datetime):
    """One whole reconcile cycle at ``at``."""
    clock.now = at
    return rec.reconcile(backend, now=at)


@pytest.fixture
def book(member, team, quota, flavors, django_capture_on_commit_callbacks):
    """``book(name, units, starts_at, minutes)``: the member's block, recorded and admitted as a kind's service
    would (the apply task published after commit)."""
    def make(name: str, units: int, starts_at: datetime, minutes: int) -> UnitBlock:
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            block = UnitBlock.objects.create(team=team, created_by=member, name=name, flavor=flavors["a100-80gb"],
                                             units=units, starts_at=starts_at, minutes=minutes)
            services.admit_new(block)
        block.refresh_from_db()
        return block

    return make


def ledger_rows(block) -> list[tuple[datetime, Decimal, Decimal]]:
    return [(r.hour, r.unit_hours, r.cost) for r in UsageRecord.objects.filter(ref=block.ref).order_by("hour")]


def test_it_is_held_and_billed_for_exactly_its_window_with_nothing_on_the_sandbox(
        book, published, monkeypatch, settings):
    timeline = scripted_timeline(published, monkeypatch, settings, T0)
    objects_before = SimObject.objects.count()
    starts = T0 + timedelta(minutes=2, seconds=17)  # 10:52:17 to 11:22:17
    block = book("training-slot", 2, starts, 30)
    assert block.state == BlockState.ADMITTED
    assert QuotaHold.objects.held().get(ref=block.ref).units == 2  # against the team's quota, as any work
    assert published == [("workloads.tasks.apply_workload", ("blk", block.pk))]

    # Its apply places it and sends nothing: booked on the only cluster, its window not open yet.
    timeline.cycle()
    block.refresh_from_db()
    assert (block.state, block.cluster.name, block.reason_code) == (BlockState.BOOKED, "default", ReasonCode.NONE)
    assert block.applied_at == T0 + timedelta(seconds=5) and block.open_units == 0

    # The window opens: from its very second, whichever cycle sees it first.
    while timeline.now < starts:
        timeline.cycle(60)
    block.refresh_from_db()
    assert (block.state, block.started_at, block.open_units, block.billed_until) == (BlockState.HELD, starts, 2, starts)
    assert block.cost_at(starts + timedelta(seconds=1)) == Decimal("0.0022777778")  # a second of 2 × 4.10/h

    # Followed every minute across 11:00 to its end: never vanished, nothing deleted, nothing applied.
    while block.state == BlockState.HELD:
        report = timeline.cycle(60)
        assert (report.vanished, report.orphans_deleted, report.redriven) == ([], [], [])
        block.refresh_from_db()
    ends = starts + timedelta(minutes=30)
    assert (block.state, block.finished_at, block.reason_code) == (BlockState.DONE, ends, ReasonCode.NONE)
    assert not QuotaHold.objects.held().filter(ref=block.ref).exists()
    # 463 s before 11:00 and 1,337 s after, of 2 units at 4.10 per unit-hour: one row per hour.
    assert ledger_rows(block) == [
        (datetime(2026, 11, 27, 10, tzinfo=UTC), Decimal("0.2572222222"), Decimal("1.0546111111")),
        (datetime(2026, 11, 27, 11, tzinfo=UTC), Decimal("0.7427777778"), Decimal("3.0453888889")),
    ]
    assert block.billed_cost == Decimal("4.1000000000")
    assert block.cost_to_date.quantize(Decimal("0.01")) == Decimal("4.10")  # an hour of one unit: 30 min of two
    assert SimObject.objects.count() == objects_before  # not even its team's namespace


def test_a_window_no_cycle_saw_open_is_billed_whole(clock, book, fake_backend):
    block = book("short", 1, T0, 10)
    assert apply_workload("blk", block.pk) == "applied"
    cycle(fake_backend, clock, T0 + timedelta(hours=1, minutes=3))  # the first cycle after it closed
    block.refresh_from_db()
    assert (block.state, block.started_at, block.finished_at) == (BlockState.DONE, T0, T0 + timedelta(minutes=10))
    assert ledger_rows(block) == [(datetime(2026, 11, 27, 10, tzinfo=UTC), Decimal("0.1666666667"),
                                   Decimal("0.6833333333"))]  # 10 min of one unit at 4.10/h
    assert "apply" not in fake_backend.calls and "delete" not in fake_backend.calls


def test_a_second_block_waits_in_the_queue_and_an_early_end_lets_it_in(clock, book, fake_backend, member, published,
                                                                     django_capture_on_commit_callbacks):
    whole = book("whole", 8, T0, 120)
    waiting = book("waiting", 4, T0, 120)
    assert waiting.state == BlockState.QUEUED
    assert waiting.reason == "waiting for quota: needs 4× a100-80gb, 8 of 8 in use"
    assert apply_workload("blk", whole.pk) == "applied"
    cycle(fake_backend, clock, T0 + timedelta(seconds=30))
    whole.refresh_from_db()
    assert (whole.state, whole.open_units) == (BlockState.HELD, 8)

    # Ended by its user 40 min in: billed to that second, its hold released, nothing to delete — and the
    # queued block admitted into the freed units at once.
    ended_at = T0 + timedelta(minutes=40)
    published.clear()
    clock.now = ended_at
    with django_capture_on_commit_callbacks(execute=True):
        kind_for("blk").end(member, whole)  # the kind's own end, as the pages and the staff list call it
    whole.refresh_from_db()
    assert (whole.state, whole.finished_at, whole.reason) == (BlockState.ENDED, ended_at, "ended by mia")
    assert not QuotaHold.objects.held().filter(ref=whole.ref).exists()
    assert whole.billed_cost == Decimal("21.8666666667") and whole.open_units == 0  # 40 min of 8 × 4.10/h
    waiting.refresh_from_db()
    assert waiting.state == BlockState.ADMITTED and not QueuedRequest.objects.exists()
    assert published == [("workloads.tasks.apply_workload", ("blk", waiting.pk))]  # no delete task for it

    # Its window opened before it was admitted: it is billed from its admission, not its start.
    assert apply_workload("blk", waiting.pk) == "applied"
    cycle(fake_backend, clock, ended_at + timedelta(seconds=5))
    waiting.refresh_from_db()
    assert (waiting.state, waiting.admitted_at, waiting.started_at, waiting.open_units) == (
        BlockState.HELD, ended_at, ended_at, 4)
    assert not {"apply", "apply_secret", "delete", "delete_objects"} & set(fake_backend.calls)


def test_a_spent_budget_with_the_stop_policy_ends_it(clock, book, fake_backend, member, team,
                                                    django_capture_on_commit_callbacks):
    block = book("costly", 2, T0, 600)
    apply_workload("blk", block.pk)
    assert cycle(fake_backend, clock, T0 + timedelta(minutes=5)).budget_stopped == []
    TeamBudget.objects.filter(team=team).update(monthly_limit=Decimal("1"), policy=TeamBudget.Policy.STOP)
    record_usage(team, "run:old", "a100-80gb", member, T0 - timedelta(hours=1), T0, 1, False)  # 4.10 of 1.00
    with django_capture_on_commit_callbacks(execute=True):
        report = cycle(fake_backend, clock, T0 + timedelta(minutes=10))
    assert report.budget_stopped == [block.ref]
    block.refresh_from_db()
    assert (block.state, block.reason_code) == (BlockState.ENDED, ReasonCode.STOPPED_BY_BUDGET)
    assert block.finished_at == T0 + timedelta(minutes=10)
    assert not QuotaHold.objects.held().filter(ref=block.ref).exists()
    assert block.billed_cost == Decimal("1.3666666667") and block.open_units == 0  # 10 min of 2 × 4.10/h


def test_a_kind_without_objects_that_has_nothing_to_say_is_left_as_it_is(clock, book, fake_backend, monkeypatch):
    """Never "objects vanished": it never had any. Its status None leaves it as it was."""
    block = book("quiet", 1, T0, 30)
    apply_workload("blk", block.pk)
    monkeypatch.setattr(BlockKind, "status", lambda self, observed, workload, now: None)
    report = cycle(fake_backend, clock, T0 + timedelta(hours=1))
    block.refresh_from_db()
    assert report.vanished == [] and report.redriven == []
    assert (block.state, block.reason_code) == (BlockState.BOOKED, ReasonCode.NONE)
    assert QuotaHold.objects.held().filter(ref=block.ref).exists()


def test_no_cluster_is_asked_for_its_logs_or_events(clock, book, fake_backend):
    block = book("silent", 1, T0, 30)
    apply_workload("blk", block.pk)
    block.refresh_from_db()
    assert services.logs(block) == services.Logs([], None, [])
    assert services.events(block) == []
    assert "events" not in fake_backend.calls
