"""The usage ledger: what ran, for how long, and what it cost (its terms: docs/glossary.md "ledger").

One :class:`~billing.models.UsageRecord` per (workload, hour). Workloads bill as *open
segments* (``billing.segments``): units running since a point in time, written to the
ledger only when the segment closes — its units change, it ends, or an hour boundary passes —
so a workload that keeps running as it was costs no write per reconcile cycle. Each closed
interval lies within one hour and is added to that hour's row by one conditional upsert,
which ignores an interval that does not start after what the row already covers: a replayed
close is a no-op instead of a double charge.

Spend and reports read the closed rows plus the open segments up to now, which live on the
quota holds (:class:`~billing.models.QuotaHold`: the units a workload holds and what they cost,
whatever its kind), so budgets and pages are exact to the second: spend and budgets summed per
group of identical segments (:func:`open_groups`, :func:`open_spend`), reports one by one
(:func:`open_segments`); commitments from the holds too (:func:`committed_by_team`).

:func:`cost_per_hour` is the one price rule: every cost figure derives from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import F, Q, Sum, Value
from django.db.models.functions import Concat, Left, StrIndex, TruncDate
from django.utils import timezone

from billing.models import (
    ClusterPrice,
    PreemptionEvent,
    QuotaHold,
    ReservedWindow,
    TeamBudget,
    UsageRecord,
    flavor_price,
    unit_price,
)
from core.money import ZERO
from core.rawsql import sql_datetime, sql_decimal
from fleet.models import GpuFlavor

#: Ledger amounts (cost, GPU-hours) keep ten decimals. A reconcile interval is a few seconds,
#: so rounding each one to 1/100 of a cent would bias the bill: an L4 at 0.32/h for 5 s costs
#: 0.000444, which rounds to 0.0004 (10% under) every single time. Reports round the sums.
LEDGER_PRECISION = Decimal("1E-10")
LEDGER_DIGITS = 20


def _flavor(flavor: GpuFlavor | str) -> GpuFlavor:
    return flavor if isinstance(flavor, GpuFlavor) else GpuFlavor.objects.get(name=flavor)


def cost_per_hour(price: Decimal, units: int) -> Decimal:
    """What ``units`` at ``price`` per unit-hour cost per hour, exact (MIG prices are already fraction-adjusted).

    The one price rule: the ledger, estimates, previews and forecasts all derive from it. It
    takes the price (:func:`billing.models.flavor_price` says which of a flavor's applies), never a flavor.
    Round only for display.
    """
    return price * units


def cost_ahead(price: Decimal, units: int, now: datetime, end: datetime) -> Decimal:
    """What ``units`` at ``price`` will cost from ``now`` until ``end``, exact (nothing once ``end`` has passed): committed money."""
    return cost_per_hour(price, units) * Decimal(max((end - now).total_seconds(), 0)) / Decimal(3600)


def month_start(now: datetime | None = None) -> datetime:
    """Midnight of the first day of ``now``'s month, in the portal's time zone."""
    local = timezone.localtime(now or timezone.now())
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def month_end(now: datetime | None = None) -> datetime:
    """Midnight of the first day of the month after ``now``'s, in the portal's time zone."""
    start = month_start(now)
    return (start + timedelta(days=32)).replace(day=1)


def hours_left_in_month(now: datetime) -> Decimal:
    """Hours from ``now`` to the month's end: what work without a known end commits (see :func:`cost_ahead`)."""
    return Decimal(max((month_end(now) - now).total_seconds(), 0)) / Decimal(3600)


def usage_hour(instant: datetime) -> datetime:
    """The start of ``instant``'s hour in the portal's time zone: the ledger row it is billed to.

    Local hours, so the rows line up with local days and months (zones offset by half an hour
    included), which is what budgets and reports are cut by. Cached: a reconcile cycle asks for
    the hour of the same instant once per workload.
    """
    return _local_hour(instant, timezone.get_current_timezone())


@lru_cache(maxsize=256)
def _local_hour(instant: datetime, zone) -> datetime:
    return timezone.localtime(instant, zone).replace(minute=0, second=0, microsecond=0)


def next_hour(instant: datetime) -> datetime:
    """The start of the ledger hour after ``instant``'s (hour arithmetic in UTC, so DST-safe)."""
    return (usage_hour(instant).astimezone(UTC) + timedelta(hours=1)).astimezone(timezone.get_current_timezone())


def interval_cost(price: Decimal, units: int, start: datetime, end: datetime) -> Decimal:
    """What ``units`` at ``price`` per unit-hour cost over ``[start, end)``, at ledger precision."""
    hours = Decimal((end - start).total_seconds()) / Decimal(3600)
    return (cost_per_hour(price, units) * hours).quantize(LEDGER_PRECISION, ROUND_HALF_UP)


def interval_gpu_hours(gpu_fraction: Decimal, units: int, start: datetime, end: datetime) -> Decimal:
    """The *physical* GPU-hours of ``units`` (each ``gpu_fraction`` of a GPU) over ``[start, end)``, at ledger
    precision: the one rule of the ledger's ``gpu_hours`` (reports' ``physical_gpu_hours``). A time-sliced ×4
    unit for an hour is 0.25 of a physical GPU-hour, a MIG 1g slice 1/7: what finance compares across flavors."""
    hours = Decimal((end - start).total_seconds()) / Decimal(3600)
    return (gpu_fraction * units * hours).quantize(LEDGER_PRECISION, ROUND_HALF_UP)


def interval_unit_hours(units: int, start: datetime, end: datetime) -> Decimal:
    """The *unit*-hours of ``units`` over ``[start, end)``, at ledger precision: what was held in the flavor's
    own units, the quantity a price is per (cost = unit-hours × price). The one rule of ``unit_hours``."""
    hours = Decimal((end - start).total_seconds()) / Decimal(3600)
    return (units * hours).quantize(LEDGER_PRECISION, ROUND_HALF_UP)


def open_segment_cost(price: Decimal, units: int, since: datetime | None, now: datetime) -> Decimal:
    """Cost of an open segment of ``units`` at ``price`` running since ``since``, up to ``now`` (0 when none is open)."""
    if not units or since is None or now <= since:
        return ZERO
    return interval_cost(price, units, since, now)


@dataclass(frozen=True)
class Interval:
    """``units`` of a flavor used by workload ``ref`` of ``team`` over ``[start, end)``.

    Of the flavor it carries what the ledger reads: its id and name (the row, reports), the
    ``price`` per unit-hour that applies (spot or on-demand, :func:`billing.models.flavor_price`) and the
    ``gpu_fraction`` of one unit. ``idle``: the GPUs' measured utilization stayed under the
    platform's idle threshold over the interval, so its whole cost is also idle cost (see
    :mod:`workloads.idle`).
    """

    team_id: int
    ref: str
    flavor_id: int
    flavor_name: str
    price: Decimal
    gpu_fraction: Decimal
    user_id: int | None
    start: datetime
    end: datetime
    units: int
    spot: bool
    idle: bool = False
    #: Of ``units``, how many were borrowed from the team's cohort: the quota hold's
    #: ``borrowed_units`` when the interval is written (billing reads it, :func:`billing.segments.record`).
    borrowed_units: int = 0

    def charge(self) -> tuple[Decimal, Decimal]:
        """``(cost, gpu_hours)`` of this interval."""
        return (interval_cost(self.price, self.units, self.start, self.end),
                interval_gpu_hours(self.gpu_fraction, self.units, self.start, self.end))

    def unit_hours(self) -> Decimal:
        """The unit-hours of this interval (:func:`interval_unit_hours`)."""
        return interval_unit_hours(self.units, self.start, self.end)

    def borrowed_gpu_hours(self, gpu_hours: Decimal) -> Decimal:
        """The part of ``gpu_hours`` (this interval's, :meth:`charge`) that ran on borrowed units.

        Pro rata: ``gpu_hours × min(borrowed, units) / units``. Which of a workload's units are
        "the borrowed ones" means nothing to the GPUs; the share of them is what fair share
        remembers (:mod:`quotas.fairshare`) and reports show.
        """
        borrowed = min(self.borrowed_units, self.units)
        if borrowed <= 0 or self.units <= 0:
            return ZERO
        return (gpu_hours * borrowed / self.units).quantize(LEDGER_PRECISION, ROUND_HALF_UP)

    def hourly(self) -> list[Interval]:
        """This interval cut at ledger-hour boundaries: one piece per hour row it touches."""
        pieces, start = [], self.start
        while start < self.end:
            end = min(next_hour(start), self.end)
            pieces.append(replace(self, start=start, end=end))
            start = end
        return pieces


def record_usage(team, ref: str, flavor: GpuFlavor | str, user, start: datetime, end: datetime, units: int,
                 spot: bool, idle: bool = False) -> Decimal:
    """Charge ``units`` of ``flavor`` for ``[start, end)``; returns the cost recorded (0 for a replay).

    The interval is cut at hour boundaries and each piece added to its hour's row (created on
    first use). A piece is ignored when it starts before the end of what its row already
    covers: billing only moves forward, so that is a replay (or the overlapping half of a race
    between the reconciler and a cancel, which both close the segment from the same start).
    """
    if end <= start or units <= 0:
        return ZERO
    flavor = _flavor(flavor)
    interval = Interval(team.pk, ref, flavor.pk, flavor.name, flavor_price(flavor, spot), flavor.gpu_fraction,
                        getattr(user, "pk", None), start, end, units, spot, idle)
    pieces = interval.hourly()
    recorded = record_intervals(pieces)
    return sum((p.charge()[0] for p in pieces if (p.ref, usage_hour(p.start)) in recorded), ZERO)


def record_intervals(intervals: list[Interval]) -> set[tuple[str, datetime]]:
    """Add every interval to its hour's row in one statement; returns the ``(ref, hour)`` rows changed.

    Each interval must lie within one ledger hour (:meth:`Interval.hourly`), and at most one per
    row (one statement cannot change a row twice). One missing from the result was a replay:
    see :func:`record_usage`.
    """
    intervals = [i for i in intervals if i.end > i.start and i.units > 0]
    if not intervals:
        return set()
    ops, currency = connection.ops, settings.SLIPWAY_CURRENCY
    params: list = []
    for i in intervals:
        cost, gpu_hours = i.charge()
        idle_cost, idle_gpu_hours = (cost, gpu_hours) if i.idle else (ZERO, ZERO)
        params += [i.team_id, i.ref, i.flavor_id, i.user_id, ops.adapt_datetimefield_value(usage_hour(i.start)),
                   ops.adapt_datetimefield_value(i.start), ops.adapt_datetimefield_value(i.end), i.units, i.spot,
                   *(ops.adapt_decimalfield_value(amount, LEDGER_DIGITS, 10)
                     for amount in (gpu_hours, cost, idle_gpu_hours, idle_cost, i.borrowed_gpu_hours(gpu_hours),
                                    i.unit_hours())),
                   currency]
    with connection.cursor() as cursor:
        cursor.execute(_upsert_sql(connection.vendor, len(intervals)), params)
        changed = {(ref, sql_datetime(hour)) for ref, hour in cursor.fetchall()}
    return changed


@lru_cache(maxsize=32)
def _upsert_sql(vendor: str, rows: int) -> str:
    """Insert each interval's row, or add the interval to its hour's row when it starts at or after its end.

    PostgreSQL and SQLite share the syntax. The WHERE of DO UPDATE makes a replay a no-op (no
    row changed, none returned). Money is added in SQL; Django quantizes decimals it reads back.
    """
    q = connection.ops.quote_name
    table = q(UsageRecord._meta.db_table)
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"] * rows)
    added = ", ".join(f"{column} = {table}.{column} + excluded.{column}"
                      for column in ("gpu_hours", "cost", "idle_gpu_hours", "idle_cost", "borrowed_gpu_hours",
                                     "unit_hours"))
    return (
        f"INSERT INTO {table} (team_id, ref, flavor_id, user_id, hour, {q('start')}, {q('end')}, units, spot,"  # noqa: S608 - only quoted model names are interpolated
        f" gpu_hours, cost, idle_gpu_hours, idle_cost, borrowed_gpu_hours, unit_hours, currency) VALUES {values}"
        f" ON CONFLICT (ref, hour) DO UPDATE SET {q('end')} = excluded.{q('end')}, {added},"
        f" units = CASE WHEN excluded.units > {table}.units THEN excluded.units ELSE {table}.units END"
        f" WHERE {table}.{q('end')} <= excluded.{q('start')} RETURNING ref, hour"
    )


def cost_by_ref(refs: Iterable[str]) -> dict[str, Decimal]:
    """Cost to date of each workload in ``refs`` (one query); refs without usage map to 0."""
    refs = list(refs)
    totals = dict.fromkeys(refs, ZERO)
    if refs:
        rows = UsageRecord.objects.filter(ref__in=refs).values("ref").annotate(total=Sum("cost")).order_by()
        for row in rows:
            totals[row["ref"]] = row["total"] or ZERO
    return totals


def cost_by_hour(team_id: int, refs: Iterable[str], since: datetime, until: datetime,
                 now: datetime | None = None) -> dict[str, dict[datetime, Decimal]]:
    """The cost of each workload in ``refs`` (of team ``team_id``) in each ledger hour of ``[since, until)`` it
    ran in: ``{ref: {hour: cost}}`` at ledger precision, hours as :func:`usage_hour` names them (one query and
    the team's open segments).

    An hour counts when it starts in ``[usage_hour(since), until)``. Its cost is its closed ledger row plus the
    open segment's piece in it up to ``now`` (the current hour, not yet written), so the figures are the ones
    spend and reports show. What an endpoint's API keys are charged is split from these by the
    endpoint kind.
    """
    refs = set(refs)
    first = usage_hour(since)
    costs: dict[str, dict[datetime, Decimal]] = {ref: {} for ref in refs}

    def add(ref: str, hour: datetime, cost: Decimal) -> None:
        costs[ref][hour] = costs[ref].get(hour, ZERO) + cost

    if refs:
        zone = timezone.get_current_timezone()
        for ref, hour, cost in (UsageRecord.objects.filter(ref__in=refs, hour__gte=first, hour__lt=until)
                                .values_list("ref", "hour", "cost")):
            add(ref, _local_hour(hour, zone), cost)
        now = min(now or timezone.now(), until)
        for piece in open_intervals([team_id], now):
            if piece.ref in refs and first <= usage_hour(piece.start) < until:
                add(piece.ref, usage_hour(piece.start), piece.charge()[0])
    return costs


def gpu_hours_by_ref(refs: Iterable[str]) -> dict[str, Decimal]:
    """The physical GPU-hours in the ledger of each workload in ``refs`` that was ever billed (one query)."""
    refs = list(refs)
    if not refs:
        return {}
    rows = UsageRecord.objects.filter(ref__in=refs).values("ref").annotate(hours=Sum("gpu_hours")).order_by()
    return {row["ref"]: row["hours"] for row in rows}


def gpu_hours_to(billed: Decimal, gpu_fraction: Decimal, open_units: int, billed_until: datetime | None,
                 now: datetime) -> Decimal:
    """A workload's physical GPU-hours to ``now``: ``billed`` (the ledger's, :func:`gpu_hours_by_ref`) plus its open
    segment's, by the ledger's own rule (:func:`interval_gpu_hours`) — as its cost to now is the ledger's plus the
    open segment's."""
    if not open_units or billed_until is None or now <= billed_until:
        return billed
    return billed + interval_gpu_hours(gpu_fraction, open_units, billed_until, now)


def idle_by_ref(refs: Iterable[str]) -> dict[str, tuple[Decimal, Decimal]]:
    """``(idle_gpu_hours, idle_cost)`` in the ledger of each workload in ``refs`` that was ever idle (one query)."""
    refs = list(refs)
    if not refs:
        return {}
    rows = (UsageRecord.objects.filter(ref__in=refs, idle_gpu_hours__gt=0).values("ref")
            .annotate(hours=Sum("idle_gpu_hours"), cost=Sum("idle_cost")).order_by())
    return {row["ref"]: (row["hours"], row["cost"]) for row in rows}


def _priced(q) -> tuple[str, str]:
    """The join of a quota hold ``h`` to its flavor ``f`` and its cluster's price of it, and the two
    price columns (on-demand, spot) that result: its charged rate once billing began
    (``h.charged_price``), else the price of the cluster it was placed on where that cluster prices
    the flavor, else the flavor's — :func:`billing.models.hold_rate`, the one rule of a hold's rate, in SQL:
    kept SQL so one statement prices every hold (and groups holds alike by it), and compared with the rule
    on every way of finding the rate by tests/billing/test_hold_rate.py."""
    join = (f"JOIN {q(GpuFlavor._meta.db_table)} f ON f.id = h.flavor_id"
            f" LEFT JOIN {q(ClusterPrice._meta.db_table)} cp ON cp.flavor_id = h.flavor_id AND cp.cluster_id = h.cluster_id")
    columns = ("COALESCE(h.charged_price, cp.price_per_hour, f.price_per_hour),"
               " COALESCE(h.charged_price, cp.spot_price_per_hour, f.spot_price_per_hour)")
    return join, columns


def _prefix_sql(vendor: str) -> str:
    """:func:`ref_prefix` of ``h.ref`` in ``vendor``'s SQL (what precedes its first colon)."""
    if vendor == "postgresql":
        return "SPLIT_PART(h.ref, ':', 1)"
    return "SUBSTR(h.ref, 1, INSTR(h.ref || ':', ':') - 1)"


@lru_cache(maxsize=8)
def _open_segments_sql(vendor: str, teams: int) -> str:
    """The open segments of ``teams`` team ids up to a ``now``: the holds with units running.

    Plain SQL, built once per vendor and number of teams: every admission of a budgeted team
    reads the open segments, and compiling this with the ORM cost more CPU than the database
    spent answering it (bench/profile_api.py). Values travel as parameters.
    """
    q = connection.ops.quote_name
    join, prices = _priced(q)
    in_teams = ", ".join(["%s"] * teams)
    return (f"SELECT h.ref, h.team_id, h.user_id, h.billed_until, h.open_units, h.spot, h.open_idle,"  # noqa: S608 - only quoted model table names are interpolated
            f" f.id, f.name, {prices}, f.gpu_fraction"
            f" FROM {q(QuotaHold._meta.db_table)} h {join}"
            f" WHERE h.team_id IN ({in_teams}) AND h.released_at IS NULL AND h.open_units > 0 AND h.billed_until < %s")


def _rows(sql: str, team_ids: list[int], *params) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, [*team_ids, *params])
        return cursor.fetchall()


def open_segments(team_ids: list[int], now: datetime) -> list[Interval]:
    """The open segments of ``team_ids``' held units, each from its start to ``now`` (one statement).

    What the usage reports read, which split cost by workload and user; spend and budgets read
    the summed :func:`open_groups`.
    """
    if not team_ids:
        return []
    rows = _rows(_open_segments_sql(connection.vendor, len(team_ids)), team_ids,
                 connection.ops.adapt_datetimefield_value(now))
    return [Interval(team_id, ref, flavor_id, name, unit_price(sql_decimal(price), sql_decimal(spot_price), bool(spot)),
                     sql_decimal(fraction), user_id, sql_datetime(since), now, units, bool(spot), bool(idle))
            for ref, team_id, user_id, since, units, spot, idle, flavor_id, name, price, spot_price, fraction in rows]


def open_intervals(team_ids: list[int], now: datetime) -> list[Interval]:
    """The open segments of ``team_ids``' running workloads, each up to ``now``, cut at hour boundaries."""
    return [piece for segment in open_segments(team_ids, now) for piece in segment.hourly()]


class RefLabel(NamedTuple):
    """What people call the workload behind a ledger ref."""

    name: str
    url: str = ""  #: its page, when it has one
    noun: str = ""  #: what one of its workload kind is called: "run", "endpoint" (the kind's ``noun``)
    number: int | None = None  #: its id (the ref's primary key: ``slipway describe 12``)
    team: str = ""  #: its team's slug

    def words(self, with_team: bool = True) -> str:
        """The one way people are told which workload: ``run train-llama (#12) of team nlp``.

        Every notification (in-app, e-mail, webhook text), the cost report's ``label`` (API, CSV,
        ``slipway cost``) and the staff console's messages say this, never the bare ref (``run:12``),
        which stays in machine fields. ``with_team=False`` where the sentence names the team already
        ("the team's high-priority run big (#13)"), so no name is said twice.
        """
        words = " ".join(part for part in (self.noun, self.name) if part)
        if self.number is not None:
            words = f"{words} (#{self.number})"
        return f"{words} of team {self.team}" if with_team and self.team else words


#: What names a ledger ref for people: callables ``(refs) -> {ref: RefLabel}`` (the workloads app registers one).
_REF_LABELS: list[Callable[[list[str]], dict[str, RefLabel]]] = []


def register_ref_labels(source: Callable[[list[str]], dict[str, RefLabel]]) -> None:
    """Let reports name the workloads behind ledger refs (idempotent)."""
    if source not in _REF_LABELS:
        _REF_LABELS.append(source)


#: What each workload kind is called, by its refs' prefix: callables ``() -> {prefix: noun}`` (the workloads app
#: registers the kind registry's; quotas cannot read it).
_KIND_NOUNS: list[Callable[[], dict[str, str]]] = []


def register_kind_nouns(source: Callable[[], dict[str, str]]) -> None:
    """Let reports call a kind by its noun ("endpoint") rather than its refs' prefix ("ep") (idempotent)."""
    if source not in _KIND_NOUNS:
        _KIND_NOUNS.append(source)


def kind_nouns() -> dict[str, str]:
    """``{prefix: noun}`` of the kinds some source knows."""
    found: dict[str, str] = {}
    for source in _KIND_NOUNS:
        found.update(source())
    return found


def ref_labels(refs: list[str]) -> dict[str, RefLabel]:
    """``ref -> RefLabel`` for the refs some source knows."""
    found: dict[str, RefLabel] = {}
    for source in _REF_LABELS:
        found.update(source(refs))
    return found


def committed(team_id: int, now: datetime) -> Decimal:
    """Estimated cost still to come this month from the team's admitted work (to its limit, or the month's end)."""
    return committed_by_team([team_id], now).get(team_id, ZERO)


@lru_cache(maxsize=8)
def _commitments_sql(vendor: str, teams: int) -> str:
    """The held units that commit money, per team, price, start and limit, and the reserved windows not over
    by the second parameter that start before the third, each with its end (one statement).

    Holds that end alike are summed (the price rule is linear in units): those without a limit
    give one row per team, flavor and spot, however many workloads hold them; their end column is NULL.
    Plain SQL built once, as :func:`_open_segments_sql` and for the same reason: every admission against an
    estimated cost reads it.
    """
    q = connection.ops.quote_name
    join, prices = _priced(q)
    in_teams = ", ".join(["%s"] * teams)
    # Without a limit the start does not matter: NULL, so it does not split the sums.
    started = "CASE WHEN h.limit_minutes IS NULL THEN NULL ELSE h.started_at END"
    return (f"SELECT h.team_id, h.spot, {started}, h.limit_minutes, SUM(h.committed_units), f.id, {prices}, NULL"  # noqa: S608 - only quoted model table names are interpolated
            f" FROM {q(QuotaHold._meta.db_table)} h {join}"
            # Work in its own team's reserved window commits nothing of its own: the window commits its units.
            f" WHERE h.team_id IN ({in_teams}) AND h.released_at IS NULL AND h.committed_units > 0"
            f" AND (h.window_id IS NULL OR h.lent)"
            f" GROUP BY h.team_id, h.spot, {started}, h.limit_minutes, f.id, {prices}"
            # A window is on-demand capacity at its booked price (both price columns), from its start to its end.
            f" UNION ALL SELECT w.team_id, (1 = 0), w.start, NULL, w.units, w.flavor_id, w.price_per_unit_hour,"
            f" w.price_per_unit_hour, w.{q('end')} FROM {q(ReservedWindow._meta.db_table)} w"
            f" WHERE w.team_id IN ({in_teams}) AND w.{q('end')} > %s AND w.start < %s")


def committed_by_team(team_ids: list[int], now: datetime) -> dict[int, Decimal]:
    """:func:`committed` of each team in ``team_ids`` (one statement); teams without any map to 0.

    Each hold commits its ``committed_units`` at its price (:func:`cost_ahead`) from ``now``
    until its runtime limit runs out — counted from its pods' start, or from now if they have
    not started — or until the month's end, whichever comes first; a hold without a limit (a run
    without one, an endpoint's minimum) until the month's end. It is what
    :meth:`quotas.decide.ResourceRequest.committed_cost` counted when the work was admitted. Reserved
    windows (:class:`~billing.models.ReservedWindow`) commit the part of each still ahead this month, at
    their booked price, used or not; work admitted into its team's window commits nothing of its own (the
    window commits its units), until the window ends and it goes back to the quota.
    """
    totals = dict.fromkeys(team_ids, ZERO)
    if not team_ids:
        return totals
    until = month_end(now)
    for team_id, spot, started_at, minutes, units, _flavor_id, price, spot_price, window_end in _rows(
            _commitments_sql(connection.vendor, len(team_ids)), team_ids, *team_ids, now, until):
        if window_end is not None:
            ahead = cost_ahead(sql_decimal(price), units, max(sql_datetime(started_at), now),
                               min(sql_datetime(window_end), until))
            totals[team_id] = totals.get(team_id, ZERO) + ahead
            continue
        end = until
        if minutes is not None:
            end = min((sql_datetime(started_at) if started_at else now) + timedelta(minutes=minutes), until)
        price = unit_price(sql_decimal(price), sql_decimal(spot_price), bool(spot))
        totals[team_id] = totals.get(team_id, ZERO) + cost_ahead(price, units, now, end)
    return totals


class OpenGroup(NamedTuple):
    """Open segments alike: ``count`` workloads of kind ``prefix`` of team ``team_id``, each running
    ``units`` of flavor ``flavor_id`` at ``price`` per unit-hour (its spot or on-demand price)
    since ``start``. Segments alike cost alike to the last ledger digit, so a group is priced once.
    """

    team_id: int
    prefix: str
    flavor_id: int
    price: Decimal
    start: datetime
    units: int
    count: int


@lru_cache(maxsize=8)
def _open_groups_sql(vendor: str, teams: int, budgeted: bool = False) -> str:
    """:func:`_open_segments_sql`, summed: segments alike (team, kind, flavor and its prices, spot,
    start and units) are one row with their count. A segment's cost is rounded to the ledger's
    precision on its own, so only segments with the same start and units may be priced together;
    at steady state the work open for more than an hour all starts at the hour's start, so 10,000
    running workloads are a handful of rows. ``budgeted``: only of teams with a budget (none for the others)."""
    q = connection.ops.quote_name
    join, prices = _priced(q)
    prefix = _prefix_sql(vendor)
    in_teams = ", ".join(["%s"] * teams)
    budget = (f" AND EXISTS (SELECT 1 FROM {q(TeamBudget._meta.db_table)} b WHERE b.team_id = h.team_id"  # noqa: S608 - a quoted table name only
              " AND b.monthly_limit IS NOT NULL)") if budgeted else ""
    return (f"SELECT h.team_id, {prefix}, f.id, {prices}, h.spot, h.billed_until, h.open_units, COUNT(*)"  # noqa: S608 - only quoted model table names are interpolated
            f" FROM {q(QuotaHold._meta.db_table)} h {join}"
            f" WHERE h.team_id IN ({in_teams}) AND h.released_at IS NULL AND h.open_units > 0 AND h.billed_until < %s"
            f"{budget} GROUP BY h.team_id, {prefix}, f.id, {prices}, h.spot, h.billed_until, h.open_units")


def open_groups(team_ids: list[int], now: datetime) -> list[OpenGroup]:
    """The open segments of ``team_ids`` up to ``now``, summed (one statement): what budgets and spend
    read (:func:`open_spend`); reports, which need each segment's workload and user, read :func:`open_segments`."""
    if not team_ids:
        return []
    return open_groups_of(_rows(*open_groups_statement(team_ids, now)))


def open_groups_statement(team_ids: list[int], now: datetime, budgeted: bool = False) -> tuple[str, list]:
    """:func:`open_groups`' statement, for a caller that sends it with others in one round trip
    (admission, under the team's lock); its rows become groups by :func:`open_groups_of`.
    ``budgeted``: only the groups of teams with a budget (admission needs no others)."""
    return (_open_groups_sql(connection.vendor, len(team_ids), budgeted),
            [*team_ids, connection.ops.adapt_datetimefield_value(now)])


def open_groups_of(rows: list[tuple]) -> list[OpenGroup]:
    """The :class:`OpenGroup` of each row :func:`open_groups_statement` read."""
    return [OpenGroup(team_id, prefix, flavor_id, unit_price(sql_decimal(price), sql_decimal(spot_price), bool(spot)),
                      sql_datetime(since), units, count)
            for team_id, prefix, flavor_id, price, spot_price, spot, since, units, count in rows]


@dataclass
class OpenSpend:
    """What a team's open segments cost: from a point in time to now, per kind, and per hour."""

    spent: Decimal = ZERO
    by_prefix: dict[str, Decimal] = field(default_factory=dict)
    burn_per_hour: Decimal = ZERO


def open_spend(team_ids: list[int], since: datetime, now: datetime,
               groups: list[OpenGroup] | None = None) -> dict[int, OpenSpend]:
    """What the open segments of ``team_ids`` cost from ``since`` to ``now``, and per hour (one statement).

    The segments come summed per team, kind, flavor, spot, start and units (:class:`OpenGroup`),
    so 10,000 running workloads are a few rows, each priced once by the ledger's own rule: a
    segment's cost is :func:`interval_cost` of its part after ``since`` (rounded to the
    ledger's precision per segment, as its ledger row will be), times the segments alike.
    Teams without open segments map to an empty :class:`OpenSpend`. ``groups``: the teams' open groups
    as the caller already read them (:func:`open_groups_statement`), leaving no statement.
    """
    totals = {team_id: OpenSpend() for team_id in team_ids}
    for group in open_groups(team_ids, now) if groups is None else groups:
        total = totals.setdefault(group.team_id, OpenSpend())
        total.burn_per_hour += cost_per_hour(group.price, group.units) * group.count
        start = max(group.start, since)
        if start < now:
            cost = interval_cost(group.price, group.units, start, now) * group.count
            total.spent += cost
            total.by_prefix[group.prefix] = total.by_prefix.get(group.prefix, ZERO) + cost
    return totals


def _closed_rows_sql(quote_name, teams: str, since: str) -> str:
    """``FROM … WHERE …`` of the ledger rows that count as spent: the teams ``teams`` (an SQL condition
    on ``team_id``) from ``since`` (a placeholder) on. The one rule of both readings below."""
    return (f"FROM {quote_name(UsageRecord._meta.db_table)} WHERE team_id {teams}"
            f" AND {quote_name('start')} >= {since}")


@lru_cache(maxsize=32)
def _closed_spend_sql(vendor: str, teams: int) -> str:
    """The ledger's cost per team from an instant on, for ``teams`` team ids: plain SQL, built once.

    Plain, because every admission of a budgeted team reads it under the team's lock, where
    compiling an ORM query costs more CPU than the index-only scan it runs (see admission's hot path).
    """
    in_teams = f"IN ({', '.join(['%s'] * teams)})"
    return f"SELECT team_id, SUM(cost) {_closed_rows_sql(connection.ops.quote_name, in_teams, '%s')} GROUP BY team_id"


def closed_spend_subquery(quote_name, team: str, since: str) -> str:
    """One team's ledger cost from ``since`` on as a scalar subquery (``team`` and ``since``: placeholders), for
    a statement that reads it with other figures; :func:`month_spend` takes the sum it reads (``closed``)."""
    return f"(SELECT SUM(cost) {_closed_rows_sql(quote_name, f'= {team}', since)})"


def _closed_figure(total) -> Decimal:
    """A ledger sum as spend counts it: at the ledger's precision, as the ORM would read it (SQLite sums in
    floats); 0 without rows."""
    return sql_decimal(total).quantize(LEDGER_PRECISION, ROUND_HALF_UP) if total is not None else ZERO


def closed_spend(team_ids: list[int], since: datetime) -> dict[int, Decimal]:
    """What the ledger holds for each team in ``team_ids`` from ``since`` on (one statement); 0 without rows."""
    totals = dict.fromkeys(team_ids, ZERO)
    if not team_ids:
        return totals
    with connection.cursor() as cursor:
        cursor.execute(_closed_spend_sql(connection.vendor, len(team_ids)),
                       [*team_ids, connection.ops.adapt_datetimefield_value(since)])
        for team_id, total in cursor.fetchall():
            totals[team_id] = _closed_figure(total)
    return totals


@dataclass(frozen=True)
class MonthSpend:
    """A team's month to date: what it spent (closed ledger rows and open segments) and spends per hour now."""

    spent: Decimal = ZERO
    burn_per_hour: Decimal = ZERO


def month_spend(team_ids: list[int], now: datetime, closed: dict[int, object] | None = None,
                groups: list[OpenGroup] | None = None) -> dict[int, MonthSpend]:
    """Month-to-date spend of each team in ``team_ids``: the one figure admission, budgets, pages and the admin show.

    The ledger's rows from the start of ``now``'s month plus the open segments up to ``now``
    (two statements, whatever the number of teams or workloads). ``closed``: each team's ledger
    sum from the month's start as a statement of the caller's already read it
    (:func:`closed_spend_subquery`; admission reads it with its facts, a round trip less under
    the team's lock), leaving the open segments' one statement; ``groups``: the open segments as the
    caller read them too (:func:`open_groups_statement`, sent with admission's facts), leaving none.
    """
    since = month_start(now)
    if closed is None:
        closed = closed_spend(team_ids, since)
    else:
        closed = {team_id: _closed_figure(closed.get(team_id)) for team_id in team_ids}
    open_ = open_spend(team_ids, since, now, groups)
    return {team_id: MonthSpend(closed[team_id] + open_[team_id].spent, open_[team_id].burn_per_hour)
            for team_id in team_ids}


def spent_month_by_prefix(team, prefixes: list[str], now: datetime) -> dict[str, Decimal]:
    """This month's spend of the team split by workload kind (ref prefix): ledger and open segments."""
    since = month_start(now)
    sums = UsageRecord.objects.filter(team=team, start__gte=since).aggregate(
        **{prefix: Sum("cost", filter=Q(ref__startswith=f"{prefix}:")) for prefix in prefixes})
    open_ = open_spend([team.pk], since, now)[team.pk].by_prefix
    return {prefix: (sums[prefix] or ZERO) + open_.get(prefix, ZERO) for prefix in prefixes}


def spent_month(team, now: datetime | None = None) -> Decimal:
    """The team's spend since the start of the current month (:func:`month_spend`)."""
    return month_spend([team.pk], now or timezone.now())[team.pk].spent


GROUP_FIELDS = {"day": "day", "flavor": "flavor__name", "user": "user__username", "workload": "ref",
                "team": "team__slug", "kind": "kind"}


def ref_prefix(ref: str) -> str:
    """The workload kind of a ledger ref: its prefix (``run:42`` → ``run``; a ref without one is its own).

    The one rule of the report's ``kind`` grouping; :func:`_kind_expression` says it in SQL."""
    return ref.partition(":")[0]


def _kind_expression():
    """:func:`ref_prefix` of the ``ref`` column in SQL, the same on PostgreSQL and SQLite (``LEFT`` and
    ``STRPOS``, ``SUBSTR`` and ``INSTR``): what precedes the ref's first colon, a colon appended
    first so that a ref without one is its own prefix (and no length is ever negative)."""
    ref = Concat(F("ref"), Value(":"))
    return Left(ref, StrIndex(ref, Value(":")) - 1)


def _annotated(queryset, keys: tuple[str, ...], at: str):
    """``queryset`` (ledger rows or preemption events, dated by their column ``at``) with the groupings of
    ``keys`` that are no column of theirs: the local day, the workload kind."""
    if "day" in keys:
        queryset = queryset.annotate(day=TruncDate(at))
    if "kind" in keys:
        queryset = queryset.annotate(kind=_kind_expression())
    return queryset

#: The sums of a report row, in the order :func:`usage_table` keeps them: the ledger's (physical GPU-hours,
#: cost, their idle and borrowed parts, unit-hours), then the work preemption lost (:class:`PreemptionEvent`).
#: Two figures of time, named apart: ``gpu_hours`` is *physical* GPU time (units × ``gpu_fraction`` × hours,
#: :func:`interval_gpu_hours`; reports also call it ``physical_gpu_hours``) and ``unit_hours`` the flavor's
#: units held × hours (:func:`interval_unit_hours`, what prices are per).
REPORT_SUMS = ("gpu_hours", "cost", "idle_gpu_hours", "idle_cost", "borrowed_gpu_hours", "unit_hours",
               "preempted_gpu_hours", "preempted_cost")
#: The sums the ledger's rows hold (the rest come from the preemption log).
LEDGER_SUMS = REPORT_SUMS[:6]
_PREEMPTED_HOURS, _PREEMPTED_COST = REPORT_SUMS.index("preempted_gpu_hours"), REPORT_SUMS.index("preempted_cost")


def usage_rows(teams, since, until, group_by: str, now: datetime | None = None) -> list[dict]:
    """Cost report rows ``{group, <REPORT_SUMS>, currency}`` for ``teams`` in ``[since, until)``.

    ``idle_*`` is the part of the allocated GPU time whose measured utilization stayed under the
    idle threshold (and what it cost). See :func:`usage_table`.
    """
    return [{"group": row.pop(group_by), **row} for row in usage_table(teams, since, until, (group_by,), now)]


def usage_table(teams, since, until, keys: tuple[str, ...], now: datetime | None = None) -> list[dict]:
    """Usage of ``teams`` in ``[since, until)`` summed per combination of ``keys`` (``GROUP_FIELDS``) and currency.

    ``kind`` groups by workload kind, the refs' prefix (:func:`ref_prefix`): ``run``, ``endpoint``, … —
    quotas knows no kind, so what people call one is the caller's to say.

    Rows ``{<key>: str, …, <REPORT_SUMS>, currency}`` sorted by keys. Closed ledger rows plus the
    open segments up to ``now``, so the current hour is included; an open segment's borrowed
    part is its quota hold's now (:meth:`Interval.borrowed_gpu_hours`). ``preempted_*``
    sum the work preemptions of the period lost (:class:`PreemptionEvent`, by its ``at``): a
    group with preemptions and no usage is a row of its own.
    """
    teams = list(teams)
    records = _annotated(UsageRecord.objects.filter(team__in=teams, start__gte=since, start__lt=until), keys, "start")
    fields = [GROUP_FIELDS[key] for key in keys]
    totals: dict[tuple[str, ...], list[Decimal]] = {}
    for row in records.values(*fields, "currency").annotate(**{s: Sum(s) for s in LEDGER_SUMS}).order_by():
        group = tuple(str(row[f]) if row[f] is not None else "" for f in fields)
        totals[(*group, row["currency"])] = [row[s] for s in LEDGER_SUMS] + [ZERO] * (len(REPORT_SUMS) - len(LEDGER_SUMS))
    now = min(now or timezone.now(), until)
    pieces = [i for i in open_intervals([team.pk for team in teams], now) if since <= i.start < until]
    borrowed = QuotaHold.objects.held().borrowed_by_ref(list({i.ref for i in pieces}))
    names = {"user": _usernames({i.user_id for i in pieces}) if "user" in keys else {},
             "team": {team.pk: team.slug for team in teams}}
    for piece in pieces:
        cost, gpu_hours = piece.charge()
        idle_cost, idle_gpu_hours = (cost, gpu_hours) if piece.idle else (ZERO, ZERO)
        borrowed_gpu_hours = replace(piece, borrowed_units=borrowed.get(piece.ref, 0)).borrowed_gpu_hours(gpu_hours)
        group = tuple(_group_of(piece, key, names) for key in keys)
        total = totals.setdefault((*group, settings.SLIPWAY_CURRENCY), [ZERO] * len(REPORT_SUMS))
        for index, amount in enumerate((gpu_hours, cost, idle_gpu_hours, idle_cost, borrowed_gpu_hours,
                                        piece.unit_hours())):
            total[index] += amount
    events = _annotated(PreemptionEvent.objects.filter(team__in=teams, at__gte=since, at__lt=until), keys, "at")
    for row in (events.values(*fields, "currency")
                .annotate(hours=Sum("lost_gpu_hours"), lost=Sum("lost_cost")).order_by()):
        group = tuple(str(row[f]) if row[f] is not None else "" for f in fields)
        total = totals.setdefault((*group, row["currency"]), [ZERO] * len(REPORT_SUMS))
        total[_PREEMPTED_HOURS] += row["hours"] or ZERO
        total[_PREEMPTED_COST] += row["lost"] or ZERO
    return [{**dict(zip(keys, group[:-1], strict=True)), **with_physical(dict(zip(REPORT_SUMS, sums, strict=True))),
             "currency": group[-1]} for group, sums in sorted(totals.items())]


def with_physical(sums: dict[str, Decimal]) -> dict[str, Decimal]:
    """A report row's sums with ``physical_gpu_hours``: its ``gpu_hours`` under the name that cannot be taken
    for unit-hours (the ledger's GPU-hours were physical from the start; the old name stays, the same figure)."""
    return {**sums, "physical_gpu_hours": sums["gpu_hours"]}


def _group_of(piece: Interval, key: str, names: dict[str, dict[int, str]]) -> str:
    """The report group of an open-segment piece, as the ledger rows' grouping names it."""
    if key == "day":
        return str(timezone.localtime(piece.start).date())
    if key == "flavor":
        return piece.flavor_name
    if key == "user":
        return names["user"].get(piece.user_id, "")
    if key == "team":
        return names["team"].get(piece.team_id, "")
    if key == "kind":
        return ref_prefix(piece.ref)
    return piece.ref


def _usernames(user_ids: set[int | None]) -> dict[int, str]:
    return dict(get_user_model().objects.filter(pk__in=[u for u in user_ids if u]).values_list("pk", "username"))
