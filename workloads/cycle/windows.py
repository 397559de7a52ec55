"""Reserved windows in the reconcile cycle (docs/reservations.md "Inside the window"), once for all clusters.

A window's units are its holder's from its start: admission admits the holder's work into them on top of
its quota (:class:`quotas.facts.Windows`) and placement puts that work on the window's cluster and keeps
other work off them (:mod:`workloads.cycle.placement`) — but what already sits there must leave, and what
was admitted into a window goes back to the quota when it ends. Each cycle, after the queue's step:

1. :func:`clear` — per cluster and flavor, the units windows need free there now: all of a window's
   units from ``start − lead`` (``SLIPWAY_RESERVATION_LEAD_MINUTES``) until it starts, so that the holder's
   queued work starts at ``start``; once it runs, the units of the holder's work admitted into it whose pods
   have not started (the holder submitted: the units it lent are taken back). Where the cluster's free
   units (its nodes as last recorded) fall short, other work on them gets the preemption notice (the
   checkpoint contract: notice, grace, requeue at its old place) — the work lent the window's idle units
   first, then the least money lost first (:func:`quotas.reclaim.work_lost`), until the shortfall is met:
   whatever sits there (work placed before the booking, work that outran its limit, work that waited on
   the cluster and started on the window's idle units) but work in a window, a holder's own quota work when
   the units are for its own open windows alone (a team's window elsewhere on the cluster shields none of its
   work from another team's; on its targeted window it is cleared as any team's), and endpoints' replicas, which are never placed there. A holder's own work lent its
   open window's idle units before the start is using the team's reserved units early: its units count as
   cleared for that window (it moves into the window when it opens), and of the lent work it is taken back
   last, only when another window needs the units. On a targeted window (docs/reservations.md "Open or
   targeted") the holder's other work is lent work as any team's. Work already stopping counts as gone, so a cycle never takes more for the same need.
2. :func:`close` — holds of windows that ended (or were cancelled) leave them: the holder's work goes back
   to its quota, its units above its nominal quota becoming borrowed (preemptible under the cohort's reclaim
   rules), and lent work is no longer lent.
3. :func:`bill` — each window under way is billed up to now (docs/reservations.md "Money"): of its units, those
   the holder's own work ran on (billed to that work, as any work: not charged twice), those lent to other
   teams' work (billed to it: credited to the holder) and the rest, idle, which the holder is charged at the
   window's price as a ledger row of the reservation's own ref, all of it idle cost — so the Usage page and
   showback show it as idle waste in money. The window keeps the unit-hours of each.

The units counted are a cluster's free units of the flavor, not node blocks: a window booked for whole
nodes and freed unit by unit may need one cycle more while the last worker of a gang stops.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import F, Q, Sum

import fleet.services as fleet
from billing import reserved
from billing.ledger import Interval, interval_unit_hours, record_intervals
from billing.models import QuotaHold, ReservedWindow
from cluster.capacity import serves
from core.formatting import format_when
from quotas.facts import units_in_use
from quotas.models import TeamQuota
from quotas.reclaim import Claim, work_lost
from workloads.cycle.preemption import candidate_of, held_workloads, preempt, stopping_refs
from workloads.registry import Bursts, kind_of

logger = logging.getLogger(__name__)


def clear(now: datetime) -> list[str]:
    """Step 1: notice the work on units windows need now; returns the refs preempted."""
    windows = list(ReservedWindow.objects.filter(start__lte=now + reserved.lead(), end__gt=now, confirmed=True)
                   .select_related("cluster", "flavor", "team").order_by("start", "id"))
    if not windows:
        return []
    _adopt([w for w in windows if w.start <= now], now)
    pending = dict(QuotaHold.objects.held().filter(window__in=windows, lent=False, started_at__isnull=True)
                   .values("window_id").annotate(total=Sum("units")).order_by().values_list("window_id", "total"))
    # The holder's own work lent its open window's idle units before the start already runs on them: its units need
    # no clearing (it moves into the window when it starts, :func:`_adopt`). A targeted window's are cleared as any
    # lent work's: only work that names its booking goes in (docs/reservations.md "Open or targeted").
    early = dict(QuotaHold.objects.held().filter(window__in=windows, lent=True, open_units__gt=0,
                                                 team_id=F("window__team_id"), window__targeted=False)
                 .values("window_id").annotate(total=Sum("open_units")).order_by().values_list("window_id", "total"))
    preempted: list[str] = []
    for key in sorted({(w.cluster_id, w.flavor_id) for w in windows}):
        mine = [w for w in windows if (w.cluster_id, w.flavor_id) == key]
        needs = {w.pk: max(0, w.units - (early.get(w.pk) or 0)) if w.start > now else (pending.get(w.pk) or 0)
                 for w in mine}
        if sum(needs.values()):
            preempted += _clear_on(mine, [w for w in mine if needs[w.pk]], sum(needs.values()), now)
    return preempted


def _adopt(opened: list[ReservedWindow], now: datetime) -> int:
    """The holder's own work lent its open window's idle units before the start moves into the window once it opens
    (what fits of the window's free units, :func:`billing.reserved.rooms`, oldest first): it was using the team's
    reserved units early, and is the team's window work from now on — off its quota, billed as the holder's use —
    rather than taken back by its own window. Not into a targeted window, which takes only work that names its
    booking (that work waits for it in the queue). Returns how many moved."""
    early = list(QuotaHold.objects.held().filter(window__in=opened, lent=True, team_id=F("window__team_id"),
                                                 window__targeted=False)
                 .order_by("created_at", "pk"))
    if not early:
        return 0
    free = {room.window_id: room.free for found in reserved.rooms(list({h.team_id for h in early}), now,
                                                                    placeable=False).values() for room in found}
    moved = 0
    for hold in early:
        # Off the quota, so borrowing nothing from the cohort (close() counts what it borrows when the window ends).
        if hold.units <= free.get(hold.window_id, 0) and QuotaHold.objects.filter(
                pk=hold.pk, window_id=hold.window_id, lent=True).update(lent=False, borrowed_units=0):
            free[hold.window_id] -= hold.units
            moved += 1
    return moved


def _clear_on(windows: list[ReservedWindow], needing: list[ReservedWindow], need: int, now: datetime) -> list[str]:
    """Free ``need`` units of the windows' cluster and flavor (all the same) by preempting other work there, for
    the windows ``needing`` them."""
    first = needing[0]
    cluster, flavor = first.cluster, first.flavor
    spec = flavor.to_spec()
    # Free: the nodes' units less what runs there by the holds (not the nodes' own count, which a cycle
    # records before the work it requeues is gone).
    running = QuotaHold.objects.held().filter(cluster=cluster, flavor=flavor, spot=False, open_units__gt=0)
    free = (sum(n.allocatable for n in fleet.recorded_nodes(cluster) if serves(n, spec, False))
            - (running.aggregate(total=Sum("open_units"))["total"] or 0))
    ids = [w.pk for w in windows]
    holders = {w.team_id for w in needing}
    # The team whose own quota work is spared: the one holder when every window needing the units is its own and
    # open (a targeted window is for the work that names it: the holder's other work is cleared as any team's).
    spared = next(iter(holders)) if len(holders) == 1 and not any(w.targeted for w in needing) else None
    held = list(running.exclude(Q(window_id__in=ids, lent=False)).select_related("window", "team"))
    stopping = stopping_refs({h.team_id for h in held})
    shortfall = need - free - sum(h.units for h in held if h.ref in stopping)
    if shortfall <= 0:
        return []
    # Whatever sits there but work in a window, and but a team's own work on its quota when the units are for its
    # own open windows alone (it would be preempted to make room for its own work naming none): a team's quota work
    # is cleared for another team's window, or its own targeted one, like any (a window elsewhere shields none). An endpoint's replicas
    # are never placed on reserved units (admission and placement keep them off), and its minimum is not preempted.
    workloads = held_workloads([h for h in held if h.ref not in stopping])
    pool = [h for h in held if h.ref not in stopping and not (h.window_id is not None and not h.lent)
            and not (not h.lent and h.team_id == spared)
            and h.ref in workloads and not isinstance(kind_of(workloads[h.ref]), Bursts)]
    if not pool:
        return []
    slugs = {h.team_id: h.team.slug for h in pool}
    candidates = {h.ref: candidate_of(h, workloads.get(h.ref), slugs, stopping, {}, now) for h in pool}
    lost = work_lost(list(candidates.values()), now)
    # Lent work first — a holder's own work lent its own open window's units last of it (its units count for that
    # window: taken back only for another window) — then other teams' quota work before a holder's, the least work
    # lost first.
    order = sorted(pool, key=lambda h: (not h.lent, h.lent and h.team_id == h.window.team_id and not h.window.targeted,
                                        h.team_id in holders, lost[h.ref], h.ref))
    claim = Claim(first.team.slug, first.ref, need, 0, first.start)
    words = f"on {cluster.name} from {format_when(first.start)}"
    preempted = []
    for hold in order:
        if shortfall <= 0:
            break
        if preempt(candidates[hold.ref], claim, first.team_id, now, reserved=words):
            preempted.append(hold.ref)
            shortfall -= hold.units
    if preempted:
        logger.info("reserved window %s on %s: preempted %s", first.ref, cluster.name, preempted)
    return preempted


def close(now: datetime) -> int:
    """Step 2: the holds of windows over (or gone) leave them; returns how many did."""
    ended = QuotaHold.objects.held().filter(Q(window__end__lte=now) | Q(window__isnull=True, lent=True))
    moved = 0
    for hold in ended.filter(lent=False).select_related("team").order_by("created_at"):
        # Back on the quota: what the team holds beyond its nominal quota is borrowed from now on.
        limit = TeamQuota.objects.filter(team=hold.team, flavor_id=hold.flavor_id).values_list("limit", flat=True).first()
        on_quota = units_in_use(hold.team, hold.flavor_id).get(hold.flavor_id, 0)
        borrowed = min(hold.units, max(0, on_quota + hold.units - (limit or 0)))
        moved += QuotaHold.objects.filter(pk=hold.pk, window_id=hold.window_id, lent=False).update(
            window=None, borrowed_units=F("borrowed_units") + borrowed)
    moved += ended.filter(lent=True).update(window=None, lent=False)
    return moved


def bill(now: datetime) -> int:
    """Step 3: bill every window under way up to ``now``; returns how many were billed.

    What ran on a window is sampled each cycle (the holds' running units now, for the time since the window
    was last billed), as the open segments of work are. A conditional update on the window's ``billed_until``
    makes a replayed or racing cycle bill nothing twice; the ledger's rows only move forward besides. It is
    conditional on the ``end`` read too: a cancel committed meanwhile ends the window earlier, and billing up to the
    end read would bill past the cancel (and leave it billed past its end, so its "ended" notice never went). That
    cycle bills nothing of the window; the next one reads the new end and bills up to it.
    """
    windows = list(ReservedWindow.objects.filter(start__lt=now, confirmed=True)
                   .filter(Q(billed_until__isnull=True) | Q(billed_until__lt=F("end")))
                   .select_related("flavor"))
    billed = 0
    for window in windows:
        since, until = window.billed_until or window.start, min(window.end, now)
        if until <= since:
            continue
        on = QuotaHold.objects.held().filter(window=window, open_units__gt=0)
        used = on.filter(lent=False).aggregate(total=Sum("open_units"))["total"] or 0
        lent = min(on.filter(lent=True).aggregate(total=Sum("open_units"))["total"] or 0, max(0, window.units - used))
        used = min(used, window.units)
        idle = window.units - used - lent
        with transaction.atomic():
            moved = ReservedWindow.objects.filter(pk=window.pk, billed_until=window.billed_until, end=window.end).update(
                billed_until=until,
                used_unit_hours=F("used_unit_hours") + interval_unit_hours(used, since, until),
                lent_unit_hours=F("lent_unit_hours") + interval_unit_hours(lent, since, until),
                idle_unit_hours=F("idle_unit_hours") + interval_unit_hours(idle, since, until))
            if not moved:
                continue
            if idle:
                flavor = window.flavor
                record_intervals(Interval(window.team_id, window.ref, flavor.pk, flavor.name, window.price_per_unit_hour,
                                          flavor.gpu_fraction, None, since, until, idle, False, idle=True).hourly())
        billed += 1
    return billed

