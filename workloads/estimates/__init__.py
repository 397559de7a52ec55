"""When will queued work start? One simulation of the queue, pure (no database, no clock).

:func:`simulate` is given what holds units now (:class:`Holding`: each with the instant it is
expected to end, or None when nothing ends it — no runtime limit), the queue in admission order
(:class:`Waiting`: each entry with its expected running time) and the quotas, and steps through
the expected ends. At each step it asks admission's own rule which queued entries are admitted
— :func:`quotas.admission.queue_order` for a team outside any cohort, the cohort's fair-share
tournament :func:`quotas.admission.fair_order` in a cohort, both deciding every fit by
:func:`quotas.decide.decide` — and, in a cohort, what reclaim takes back for a team under its
nominal quota (:func:`quotas.reclaim.choose_victims`: after the cohort's delay, the victims'
units free when their preemption grace ends, and they queue again at their old place). No rule
of admission or reclaim is restated here.

Its answers (:class:`Start`), the honesty rules of issue 34:

* work admitted at ``now`` starts ``now`` (the next admission cycle takes it); work that is not
  never gets ``now``: its start is an end or a reclaim at least one ``cycle`` (the reconcile
  interval) later — an end already overdue is expected at the next cycle, not in the past;
* when no expected end or reclaim frees enough, the start is unknown, and :attr:`Start.unknown`
  names the work that holds the flavor with no known end (what the estimate would need).

How long work runs is :func:`expected_end`'s rule: a typical running time (the same job's median,
or else its runtime limit × the platform's :func:`limit_use`), cut at its runtime limit; once
past the typical time, the limit. Authors set limits with room to spare (the runs that ended
on their own in the demo's and the bench's traces used a median of about two thirds of theirs):
taking every limit as the end put estimates 40 % off at the median (bench/estimates.py), taking
the platform's limit use brought that under 25 %.

Elastic pools (docs/pools.md "What the estimates assume"): a flavor whose nodes a pool adds on demand
comes with its :class:`Growth` — the units free on ready nodes now, units on nodes being provisioned
(each with when it should be ready) and the units the pools may still add, each taking the pool's
provisioning median from the moment it is asked for. Work admitted at ``t`` takes free units first,
then provisioning ones, then new ones: it starts when the last of them is ready, and its
:attr:`Start.grows` names the pool. A unit freed by work that ends stays ready for the work behind it
(scale-down removes a node only after it idled ``unneeded`` minutes, and queued work takes it at that
end). A flavor without a :class:`Growth` is a fixed inventory, estimated as before; so is spot work's
(pools are on-demand nodes: spot work never waits for one, nor frees its units).

What it does not know: work submitted later (a higher priority, or a team with a lower share
in a cohort, goes first), ends earlier than expected, placement on nodes. bench/estimates.py
measures how far that puts the estimate from the real start.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from quotas import fairshare
from quotas.admission import fair_order, queue_order
from quotas.facts import CohortFigures, flavor_quota
from quotas.models import QueuedRequest, TeamQuota
from quotas.reclaim import Candidate, Claim, Rules, choose_victims

#: The most recent runs :func:`limit_use` is taken over, and the fewest it needs (fewer: no figure).
LIMIT_USE_SAMPLE, LIMIT_USE_MIN = 200, 20
#: The quantile of :func:`limit_use` the low end of a start's range takes (one run in ten ends sooner):
#: the range is "starts in 3–30 min", from every run ahead ending that early to every one at its limit.
EARLY_USE_QUANTILE = 0.1


def limit_use(spans: list[tuple[float, float]], quantile: float = 0.5) -> float | None:
    """How much of its runtime limit a run typically uses: the median (or another ``quantile``, the
    nearest rank) of running time ÷ limit over ``spans`` — ``(running seconds, limit seconds)`` of
    runs that ended on their own, the most recent :data:`LIMIT_USE_SAMPLE` — each at most 1; None with
    fewer than :data:`LIMIT_USE_MIN`."""
    ratios = sorted(min(ran / limit, 1.0) for ran, limit in spans if limit > 0)
    if len(ratios) < LIMIT_USE_MIN:
        return None
    if quantile == 0.5:
        return statistics.median(ratios)
    return ratios[min(len(ratios) - 1, max(0, math.ceil(quantile * len(ratios)) - 1))]


def expected_end(start: datetime, now: datetime, limit: timedelta | None,
                 typical: timedelta | None) -> datetime | None:
    """When work started (or starting) at ``start`` should end: after its ``typical`` running time,
    cut at its runtime ``limit``; once past the typical time, at the limit; never before ``now``.
    None when it has neither (nothing is known to end it)."""
    bounds = sorted(start + d for d in (typical, limit) if d is not None)
    if not bounds:
        return None
    return next((end for end in bounds if end >= now), max(bounds[-1], now))


def typical_time(limit: timedelta | None, median: timedelta | None, use: float | None) -> timedelta | None:
    """A run's typical running time: the same job's ``median`` if known, else its ``limit`` × the
    platform's limit ``use`` (:func:`limit_use`), else None (then :func:`expected_end` takes the limit)."""
    if median is not None:
        return median
    return limit * use if limit is not None and use is not None else None


@dataclass(frozen=True)
class Holding:
    """Work that holds units now (admitted: running, or not started yet)."""

    ref: str
    team_id: int
    flavor_id: int
    units: int
    ends_at: datetime | None  #: when it is expected to end; None: nothing ends it (no runtime limit)
    borrowed: int = 0  #: units its cohort lent it (reclaim may take it back)
    priority: int = 0  #: Priority.rank
    admitted_at: datetime | None = None  #: its last start (reclaim's min runtime counts from it)
    #: Its queue entry were it preempted (back at its old place); None: reclaim never takes it here.
    entry: QueuedRequest | None = None
    stopping: bool = False  #: a victim whose pods are stopping: its units go at ``ends_at``
    spot: bool = False  #: on spot nodes: what it frees is no elastic pool's (pools are on-demand nodes)


@dataclass(frozen=True)
class Waiting:
    """A queued entry (an unsaved row will do: its team, flavor, units, priority, created_at and pk)."""

    entry: QueuedRequest
    runs_for: timedelta | None  #: its expected running time once started; None: unknown


@dataclass(frozen=True)
class Sharing:
    """The cohort the queue belongs to: its members' quotas and weights, their remembered borrowing,
    the reclaim rules (None: reclaim ``never``) and the preemption grace a victim holds its units for."""

    figures: CohortFigures  #: its ``usage`` is ignored: the simulation counts the holdings
    remembered: dict[int, float]
    rules: Rules | None
    grace: timedelta


@dataclass(frozen=True)
class Growth:
    """An elastic flavor's nodes as the simulation sees them (module docstring); fed by
    :mod:`workloads.estimates.forecast` from the pools' status and history, so this module stays pure."""

    free: int  #: units free on ready nodes now
    room: int  #: units the flavor's pools may still add (headroom)
    takes: timedelta  #: how long a new node takes from when it is asked for (the pool's median, or its tail)
    coming: tuple[tuple[datetime, int], ...] = ()  #: units on nodes being provisioned, none claimed: (ready at, units)
    pool: str = ""  #: the pool that grows, in words ("h100-80gb on east")


@dataclass(frozen=True)
class Start:
    """When a queued entry is expected to start: admitted, and its nodes ready."""

    at: datetime | None  #: None: unknown
    after: tuple[str, ...] = ()  #: refs whose expected ends (or reclaim) it waits for, in order
    unknown: tuple[str, ...] = ()  #: with ``at`` None: refs holding its flavor that have no known end
    #: The pool whose new nodes it waits for after its admission ("" when ready nodes hold it), and how many
    #: of its units are on them.
    grows: str = ""
    new_units: int = 0


class _Nodes:
    """The units of one elastic flavor during a simulation (:class:`Growth`): free ready ones, nodes coming
    (ready-at and units, soonest first), and room to grow."""

    def __init__(self, growth: Growth):
        self.growth = growth
        self.free, self.room = growth.free, growth.room
        self.coming = sorted(growth.coming)

    def take(self, units: int, t: datetime) -> tuple[datetime, int]:
        """Units for work admitted at ``t``: when the last of them is ready, and how many are not ready now."""
        ready, waiting = t, 0
        used = min(self.free, units)
        self.free -= used
        units -= used
        while units > 0 and self.coming:
            at, offered = self.coming[0]
            used = min(offered, units)
            units -= used
            if at > t:
                ready, waiting = max(ready, at), waiting + used
            if used == offered:
                self.coming.pop(0)
            else:
                self.coming[0] = (at, offered - used)
        if units > 0:
            # New nodes, asked for now; beyond the pools' room too (other teams' work the simulation does
            # not see holds the rest): no later than a new node either.
            self.room = max(self.room - units, 0)
            ready, waiting = max(ready, t + self.growth.takes), waiting + units
        return ready, waiting


@dataclass
class _State:
    """The simulation's moving parts."""

    usage: dict[tuple[int, int], int]
    holding: dict[str, Holding]
    queue: list[Waiting]
    ends: list[tuple[datetime, int, Holding]]  # (expected end, tie, holding): a heap
    freed: dict[int, list[str]]  # flavor id → refs that ended or were taken back so far, in order
    nodes: dict[int, _Nodes] = dataclasses.field(default_factory=dict)  # flavor id → its elastic pools' units
    tie: itertools.count = dataclasses.field(default_factory=itertools.count)

    def hold(self, holding: Holding) -> None:
        self.holding[self.key(holding)] = holding
        key = (holding.team_id, holding.flavor_id)
        self.usage[key] = self.usage.get(key, 0) + holding.units
        if holding.ends_at is not None:
            heapq.heappush(self.ends, (holding.ends_at, next(self.tie), holding))

    def key(self, holding: Holding) -> str:
        return f"{holding.ref} stopping" if holding.stopping else holding.ref

    def release(self, holding: Holding, ends: bool = True) -> None:
        """``holding`` ends (nothing when it no longer holds: taken back, or held again since). ``ends``
        False: it goes on holding its units on its nodes as a stopping victim."""
        if self.holding.get(self.key(holding)) is not holding:
            return
        del self.holding[self.key(holding)]
        self.usage[(holding.team_id, holding.flavor_id)] -= holding.units
        if not holding.stopping:
            self.freed.setdefault(holding.flavor_id, []).append(holding.ref)
        if ends and not holding.spot and holding.flavor_id in self.nodes:
            self.nodes[holding.flavor_id].free += holding.units


def simulate(now: datetime, holding: list[Holding], waiting: list[Waiting], quotas: dict[tuple[int, int], TeamQuota],
             cycle: timedelta, sharing: Sharing | None = None, wanted: set[str] | None = None,
             growth: dict[int, Growth] | None = None) -> dict[str, Start]:
    """``{ref: Start}`` for the queued entries of ``waiting`` (in queue order; module docstring).

    ``quotas`` are ``{(team id, flavor id): TeamQuota}`` of the teams queued (in a cohort: of its
    members). ``wanted``: stop once these refs have their answer (the rest are left out). ``growth``:
    ``{flavor id: Growth}`` of the flavors elastic pools offer (the others: fixed inventories).
    """
    state = _State({}, {}, list(waiting), [], {}, {flavor: _Nodes(g) for flavor, g in (growth or {}).items()})
    for held in holding:
        state.hold(held)
    starts: dict[str, Start] = {}
    wakes: list[datetime] = []  # reclaim's clocks: a claim's delay ends, a victim's grace ends
    t = now
    while state.queue:
        # 1. Admission's own rule at t.
        for item, borrowed in _admitted(state, quotas, sharing):
            entry = item.entry
            start, grows, new_units = t, "", 0
            if not entry.spot and (nodes := state.nodes.get(entry.flavor_id)) is not None:
                start, new_units = nodes.take(entry.units, t)
                grows = nodes.growth.pool if new_units else ""
            starts[entry.ref] = Start(start, tuple(state.freed.get(entry.flavor_id, ())), grows=grows,
                                      new_units=new_units)
            state.queue.remove(item)
            state.hold(Holding(entry.ref, entry.team_id, entry.flavor_id, entry.units,
                               start + item.runs_for if item.runs_for is not None else None, borrowed,
                               entry.priority, t, entry, spot=entry.spot))
        if not state.queue or (wanted is not None and wanted <= starts.keys()):
            break
        # 2. Reclaim: a team under its nominal quota takes back what others borrowed.
        if sharing is not None and sharing.rules is not None:
            wakes += _reclaim(state, sharing, t)
        # 3. The next moment anything changes: never t itself, never before the next cycle.
        #    (Ends before t were let go at t, but for an overdue one now: expected at the next cycle.)
        moments = [*(end for end, _tie, _held in state.ends[:1]), *(wake for wake in wakes if wake > t)]
        if not moments:
            break
        t = max(min(moments), now + cycle)
        wakes = [moment for moment in wakes if moment > t]
        while state.ends and state.ends[0][0] <= t:
            state.release(heapq.heappop(state.ends)[2])
    for item in state.queue:
        entry = item.entry
        starts[entry.ref] = Start(None, unknown=tuple(
            held.ref for held in state.holding.values() if held.flavor_id == entry.flavor_id and held.ends_at is None))
    return starts


def _admitted(state: _State, quotas: dict[tuple[int, int], TeamQuota],
              sharing: Sharing | None) -> list[tuple[Waiting, int]]:
    """``(queued item, borrowed units)`` admitted now by admission's own order (module docstring)."""
    items = {id(item.entry): item for item in state.queue}
    entries = [item.entry for item in state.queue]
    if sharing is not None:
        figures = dataclasses.replace(sharing.figures, usage=dict(state.usage))
        return [(items[id(entry)], borrowed) for entry, borrowed in fair_order(entries, figures, {},
                                                                               sharing.remembered)]
    admitted = []
    for team_id in dict.fromkeys(entry.team_id for entry in entries):
        usage = {flavor: units for (team, flavor), units in state.usage.items() if team == team_id}
        own = {flavor: quota for (team, flavor), quota in quotas.items() if team == team_id}
        admitted += [(items[id(entry)], 0) for entry, _decision in
                     queue_order([e for e in entries if e.team_id == team_id], usage, own, None)]
    return admitted


def _reclaim(state: _State, sharing: Sharing, t: datetime) -> list[datetime]:
    """Ask reclaim for each queued entry, in queue order, as the reconcile cycle does; the victims'
    units free when their grace ends, and they queue again at their old place. Returns the moments
    reclaim waits for (a claim's delay, a victim's grace)."""
    figures = dataclasses.replace(sharing.figures, usage=dict(state.usage))
    slugs = figures.slugs
    wakes = []
    for item in list(state.queue):
        entry = item.entry
        key = (entry.team_id, entry.flavor_id)
        quota = flavor_quota(entry.flavor, figures.quotas.get(key), figures, entry.team_id)
        usage = state.usage.get(key, 0)
        if usage + entry.units > (quota.limit or 0) or entry.units <= quota.room(usage):
            continue  # beyond its own quota (reclaim never answers it), or it fits: admission's
        shares = fairshare.shares(figures, entry.flavor_id, sharing.remembered)
        candidates = [Candidate(held.ref, slugs.get(held.team_id, ""), held.units, held.borrowed, held.priority,
                                held.admitted_at or t, share=shares.get(held.team_id, 0.0), stopping=held.stopping)
                      for held in state.holding.values()
                      if held.flavor_id == entry.flavor_id and held.borrowed > 0
                      and (held.entry is not None or held.stopping)]
        claim = Claim(slugs.get(entry.team_id, ""), entry.ref, entry.units, entry.priority, entry.created_at)
        verdict = choose_victims(claim, quota, usage, candidates, sharing.rules, t)
        if not verdict.victims:
            wakes.append(entry.created_at + sharing.rules.delay)
            wakes += [c.admitted_at + sharing.rules.min_runtime for c in candidates]
            continue
        gone = t + sharing.grace
        for victim in verdict.victims:
            # Its units go when its pods are gone; it queues again at its old place, its time left ahead.
            held = state.holding[victim.ref]
            state.release(held, ends=False)
            state.hold(dataclasses.replace(held, ends_at=gone, entry=None, stopping=True))
            left = held.ends_at - t if held.ends_at is not None else None
            state.queue.append(Waiting(held.entry, left))
            figures.usage = dict(state.usage)
        state.queue.sort(key=lambda item: (-item.entry.priority, item.entry.created_at, item.entry.pk or 0))
        wakes.append(gone)
    return wakes
