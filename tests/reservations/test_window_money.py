"""A window's money (issue 49, point 6): its units are billed as they are used — the holder's own work's to that
work, lent units' to the borrowers, the rest to the holder as idle waste — and the three always make the whole
window: holder's charge (own work + idle) + borrowers' charges = reserved unit-hours × price."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing import reserved
from billing.ledger import committed, interval_unit_hours
from billing.models import QuotaHold, ReservedWindow, UsageRecord
from reservations import services
from reservations import windows as calendar
from reservations.models import FlavorPolicy, Reservation
from tests.factories import make_team
from tests.reservations.support import booking_of, clusters_with
from workloads.cycle import windows

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
PRICE = Decimal("2.5")


@pytest.fixture
def setup(flavors):
    a100 = flavors["a100-80gb"]
    east = clusters_with(a100, east=8)["east"]
    nlp, vision = make_team("nlp"), make_team("vision")
    window = reserved.hold("reservation:7", nlp, a100, east, 4, [(T0, T0 + timedelta(hours=2))], PRICE)[0]
    own = QuotaHold.objects.create(team=nlp, ref="run:1", flavor=a100, units=4, cluster=east, window=window)
    lent = QuotaHold.objects.create(team=vision, ref="run:2", flavor=a100, units=4, cluster=east, window=window,
                                    lent=True)
    return window, own, lent


def running(hold: QuotaHold, units: int) -> None:
    QuotaHold.objects.filter(pk=hold.pk).update(open_units=units)


def idle_cost(ref: str) -> tuple[Decimal, Decimal]:
    rows = UsageRecord.objects.filter(ref=ref).aggregate(cost=Sum("cost"), idle=Sum("idle_cost"))
    return rows["cost"] or Decimal(0), rows["idle"] or Decimal(0)


def test_a_window_bills_what_was_idle_and_counts_what_was_used_and_lent(setup):
    window, own, lent = setup
    running(own, 2)
    running(lent, 1)
    assert windows.bill(T0 + timedelta(minutes=30)) == 1
    assert windows.bill(T0 + timedelta(hours=1)) == 1
    assert windows.bill(T0 + timedelta(hours=1)) == 0  # a replayed cycle bills nothing twice
    running(own, 0)  # the holder's work ended; the borrower grew
    running(lent, 2)
    windows.bill(T0 + timedelta(hours=3))  # past its end: up to its end only
    window.refresh_from_db()
    assert window.billed_until == T0 + timedelta(hours=2)
    assert (window.used_unit_hours, window.lent_unit_hours, window.idle_unit_hours) == (2, 3, 3)
    # The idle unit-hours are the holder's, at the window's price, all of it idle cost (waste on the Usage page).
    assert idle_cost("reservation:7") == (3 * PRICE, 3 * PRICE)
    assert UsageRecord.objects.get(ref="reservation:7", hour=T0).team.slug == "nlp"


def test_work_in_its_own_window_commits_nothing_of_its_own(setup):
    window, own, _lent = setup
    QuotaHold.objects.filter(pk=own.pk).update(committed_units=4)
    before = committed(window.team_id, T0 + timedelta(minutes=10))
    QuotaHold.objects.filter(pk=own.pk).update(window=None)  # the same work on the quota commits its own
    assert committed(window.team_id, T0 + timedelta(minutes=10)) > before


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=6))
def test_used_lent_and_idle_always_make_the_whole_window(setup, samples):
    window, own, lent = setup
    ReservedWindow.objects.filter(pk=window.pk).update(billed_until=None, used_unit_hours=0, lent_unit_hours=0,
                                                       idle_unit_hours=0)
    UsageRecord.objects.filter(ref="reservation:7").delete()
    now = T0
    for minutes, used, borrowed in samples:
        running(own, used)
        running(lent, borrowed)
        now += timedelta(minutes=minutes)
        windows.bill(now)
    window.refresh_from_db()
    whole = interval_unit_hours(window.units, T0, min(now, window.end))
    # Exact but for the ledger's tenth decimal, each term rounded once per cycle.
    assert abs(window.used_unit_hours + window.lent_unit_hours + window.idle_unit_hours - whole) <= Decimal("1e-8")
    cost, idle = idle_cost("reservation:7")
    assert cost == idle
    assert abs(cost - window.idle_unit_hours * PRICE) < Decimal("0.000001")
    # Holder: its own work's hours (billed to that work) and the idle hours; the borrowers: the lent hours.
    holder = (window.used_unit_hours + window.idle_unit_hours) * PRICE
    borrowers = window.lent_unit_hours * PRICE
    assert abs(holder + borrowers - whole * PRICE) <= Decimal("1e-7")


def test_a_window_its_holder_uses_whole_bills_nothing_under_its_own_ref(setup):
    window, own, _lent = setup
    running(own, 4)
    windows.bill(T0 + timedelta(hours=1))
    window.refresh_from_db()
    assert (window.used_unit_hours, window.idle_unit_hours) == (4, 0)
    assert not UsageRecord.objects.filter(ref="reservation:7").exists()  # nothing idle, nothing billed to it


def test_the_holders_own_work_lent_its_window_before_the_start_is_not_taken_back_and_moves_into_it(
        flavors, settings, monkeypatch):
    """A team's own work on the quota, lent its window's idle units before the start, was taken back by its own
    window at ``start − lead`` (lent work first): it uses the team's reserved units early, needs no clearing, and
    is the window's work once it opens — off the quota, billed as the holder's use."""
    settings.SLIPWAY_RESERVATION_LEAD_MINUTES = 15
    a100 = flavors["a100-80gb"]
    east = clusters_with(a100, east=8)["east"]
    nlp, vision = make_team("nlp"), make_team("vision")
    window = reserved.hold("reservation:8", nlp, a100, east, 4, [(T0, T0 + timedelta(hours=2))], PRICE)[0]
    early = QuotaHold.objects.create(team=nlp, ref="run:1", flavor=a100, units=3, cluster=east, window=window,
                                     lent=True, open_units=3)
    other = QuotaHold.objects.create(team=vision, ref="run:2", flavor=a100, units=2, cluster=east, window=window,
                                     lent=True, open_units=2)
    needs = []
    monkeypatch.setattr(windows, "_clear_on", lambda mine, needing, need, now: needs.append(need) or [])
    windows.clear(T0 - timedelta(minutes=10))  # in the lead: 1 of its 4 units to clear, not 4
    assert needs == [1]
    early.refresh_from_db()
    assert early.lent and early.window_id == window.pk  # not yet: the window has not started
    windows.clear(T0 + timedelta(seconds=5))
    early.refresh_from_db()
    other.refresh_from_db()
    assert not early.lent and early.window_id == window.pk  # the team's window work now
    assert other.lent  # another team's stays lent, and is what the window takes back when it needs the units
    assert reserved.rooms([nlp.pk], T0 + timedelta(seconds=5))[(nlp.pk, a100.pk)][0].free == 1


# -- bookings' windows brought to now: cancelled while a cycle bills them, approved late ------------------------------


def moved_to(reservation, spans) -> list[ReservedWindow]:
    """The reservation's windows moved to ``spans`` (soonest first): its days, brought to now."""
    windows = list(reserved.of_ref(reservation.ref))
    for window, (start, end) in zip(windows, spans, strict=True):
        ReservedWindow.objects.filter(pk=window.pk).update(start=start, end=end)
    return list(reserved.of_ref(reservation.ref))


def test_a_cancel_after_a_cycle_billed_ahead_of_its_clock_keeps_what_was_billed(team, member, flavors, monkeypatch):
    """The other order of a cancel racing the cycle: a cycle whose clock ran ahead of the cancel's commits first. The
    cancel ended the window under way at its own earlier instant, leaving it billed past its end (its "ended" notice
    never went), and deleted the window that had just started by the cycle's clock, though its idle hours were on
    the ledger. Billed money stays billed: both end where their billing reached."""
    a100 = flavors["a100-80gb"]
    clusters_with(a100, east=16)
    now = timezone.now()
    cycle_now = now + timedelta(seconds=30)
    booked = {}
    for name, start, end in (("under-way", now - timedelta(hours=2), now + timedelta(hours=6)),
                             ("starting", now + timedelta(seconds=10), now + timedelta(hours=8))):
        booked[name] = services.book(member, booking_of(team, a100, units=4, name=name, hours=8))
        moved_to(booked[name], [(start, end)])
    assert windows.bill(cycle_now) == 2
    monkeypatch.setattr(timezone, "now", lambda: now)  # the cancel's clock, 30 s behind the cycle's
    for reservation in booked.values():
        services.cancel(member, Reservation.objects.get(pk=reservation.pk))
    kept = [reserved.of_ref(reservation.ref).get() for reservation in booked.values()]
    assert [(w.end, w.billed_until) for w in kept] == [(cycle_now, cycle_now)] * 2
    assert windows.bill(cycle_now + timedelta(minutes=5)) == 0  # over, and billed to their ends
    for reservation, window in zip(booked.values(), kept, strict=True):
        cost, _idle = idle_cost(reservation.ref)  # the ledger and the window agree
        assert abs(cost - window.idle_unit_hours * reservation.price_per_unit_hour) < Decimal("1e-6")
    assert sorted(w.pk for _reservation, w in services.windows_ended(now, cycle_now)) == sorted(w.pk for w in kept)


def waiting_booking(member, team, a100, recurrence=None):
    """A pending booking of 4 × ``a100`` on east for 8 h from next Monday (the policy wants approval)."""
    clusters_with(a100, east=16)
    FlavorPolicy.objects.create(flavor=a100, needs_approval=True)
    pending = services.book(member, booking_of(team, a100, units=4, name="late", hours=8, recurrence=recurrence))
    assert pending.state == "pending"
    return pending


def test_a_booking_approved_under_way_bills_from_the_approval_and_a_window_passed_meanwhile_never(
        team, member, staff, flavors):
    """A pending booking's windows bill nothing until it is approved (docs/reservations.md "States"): approved two
    hours into a window, the team pays from the approval, not from the window's start, and the window that passed
    while it waited is never billed. Approval only confirmed the windows, so the cycle billed both in full."""
    a100 = flavors["a100-80gb"]
    pending = waiting_booking(member, team, a100, recurrence=calendar.Recurrence(calendar.DAILY, count=3))
    now = timezone.now()
    passed, under_way, ahead = moved_to(pending, [
        (now - timedelta(hours=30), now - timedelta(hours=22)), (now - timedelta(hours=2), now + timedelta(hours=6)),
        (now + timedelta(hours=22), now + timedelta(hours=30))])
    assert windows.bill(now) == 0  # waiting: nothing billed
    services.approve(staff, Reservation.objects.get(pk=pending.pk))
    windows.bill(now + timedelta(hours=1))
    windows.bill(now + timedelta(hours=40))  # past all three
    for window in (passed, under_way, ahead):
        window.refresh_from_db()
    approved_at = Reservation.objects.get(pk=pending.pk).decided_at
    assert under_way.billed_until == under_way.end
    assert abs(under_way.idle_unit_hours - interval_unit_hours(4, approved_at, under_way.end)) < Decimal("1e-8")
    assert (passed.billed_until, passed.idle_unit_hours) == (None, 0)  # it never acted
    assert ahead.idle_unit_hours == 4 * 8  # a window after the approval is billed whole, from its start
    cost, _idle = idle_cost(pending.ref)  # the ledger: those two windows' idle hours only
    assert abs(cost - (under_way.idle_unit_hours + ahead.idle_unit_hours) * pending.price_per_unit_hour) < Decimal("1e-6")


def test_a_booking_whose_windows_all_passed_while_it_waited_is_not_approved_and_bills_nothing(
        team, member, staff, flavors, api_client_for):
    """Approving a booking with nothing left ahead would only bill its past windows in full as idle: it is refused
    (the API's 409 says why), it stays pending for staff to decline, and nothing is billed."""
    pending = waiting_booking(member, team, flavors["a100-80gb"])
    now = timezone.now()
    moved_to(pending, [(now - timedelta(hours=9), now - timedelta(hours=1))])
    answer = api_client_for(staff).post(f"/api/v1/reservations/{pending.pk}/approve/")
    assert answer.status_code == 409
    assert answer.json()["errors"]["detail"] == ["Nothing is left to approve: every window of this reservation ended "
                                                 "while it waited. Decline it to close it."]
    assert Reservation.objects.get(pk=pending.pk).state == "pending"
    assert windows.bill(now) == 0
    assert not UsageRecord.objects.filter(ref=pending.ref).exists()
    services.decline(staff, Reservation.objects.get(pk=pending.pk), "its window passed")
    assert not ReservedWindow.objects.filter(ref=pending.ref).exists()
