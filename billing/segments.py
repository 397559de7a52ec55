"""Billing of workloads as open segments, kept on their quota holds (:class:`billing.models.QuotaHold`
for the fields; the ledger's terms — open segment, GPU-hour, unit-hour, idle — are defined in
docs/glossary.md "ledger").

A workload that keeps running with the same GPU units is not written at all: its cost grows
in the open segment (``open_units`` since ``billed_until`` on the hold it holds), which every
reader adds up to now. :func:`plan_billing` (pure) decides when an observation closes the
segment — the units changed, the workload ended, or an hour boundary passed (the ledger keeps
one row per workload and hour) — and what ledger intervals that writes. :func:`write` moves the
hold's segment and adds the cost to the workload's ``billed_cost`` (the ledger's total for it, a
column its lists sort by); :func:`record` writes the closed intervals of many workloads in one
ledger statement.

Replays never double-count: moving the segment is a conditional update on the hold's old
``billed_until`` (the caller's), and the ledger upsert ignores an interval its hour row already covers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal

from django.db.models import CharField, Exists, F, IntegerField, Subquery, Value
from django.db.models.functions import Coalesce

from billing import ledger
from billing.ledger import Interval, usage_hour
from billing.models import QuotaHold, hold_rate
from core.money import ZERO

#: The hold's columns that an hour's roll-over moves. A plan that moves only these (and no column of
#: the workload's) is "steady": written in a batch (:func:`workloads.cycle.reconcile._apply_steady`).
STEADY_FIELDS = frozenset({"billed_until", "open_units", "charged_price"})


@dataclass
class BillingPlan:
    """How one observation moves a workload's billing position: the hold's columns, ledger pieces, their cost."""

    hold: QuotaHold | None = None
    changes: dict = field(default_factory=dict)
    intervals: list[Interval] = field(default_factory=list)
    cost: Decimal = ZERO


def held(workload) -> QuotaHold | None:
    """The quota hold ``workload`` holds now, whose open segment billing moves (None: it holds none)."""
    segment = workload.segment
    return segment if segment is not None and segment.released_at is None else None


def plan_billing(workload, running_units: int, first_started_at: datetime | None, ended_at: datetime | None,
                 now: datetime, idle: bool = False, hold: QuotaHold | None = None,
                 attempt_started_at: datetime | None = None) -> BillingPlan:
    """The billing move for ``workload`` seen with ``running_units`` at ``now`` (nothing is written).

    ``hold``: the hold whose segment moves (default: the one it holds, :func:`held`); without one
    nothing is billed — units run on a hold, and every path closes the segment before it releases it.
    ``attempt_started_at``: when this attempt's pods started (the cluster says), recorded on the hold
    when its first segment opens (its runtime limit's commitment counts from there; else from then).
    ``first_started_at`` is when its first pod started: on the first sighting, what runs now
    has run since then. ``ended_at`` is set when the workload is final (or ended by a user):
    the segment closes there and nothing stays open. ``idle`` is whether its GPUs measure idle
    now (:mod:`workloads.idle`): the open segment is idle time or not as a whole, so a flip
    closes it here and opens the next with the new flag — idle time is then exact to one
    reconcile interval, and a workload whose GPUs stay as they were still writes nothing.
    """
    hold = hold if hold is not None else held(workload)
    plan = BillingPlan(hold)
    if hold is None:
        return plan
    end = min(ended_at or now, now)
    target = 0 if ended_at is not None else running_units
    idle = idle and target > 0
    start, units, open_idle = hold.billed_until, hold.open_units, hold.open_idle
    if start is not None and units:
        # The open segment's rate, the hold's (billing.models.hold_rate, the rule spend and budgets
        # priced it by): the charged rate recorded when it opened. The hold is read with its money
        # columns alone (the cycle's HeldSegment): the workload says its flavor, spot and cluster.
        price = hold_rate(hold.charged_price, workload.flavor, workload.spot, workload.cluster_id)
    else:
        # 1. Nothing open. Open a segment when units run: on the hold's first sighting from the
        #    pod's start (it ran before we looked), later from this observation.
        if running_units == 0:
            return plan
        start = min(first_started_at or now, now) if hold.billed_until is None else now
        units, open_idle = running_units, idle
        price = workload.table_price()  # a segment that opens takes the price table's of this moment
        plan.changes.update(billed_until=start, open_units=units, charged_price=price)
        if hold.started_at is None:
            plan.changes["started_at"] = attempt_started_at or start  # its runtime limit counts from there
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
    if idle != hold.open_idle:
        plan.changes["open_idle"] = idle  # not a roll-over column: the plan is written alone
    plan.cost = sum((piece.charge()[0] for piece in plan.intervals), ZERO)
    return plan


def _pieces(workload, price: Decimal, start: datetime, end: datetime, units: int, idle: bool) -> list[Interval]:
    if end <= start or units <= 0:
        return []
    flavor = workload.flavor
    return Interval(workload.team_id, workload.ref, flavor.pk, flavor.name, price,
                    flavor.gpu_fraction, workload.created_by_id, start, end, units, workload.spot, idle).hourly()


def move_segment(plan: BillingPlan) -> bool:
    """Write ``plan``'s move of its hold's segment, conditional on the mark it was planned from.

    False when the mark moved meanwhile (another writer closed the segment first): the caller's
    transaction then writes nothing of the plan. True when there was nothing to move.
    """
    if not plan.changes:
        return True
    hold = plan.hold
    return bool(QuotaHold.objects.filter(pk=hold.pk, billed_until=hold.billed_until).update(**plan.changes))


def cost_change(plan: BillingPlan) -> dict:
    """The workload's column change for ``plan``'s cost: added to ``billed_cost`` (none for no cost)."""
    return {"billed_cost": F("billed_cost") + plan.cost} if plan.cost else {}


def applied(workload, plan: BillingPlan) -> None:
    """Set ``plan``'s move on the loaded hold (after it was written), so the instance reads as the rows do."""
    for name, value in plan.changes.items():
        setattr(plan.hold, name, value)
    if plan.hold is not None:
        workload.segment_is(plan.hold)


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
    ledger, to the hold it held then (a released one, recorded here: the units it held and their
    money) and to its ``billed_cost``. For work recorded after the fact (the demo's history: a kind's
    ``seed_demo_history``). Returns the cost billed.
    """
    units_held = max((units for _at, units, _idle in observations), default=0) or 1
    hold = QuotaHold(team_id=workload.team_id, ref=workload.ref, flavor_id=workload.flavor_id, units=units_held,
                     units_per_node=units_held, spot=workload.spot, user_id=workload.created_by_id,
                     cluster_id=workload.cluster_id, description=workload.name[:200])
    total = ZERO
    for at, units, idle, ended in [*((at, units, idle, None) for at, units, idle in observations),
                                   (ended_at, 0, False, ended_at)]:
        plan = plan_billing(workload, units, first_started_at, ended, at, idle, hold=hold)
        record([(workload, plan)])  # one at a time: two plans may write the same hour's row
        total += plan.cost
        for name, value in plan.changes.items():
            setattr(hold, name, value)
    hold.released_at = ended_at
    hold.save()
    QuotaHold.objects.filter(pk=hold.pk).update(created_at=first_started_at)  # auto_now_add said "now"
    workload.billed_cost += total
    type(workload).objects.filter(pk=workload.pk).update(billed_cost=workload.billed_cost)
    workload.segment_is(hold)
    return total


def borrowed_units(refs: list[str]) -> dict[str, int]:
    """``{ref: borrowed units}`` of the quota holds of ``refs`` that borrow any (one query)."""
    return QuotaHold.objects.held().borrowed_by_ref(refs)


def borrowed_units_of(ref):
    """:func:`borrowed_units` of each row whose ref is the expression ``ref``, as an annotation (a
    correlated subquery on the quota hold's unique ref): lists without a query more."""
    held = QuotaHold.objects.held().filter(ref=ref).values("borrowed_units")[:1]
    return Coalesce(Subquery(held, output_field=IntegerField()), Value(0))


def windows_of(refs: list[str]) -> dict[str, tuple[str | None, bool]]:
    """``{ref: (the ref of the reservation its units are in, or None; whether they are lent)}`` of the quota holds
    of ``refs`` that run on a reserved window's units (one query): in its team's own reservation, or lent another
    team's idle reserved units (preemptible)."""
    if not refs:
        return {}
    return {ref: (None if lent else window, lent) for ref, window, lent in QuotaHold.objects.held().filter(
        ref__in=refs, window__isnull=False).values_list("ref", "window__ref", "lent")}


def window_ref_of(ref):
    """The ref of the reservation each row's quota hold runs in (its team's own; None: none), as an annotation."""
    held = QuotaHold.objects.held().filter(ref=ref, window__isnull=False, lent=False).values("window__ref")[:1]
    return Subquery(held, output_field=CharField())


def lent_of(ref):
    """Whether each row's quota hold runs on another team's reserved idle units (lent: preemptible), as an annotation."""
    return Exists(QuotaHold.objects.held().filter(ref=ref, lent=True))

