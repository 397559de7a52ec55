"""A booking's windows, pure: the wall-clock rule of a reservation turned into instants.

A reservation is told in its time zone, as people say it: "Thursdays 09:00–17:00 Europe/Berlin". Its
windows (:func:`windows`) keep that wall-clock time across daylight-saving changes: each occurrence's
local start is the rule's (RFC 5545 recurrence, by :mod:`dateutil.rrule`, the library iCalendar readers
use), its local end the local start plus the first window's wall-clock length, and only then are both
made instants. So a weekly 09:00–12:00 booking is 08:00–11:00 UTC in winter and 07:00–10:00 UTC in
summer, three hours each week.

Two local times are not one instant each. One skipped by a change to summer time (02:30 on the night
clocks go from 02:00 to 03:00) is read with the offset before the change, as Python's ``zoneinfo``
reads it (``fold=0``): 02:30 CET, which is 03:30 CEST. One that happens twice when clocks go back is
its first instant. Windows whose start and end become the same instant or the wrong way round are
refused by the caller (:func:`bad_windows`).

No database, clock or settings (only Django's ``ValidationError``, for the fields' validator):
:mod:`reservations.services` gives it the request and the time zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from dateutil import rrule
from django.core.exceptions import ValidationError

DAILY = "daily"
WEEKLY = "weekly"
FREQUENCIES = (DAILY, WEEKLY)
#: Weekdays as the API and the CLI name them, Monday first (Python's and dateutil's 0).
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: The most windows one booking may have: a daily booking for a year.
MOST_WINDOWS = 366
#: The wall-clock times a booking (and an availability query) may be told in: ``[EARLIEST, LATEST)``. Far wider
#: than any policy lets a window start (not in the past; ``max_days_ahead`` ahead), and far enough inside a
#: ``datetime``'s years 1 to 9999 that all a booking sums stays a date: its instants (a zone's offset), its rule's
#: windows (367 weeks at most), their weeks and months, availability's 62 days of slots. A time outside is refused
#: as the request's field (:func:`validate_bookable`) before any of that is computed, rather than overflowing.
EARLIEST = datetime(2000, 1, 1)
LATEST = datetime(9000, 1, 1)


@dataclass(frozen=True)
class Recurrence:
    """How a booking repeats: every day, or every week on ``days`` (0 Monday … 6 Sunday), until the local
    date ``until`` (a window may start on it) or ``count`` windows in all, the first one included."""

    frequency: str
    days: tuple[int, ...] = ()
    until: date | None = None
    count: int | None = None


@dataclass(frozen=True, order=True)
class Window:
    """One occurrence, ``[start, end)``, in UTC."""

    start: datetime
    end: datetime

    @property
    def hours(self) -> Decimal:
        return Decimal((self.end - self.start).total_seconds()) / 3600


def validate_bookable(moment: datetime) -> None:
    """A date-time field's validator, the API's and the form's: ``moment`` (its own wall clock, naive or aware)
    within ``[EARLIEST, LATEST)``, so that converting and summing it never overflows into a 500."""
    if not EARLIEST <= moment.replace(tzinfo=None) < LATEST:
        raise ValidationError(f"a time from {EARLIEST:%Y-%m-%d} to before {LATEST:%Y-%m-%d}")


def until_refusal(start: datetime, until: date | None) -> str | None:
    """Why a rule's last date ``until`` does not fit a first window starting at ``start`` (naive, wall-clock), or
    None when it does: a last date before the first window's would leave the booking no window at all."""
    if until is None or until >= start.date():
        return None
    return f"{until:%Y-%m-%d} is before the first window's date, {start:%Y-%m-%d}: the last date must be on or after it"


def instant(local: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of a wall-clock time in ``zone`` (a skipped time read with the offset before the change,
    a repeated one as its first instant: ``fold=0``)."""
    return local.replace(tzinfo=zone, fold=0).astimezone(UTC)


def local(moment: datetime, zone: ZoneInfo) -> datetime:
    """``moment`` (aware) as the naive wall-clock time of ``zone``."""
    return moment.astimezone(zone).replace(tzinfo=None)


def windows(start: datetime, end: datetime, zone: ZoneInfo, recurrence: Recurrence | None = None) -> list[Window]:
    """Every window of a booking whose first window is ``[start, end)`` (naive, wall-clock in ``zone``).

    Without a recurrence, the one window. With one, every local start the rule gives from ``start`` on
    (the first window is ``start`` itself: the caller checks it falls on the rule), each as long in
    wall-clock time as the first, at most :data:`MOST_WINDOWS` (the caller refuses a rule that gives more).
    """
    length = end - start
    if recurrence is None:
        starts = [start]
    else:
        rule = rrule.rrule(
            rrule.DAILY if recurrence.frequency == DAILY else rrule.WEEKLY,
            dtstart=start,
            byweekday=recurrence.days or None if recurrence.frequency == WEEKLY else None,
            until=datetime.combine(recurrence.until, time.max) if recurrence.until else None,
            count=min(recurrence.count, MOST_WINDOWS + 1) if recurrence.count else None,
        )
        starts = []
        for local_start in rule:
            starts.append(local_start)
            if len(starts) > MOST_WINDOWS:
                break
    return [Window(instant(s, zone), instant(s + length, zone)) for s in starts]


def bad_windows(found: list[Window]) -> list[Window]:
    """Windows a clock change turned empty or backwards (a start in the hour skipped, its end within it)."""
    return [w for w in found if w.end <= w.start]


def on_the_rule(start: datetime, recurrence: Recurrence) -> bool:
    """Whether a weekly rule's chosen days include the first window's day (a daily rule: always)."""
    return recurrence.frequency == DAILY or not recurrence.days or start.weekday() in recurrence.days


def week_of(moment: datetime, zone: ZoneInfo) -> date:
    """The Monday (local date in ``zone``) of the week ``moment`` falls in: what a weekly cap counts by."""
    day = local(moment, zone).date()
    return day - timedelta(days=day.weekday())


def unit_hours_by_week(found: list[Window], units: int, zone: ZoneInfo) -> dict[date, Decimal]:
    """Unit-hours of ``units`` over ``found`` per local week (a window across midnight on Sunday split there)."""
    weeks: dict[date, Decimal] = {}
    for window in found:
        cursor = window.start
        while cursor < window.end:
            monday = week_of(cursor, zone)
            next_week = instant(datetime.combine(monday + timedelta(days=7), time()), zone)
            piece_end = min(window.end, next_week)
            weeks[monday] = weeks.get(monday, Decimal(0)) + units * Decimal((piece_end - cursor).total_seconds()) / 3600
            cursor = piece_end
    return weeks
