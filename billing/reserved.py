"""Reserved windows: units of a flavor on a cluster booked by the calendar, and the money they commit.

A reservation (the ``reservations`` app) books windows; each is a :class:`billing.models.ReservedWindow`
row here, beside the quota holds, because money lives where the units do: a window commits its units at
the price it was booked at, used or not (docs/reservations.md "Money"), and the month's commitments
(:func:`billing.ledger.committed_by_team`), which budgets and admission read, count the part of every
window still ahead in the month. What is held when is what the booking's room is checked against.

Moves: :func:`hold` writes a booking's windows; :func:`release` frees what has not passed — the windows
not started go, one under way ends at the release (its past hours stay) — or, for a declined booking,
every window.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import QuerySet

from billing.ledger import committed, interval_cost, month_end, month_spend, month_start
from billing.models import ReservedWindow, TeamBudget
from core.money import ZERO


def overlapping(cluster_id: int, flavor_id: int, start: datetime, end: datetime) -> QuerySet:
    """The windows held on ``cluster_id`` of ``flavor_id`` that overlap ``[start, end)``."""
    return ReservedWindow.objects.filter(cluster_id=cluster_id, flavor_id=flavor_id, start__lt=end, end__gt=start)


def of_ref(ref: str) -> QuerySet:
    """The windows ``ref`` holds, soonest first."""
    return ReservedWindow.objects.filter(ref=ref).order_by("start")


def of_refs(refs: list[str], since: datetime) -> QuerySet:
    """The windows of ``refs`` not over before ``since``, soonest first."""
    return ReservedWindow.objects.filter(ref__in=refs, end__gt=since).order_by("start", "id")


def starting(prefix: str, since: datetime, until: datetime) -> QuerySet:
    """The windows of refs ``<prefix>:…`` that start in ``(since, until]``, soonest first."""
    return ReservedWindow.objects.filter(ref__startswith=f"{prefix}:", start__gt=since, start__lte=until).order_by("start")


def of_team(team_id: int, flavor_id: int, start: datetime, end: datetime) -> QuerySet:
    """The team's windows of ``flavor_id`` (on any cluster) that overlap ``[start, end)``."""
    return ReservedWindow.objects.filter(team_id=team_id, flavor_id=flavor_id, start__lt=end, end__gt=start)


def hold(ref: str, team, flavor, cluster, units: int, spans: Iterable[tuple[datetime, datetime]],
         price_per_unit_hour: Decimal) -> list[ReservedWindow]:
    return ReservedWindow.objects.bulk_create(
        ReservedWindow(ref=ref, team=team, flavor=flavor, cluster=cluster, units=units, start=start, end=end,
                       price_per_unit_hour=price_per_unit_hour) for start, end in spans)


def release(ref: str, now: datetime, everything: bool = False) -> None:
    """Free ``ref``'s windows from ``now`` on (every window with ``everything``)."""
    mine = ReservedWindow.objects.filter(ref=ref)
    if everything:
        mine.delete()
        return
    mine.filter(start__gte=now).delete()
    mine.filter(start__lt=now, end__gt=now).update(end=now)


def window_cost(price: Decimal, units: int, start: datetime, end: datetime) -> Decimal:
    return interval_cost(price, units, start, end)


def cost_by_month(price: Decimal, units: int, spans: Iterable[tuple[datetime, datetime]]) -> dict[datetime, Decimal]:
    """What windows of ``units`` at ``price`` cost per month (the portal's months), a window across a month's
    end split there."""
    months: dict[datetime, Decimal] = {}
    for start, end in spans:
        cursor = start
        while cursor < end:
            first, until = month_start(cursor), min(end, month_end(cursor))
            months[first] = months.get(first, ZERO) + interval_cost(price, units, cursor, until)
            cursor = until
    return months


@dataclass(frozen=True)
class Left:
    amount: Decimal
    currency: str


def budget_left(team, month: datetime, now: datetime) -> Left | None:
    """What ``team``'s budget leaves in ``month`` (its first instant) for more reserved money: this month, the
    budget less spent and committed money (reserved windows included); a later month, that month's budget less
    the windows reserved in it. None: no budget."""
    budget = TeamBudget.objects.filter(team=team).first()
    if budget is None:
        return None
    if month <= month_start(now):
        spent = month_spend([team.pk], now)[team.pk].spent
        return Left(budget.monthly_limit - spent - committed(team.pk, now), budget.currency)
    reserved_in = sum((interval_cost(w.price_per_unit_hour, w.units, max(w.start, month), min(w.end, month_end(month)))
                       for w in ReservedWindow.objects.filter(team=team, start__lt=month_end(month), end__gt=month)),
                      ZERO)
    return Left(budget.monthly_limit - reserved_in, budget.currency)
