"""Billing of workloads as open segments (see :mod:`workloads.models` for the fields; the ledger's
terms — open segment, GPU-hour, unit-hour, idle — are defined in docs/glossary.md "ledger").

A workload that keeps running with the same GPU units is not written at all: its cost grows
in the open segment (``open_units`` since ``billed_until``), which every reader adds up to
now. :func:`plan_billing` (pure) decides when an observation closes the segment — the
units changed, the workload ended, or an hour boundary passed (the ledger keeps one row per
workload and hour) — and what ledger intervals that writes. :func:`record` writes the closed
intervals of many workloads in one ledger statement.

Replays never double-count: closing is a conditional update on the old ``billed_until``
(the caller's), and the ledger upsert ignores an interval its hour row already covers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache

from django.db import connection
from django.db.models import F

from core.rawsql import sql_datetime, sql_decimal
from quotas import ledger
from quotas.constants import ZERO
from quotas.facts import borrowed_units
from quotas.ledger import Interval, cost_ahead, month_end, usage_hour
from quotas.models import ClusterPrice, GpuFlavor, unit_price
from workloads.identity import WorkloadId
from workloads.registry import kinds

#: The columns billing moves. A plan that changes only these is "steady": no state moved.
BILLING_FIELDS = frozenset({"billed_until", "open_units", "billed_cost", "charged_price"})


@dataclass
class BillingPlan:
    """How one observation moves a workload's billing position: columns, ledger pieces, their cost."""

    changes: dict = field(default_factory=dict)
    intervals: list[Interval] = field(default_factory=list)
    cost: Decimal = ZERO


def plan_billing(workload, running_units: int, first_started_at: datetime | None, ended_at: datetime | None,
                 now: datetime, idle: bool = False) -> BillingPlan:
    """The billing move for ``workload`` seen with ``running_units`` at ``now`` (nothing is written).

    ``first_started_at`` is when its first pod started: on the first sighting, what runs now
    has run since then. ``ended_at`` is set when the workload is final (or ended by a user):
    the segment closes there and nothing stays open. ``idle`` is whether its GPUs measure idle
    now (:mod:`workloads.idle`): the open segment is idle time or not as a whole, so a flip
    closes it here and opens the next with the new flag — idle time is then exact to one
    reconcile interval, and a workload whose GPUs stay as they were still writes nothing.
    """
    plan = BillingPlan()
    end = min(ended_at or now, now)
    target = 0 if ended_at is not None else running_units
    idle = idle and target > 0
    start, units, open_idle = workload.billed_until, workload.open_units, workload.open_idle
    # The open segment's charged rate, as recorded when it opened (rows billed before the rate
    # was recorded: today's); a segment that opens here takes the price table's of this moment.
    price = workload.charged_price if workload.charged_price is not None else workload.table_price()
    if start is None or units == 0:
        # 1. Nothing open. Open a segment when units run: on the first sighting from the pod's
        #    start (it ran before we looked), later from this observation.
        if running_units == 0:
            return plan
        start = min(first_started_at or now, now) if workload.billed_until is None else now
        units, open_idle = running_units, idle
        price = workload.table_price()
        plan.changes.update(billed_until=start, open_units=units, charged_price=price)
    if ended_at is not None or target != units or idle != open_idle:
        # 2. Units changed, it ended, or its GPUs turned idle/busy: close the segment here and
        #    open the next (if any) at the price of this moment.
        close_at = max(end, start)
        plan.intervals = _pieces(workload, price, start, close_at, units, open_idle)
        plan.changes.update(billed_until=close_at, open_units=target)
        if target:
            plan.changes["charged_price"] = workload.table_price()
        else:
            plan.changes["charged_price"] = price  # what it showed last: the rate it was charged
    elif start < usage_hour(now):
        # 3. Same units, a new hour: close the full hours, keep the current one open — a new
        #    segment, at the price of this moment (a staff price change reaches running work here).
        boundary = usage_hour(now)
        plan.intervals = _pieces(workload, price, start, boundary, units, open_idle)
        plan.changes.update(billed_until=boundary, open_units=units, charged_price=workload.table_price())
    if idle != workload.open_idle:
        plan.changes["open_idle"] = idle  # not a billing-only column: the plan is written alone
    plan.cost = sum((piece.charge()[0] for piece in plan.intervals), ZERO)
    if plan.cost:
        plan.changes["billed_cost"] = F("billed_cost") + plan.cost
    return plan


def _pieces(workload, price: Decimal, start: datetime, end: datetime, units: int, idle: bool) -> list[Interval]:
    if end <= start or units <= 0:
        return []
    flavor = workload.flavor
    return Interval(workload.team_id, workload.ref, flavor.pk, flavor.name, price,
                    flavor.gpu_fraction, workload.created_by_id, start, end, units, workload.spot, idle).hourly()


def record(billed: list[tuple[object, BillingPlan]]) -> list[object]:
    """Write the closed intervals of ``(workload, plan)`` pairs in one ledger statement.

    Each interval's borrowed part follows the workload's quota hold's ``borrowed_units``
    at write time (:meth:`Interval.borrowed_gpu_hours`), read for all of them in one query
    (an indexed lookup by ref; none when nothing is written): every caller writes before it
    releases the hold, final workloads included. A resize between two writes counts
    from the last write, capped at the interval's units.
    Returns the workloads some of whose intervals the ledger held already (a replay or an
    overlapping writer): the caller resets their ``billed_cost`` to the ledger's total.
    """
    intervals = [piece for _w, plan in billed for piece in plan.intervals]
    borrowed = borrowed_units(list({piece.ref for piece in intervals}))
    if borrowed:
        intervals = [replace(piece, borrowed_units=borrowed.get(piece.ref, 0)) for piece in intervals]
    recorded = ledger.record_intervals(intervals)
    return [workload for workload, plan in billed
            if any((piece.ref, usage_hour(piece.start)) not in recorded for piece in plan.intervals)]


def bill_past(workload, first_started_at: datetime, observations: list[tuple[datetime, int, bool]],
              ended_at: datetime) -> Decimal:
    """Bill a workload's past as the reconcile cycle would have: each ``(at, units, idle)`` observation
    in time order through :func:`plan_billing` — the live rule, prices included (its charged rate is
    the price table's when each segment opened) — and its end at ``ended_at``; written to the
    ledger and to its billing columns. For work recorded after the fact (the demo's history:
    ``jobs.demo.seed_demo_history``). Returns the cost billed.
    """
    total = ZERO
    for at, units, idle, ended in [*((at, units, idle, None) for at, units, idle in observations),
                                   (ended_at, 0, False, ended_at)]:
        plan = plan_billing(workload, units, first_started_at, ended, at, idle)
        record([(workload, plan)])  # one at a time: two plans may write the same hour's row
        total += plan.cost
        for name, value in plan.changes.items():
            if name != "billed_cost":
                setattr(workload, name, value)
    workload.billed_cost += total
    type(workload).objects.filter(pk=workload.pk).update(
        billed_until=workload.billed_until, open_units=workload.open_units, open_idle=workload.open_idle,
        charged_price=workload.charged_price, billed_cost=workload.billed_cost)
    return total


def _priced(q) -> tuple[str, str]:
    """The join of a workload ``w`` to its flavor ``f`` and its cluster's price of it, and the two
    price columns (on-demand, spot) that result: its charged rate once billing began
    (``w.charged_price``, :meth:`workloads.models.Workload.unit_price`), else the cluster's where it
    prices the flavor, else the flavor's — :meth:`quotas.models.GpuFlavor.price`'s rule, in SQL."""
    join = (f"JOIN {q(GpuFlavor._meta.db_table)} f ON f.id = w.flavor_id"
            f" LEFT JOIN {q(ClusterPrice._meta.db_table)} cp ON cp.flavor_id = w.flavor_id AND cp.cluster_id = w.cluster_id")
    columns = ("COALESCE(w.charged_price, cp.price_per_hour, f.price_per_hour),"
               " COALESCE(w.charged_price, cp.spot_price_per_hour, f.spot_price_per_hour)")
    return join, columns


@lru_cache(maxsize=8)
def _open_segments_sql(vendor: str, kind_tables: tuple[tuple[str, str], ...], teams: int) -> str:
    """One SELECT per kind, UNION ALL: the open segments of ``teams`` team ids up to a ``now``.

    Plain SQL, built once per vendor and number of teams: every admission of a budgeted team
    reads the open segments, and compiling this union with the ORM cost more CPU than the
    database spent answering it (bench/profile_api.py). Values travel as parameters; only
    quoted model table names are formatted in.
    """
    q = connection.ops.quote_name
    join, prices = _priced(q)
    in_teams = ", ".join(["%s"] * teams)
    return " UNION ALL ".join(
        f"SELECT %s, w.id, w.team_id, w.created_by_id, w.billed_until, w.open_units, w.spot, w.open_idle,"  # noqa: S608
        f" f.id, f.name, {prices}, f.gpu_fraction"
        f" FROM {q(table)} w {join}"
        f" WHERE w.team_id IN ({in_teams}) AND w.open_units > 0 AND w.billed_until < %s"
        for _prefix, table in kind_tables)


def _open_rows(build_sql, team_ids: list[int], now: datetime) -> list[tuple]:
    """Run ``build_sql``'s statement (one SELECT per kind, UNION ALL) over ``team_ids``' open segments up to ``now``.

    Each kind's SELECT takes its prefix, the team ids and ``now`` as parameters, in that order.
    """
    kind_tables = tuple((kind.prefix, kind.model._meta.db_table) for kind in kinds())
    if not kind_tables or not team_ids:
        return []
    sql = build_sql(connection.vendor, kind_tables, len(team_ids))
    at = connection.ops.adapt_datetimefield_value(now)
    params = [value for prefix, _table in kind_tables for value in (prefix, *team_ids, at)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def open_segments(team_ids: list[int], now: datetime) -> list[Interval]:
    """The open segments of ``team_ids``' workloads of every kind, each from its start to ``now`` (one statement).

    What the usage reports read, which split cost by workload and user; spend and budgets read
    the summed :func:`open_groups`.
    """
    segments = []
    for prefix, pk, team_id, user_id, since, units, spot, idle, flavor_id, name, price, spot_price, fraction in (
            _open_rows(_open_segments_sql, team_ids, now)):
        segments.append(Interval(team_id, WorkloadId(prefix, pk).ref, flavor_id, name,
                                 unit_price(sql_decimal(price), sql_decimal(spot_price), bool(spot)),
                                 sql_decimal(fraction), user_id, sql_datetime(since), now, units, bool(spot),
                                 bool(idle)))
    return segments


@lru_cache(maxsize=8)
def _open_groups_sql(vendor: str, kind_tables: tuple[tuple[str, str], ...], teams: int) -> str:
    """One SELECT per kind, UNION ALL: the open segments of ``teams`` team ids up to a ``now``, summed.

    Segments alike (team, flavor and its prices, spot, start, units) are one row with their
    count: a segment's cost is rounded to the ledger's precision on its own, so only segments
    with the same start and units may be priced together. At steady state the runs open for
    more than an hour all start at the hour's start, so 10,000 of them are a handful of rows.
    """
    q = connection.ops.quote_name
    join, prices = _priced(q)
    in_teams = ", ".join(["%s"] * teams)
    return " UNION ALL ".join(
        f"SELECT %s, w.team_id, f.id, {prices}, w.spot, w.billed_until,"  # noqa: S608
        f" w.open_units, COUNT(*)"
        f" FROM {q(table)} w {join}"
        f" WHERE w.team_id IN ({in_teams}) AND w.open_units > 0 AND w.billed_until < %s"
        f" GROUP BY w.team_id, f.id, {prices}, w.spot, w.billed_until, w.open_units"
        for _prefix, table in kind_tables)


def open_groups(team_ids: list[int], now: datetime) -> list[ledger.OpenGroup]:
    """The open segments of ``team_ids``' workloads of every kind up to ``now``, summed (one statement).

    What budgets and spend read (:func:`quotas.ledger.open_spend`); reports, which need each
    segment's workload and user, read :func:`open_segments`.
    """
    return [ledger.OpenGroup(team_id, prefix, flavor_id, unit_price(sql_decimal(price), sql_decimal(spot_price), bool(spot)),
                             sql_datetime(since), units, count)
            for prefix, team_id, flavor_id, price, spot_price, spot, since, units, count in
            _open_rows(_open_groups_sql, team_ids, now)]


@lru_cache(maxsize=8)
def _commitments_sql(vendor: str, kind_columns: tuple[tuple[str, tuple[str, ...], str | None, int], ...],
                     teams: int) -> str:
    """One SELECT per committing kind, UNION ALL: admitted units per team, price, start and limit.

    Work that ends alike is summed (the price rule is linear in units): work without a limit
    (a kind without a limit column, or a run whose limit is empty) gives one row per team,
    flavor and spot, however many workloads it holds.
    Plain SQL built once, as :func:`_open_segments_sql` and for the same reason: every
    admission against an estimated cost reads it. Only quoted table and column names are
    formatted in (the kinds' own declarations); values travel as parameters.
    """
    q = connection.ops.quote_name
    join, prices = _priced(q)
    in_teams = ", ".join(["%s"] * teams)
    selects = []
    for table, units_columns, limit, states in kind_columns:
        units = " * ".join(f"w.{q(column)}" for column in units_columns)
        # Without a limit the start does not matter: NULL, so it does not split the sums.
        started, minutes = ((f"CASE WHEN w.{q(limit)} IS NULL THEN NULL ELSE w.{q('started_at')} END",
                             f"w.{q(limit)}") if limit else ("NULL", "NULL"))
        ends = f", {started}, {minutes}" if limit else ""
        in_states = ", ".join(["%s"] * states)
        selects.append(
            f"SELECT w.team_id, w.spot, {started}, {minutes}, SUM({units}),"  # noqa: S608
            f" f.id, {prices}"
            f" FROM {q(table)} w {join}"
            f" WHERE w.team_id IN ({in_teams}) AND w.state IN ({in_states}) AND {units} > 0"
            f" GROUP BY w.team_id, w.spot{ends}, f.id, {prices}")
    return " UNION ALL ".join(selects)


def commitments(team_ids: list[int], now: datetime) -> dict[int, Decimal]:
    """Per team, the estimated cost its admitted work will still run up this month (one statement).

    Each workload commits its units at its price (:func:`quotas.ledger.cost_ahead`) from
    ``now`` until its runtime limit runs out — counted from its start, or from now if it has
    not started — or until the month's end, whichever comes first; work without a limit (a
    run without one, an endpoint's minimum) until the month's end. A kind's columns say which
    (:attr:`WorkloadKind.committed_units`, :attr:`WorkloadKind.runtime_limit`). It is what
    :meth:`quotas.decide.ResourceRequest.committed_cost` counted when the work was admitted.
    """
    committing = [kind for kind in kinds() if kind.committed_units]
    if not committing or not team_ids:
        return {}
    kind_columns = tuple((kind.model._meta.db_table, kind.committed_units, kind.runtime_limit,
                          len(kind.model.HOLDING_STATES)) for kind in committing)
    sql = _commitments_sql(connection.vendor, kind_columns, len(team_ids))
    params = [value for kind in committing for value in (*team_ids, *kind.model.HOLDING_STATES)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    until = month_end(now)
    totals: dict[int, Decimal] = {}
    for team_id, spot, started_at, minutes, units, _flavor_id, price, spot_price in rows:
        end = until
        if minutes is not None:
            end = min((sql_datetime(started_at) if started_at else now) + timedelta(minutes=minutes), until)
        price = unit_price(sql_decimal(price), sql_decimal(spot_price), bool(spot))
        totals[team_id] = totals.get(team_id, ZERO) + cost_ahead(price, units, now, end)
    return totals
