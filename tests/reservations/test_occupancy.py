"""The reservable share holds at every instant whatever is booked and cancelled, and availability tells the
truth: a slot shown with N free units takes a booking of N and refuses N + 1 (issue 49, the invariant)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from reservations import occupancy

SHARE = Decimal("0.5")

T0 = datetime(2026, 12, 7, tzinfo=UTC)
HALF_HOUR = timedelta(minutes=30)

# A booking: a start and a length in half hours over two days (quarter-hour offsets too), and its units.
bookings = st.tuples(st.integers(0, 4 * 48), st.integers(1, 4 * 12), st.integers(1, 12))
# What happens: book, or cancel the booking at an index (if there is one).
steps = st.lists(st.one_of(st.tuples(st.just("book"), bookings), st.tuples(st.just("cancel"), st.integers(0, 50))),
                 max_size=60)


def _span(quarters: int, length: int) -> tuple[datetime, datetime]:
    start = T0 + timedelta(minutes=15 * quarters)
    return start, start + timedelta(minutes=15 * length)


@settings(max_examples=300, deadline=None)
@given(capacity=st.integers(0, 40), steps=steps)
def test_reserved_units_never_exceed_the_share_at_any_instant(capacity, steps):
    limit = occupancy.reservable(capacity, SHARE)
    held: list[occupancy.Held] = []
    refused = 0
    for what, detail in steps:
        if what == "cancel":
            if held:
                held.pop(detail % len(held))
            continue
        quarters, length, units = detail
        start, end = _span(quarters, length)
        at = occupancy.first_conflict(held, [(start, end)], units, limit)
        if at is None:
            held.append(occupancy.Held(start, end, units))
        else:
            refused += 1
            # The instant named is in the window and really is over the share there.
            assert start <= at < end
            assert occupancy.level(held, at) + units > limit
    # Every instant where the level changes (the starts) is within the share.
    for h in held:
        assert occupancy.level(held, h.start) <= limit


@settings(max_examples=200, deadline=None)
@given(capacity=st.integers(1, 40), existing=st.lists(bookings, max_size=12), slot=st.integers(0, 95))
def test_a_slots_free_units_are_exactly_what_a_booking_of_it_gets(capacity, existing, slot):
    limit = occupancy.reservable(capacity, SHARE)
    held: list[occupancy.Held] = []
    for quarters, length, units in existing:
        start, end = _span(quarters, length)
        if occupancy.first_conflict(held, [(start, end)], units, limit) is None:
            held.append(occupancy.Held(start, end, units))
    start = T0 + slot * HALF_HOUR
    [(shown_start, shown_end, free)] = occupancy.free_slots(held, limit, start, start + HALF_HOUR)
    assert (shown_start, shown_end) == (start, start + HALF_HOUR)
    if free:
        assert occupancy.first_conflict(held, [(start, start + HALF_HOUR)], free, limit) is None
    assert occupancy.first_conflict(held, [(start, start + HALF_HOUR)], free + 1, limit) is not None


def test_windows_that_touch_do_not_overlap():
    held = [occupancy.Held(T0, T0 + HALF_HOUR, 4)]
    assert occupancy.first_conflict(held, [(T0 + HALF_HOUR, T0 + 2 * HALF_HOUR)], 4, 4) is None
    assert occupancy.first_conflict(held, [(T0 - HALF_HOUR, T0 + timedelta(minutes=1))], 1, 4) == T0


def test_the_first_conflict_is_the_earliest_instant_over_the_share_across_windows():
    held = [occupancy.Held(T0 + 3 * HALF_HOUR, T0 + 5 * HALF_HOUR, 3), occupancy.Held(T0 + 10 * HALF_HOUR, T0 + 11 * HALF_HOUR, 4)]
    windows = [(T0 + 9 * HALF_HOUR, T0 + 12 * HALF_HOUR), (T0, T0 + 4 * HALF_HOUR)]
    assert occupancy.first_conflict(held, windows, 2, 4) == T0 + 3 * HALF_HOUR


def test_the_share_rounds_down():
    assert occupancy.reservable(15, SHARE) == 7
    assert occupancy.reservable(0, SHARE) == 0
