"""What is reserved when, pure: the one rule that keeps reservations within a cluster's reservable share.

Per cluster and flavor, at every instant, the units the live bookings hold never exceed the reservable
units (the policy's share of what the cluster's nodes offer: :func:`reservable`). A booking is checked
window by window against the windows already held there (:func:`first_conflict`), under the flavor's
row lock (:mod:`reservations.services`), so two bookings never both take the last units. Availability
(:func:`free_slots`) is the same figure per slot, so what the calendar shows free is what a booking
gets. Windows are half-open: one ending at 12:00 and one starting at 12:00 never overlap.

No database or clock: the caller reads the held windows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

#: The availability's grain: what the calendar draws and the API lists.
SLOT = timedelta(minutes=30)


@dataclass(frozen=True)
class Held:
    """A window a booking holds: ``units`` over ``[start, end)``."""

    start: datetime
    end: datetime
    units: int


def reservable(capacity: int, share: Decimal) -> int:
    """The units of a cluster's ``capacity`` that may be reserved at all: the share, rounded down."""
    return math.floor(capacity * share)


def level(held: Iterable[Held], at: datetime) -> int:
    """Units held at the instant ``at``."""
    return sum(h.units for h in held if h.start <= at < h.end)


def peak(held: Sequence[Held], start: datetime, end: datetime) -> tuple[int, datetime]:
    """The most units held at any instant of ``[start, end)``, and the first instant it is held.

    The level only rises where a window starts, so the instants to look at are ``start`` and the starts
    within the interval.
    """
    overlapping = [h for h in held if h.start < end and start < h.end]
    best, first = 0, start
    for at in sorted({start, *(h.start for h in overlapping if h.start > start)}):
        units = level(overlapping, at)
        if units > best:
            best, first = units, at
    return best, first


def first_conflict(held: Sequence[Held], windows: Iterable[tuple[datetime, datetime]], units: int,
                   reservable_units: int) -> datetime | None:
    """The first instant at which ``units`` more over ``windows`` would hold more than ``reservable_units``
    (None: they fit everywhere)."""
    for start, end in sorted(windows):
        overlapping = [h for h in held if h.start < end and start < h.end]
        for at in sorted({start, *(h.start for h in overlapping if h.start > start)}):
            if level(overlapping, at) + units > reservable_units:
                return at
    return None


def free_slots(held: Sequence[Held], reservable_units: int, start: datetime, end: datetime,
               slot: timedelta = SLOT) -> list[tuple[datetime, datetime, int]]:
    """``(slot start, slot end, free units)`` for each slot of ``[start, end)``: what a booking of that slot
    could still take, the reservable units less the most held at any instant of it (never below 0, should
    the cluster have lost nodes since the bookings were made)."""
    rows = []
    at = start
    while at < end:
        until = min(at + slot, end)
        rows.append((at, until, max(0, reservable_units - peak(held, at, until)[0])))
        at = until
    return rows
