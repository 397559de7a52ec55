"""Reclaim: which borrowed work a team takes its nominal quota back from (docs/design.md "Sharing, preemption, clusters"). Pure.

Reclaim, borrowing, cohort, fair share and lost work as docs/glossary.md defines them.

A team in a cohort whose queued request would fit within its own nominal quota, but does not
fit now because other members borrowed the units it lends, takes them back: :func:`choose_victims`
names the smallest set of borrowed workloads whose end lets the request in, or none with the
reason why not. Nothing here reads the database or the clock; :mod:`workloads.cycle.preemption` feeds it
the cohort's figures and acts on the answer.

The rules, in order:

* the cohort's ``reclaim`` is not ``never``; with ``lower_priority`` only work of lower priority
  than the claim may be taken;
* the claim fits within the team's nominal quota (``usage + units ≤ limit``): reclaim gives a
  team back what is its own, borrowing never preempts anyone;
* the claim has waited ``preemption_delay`` (capacity that frees itself wins first);
* victims are borrowed work only — a workload holding borrowed units, of a team holding more
  than its own nominal quota now — and never admitted less than ``min_runtime`` ago; a run
  preempted :data:`PROTECTED_AFTER` times or more is not taken again until it has run
  ``min_runtime`` since its last start (so a run cannot be kept from ever finishing);
* the order (:func:`victim_order`): an endpoint's burst first (it only shrinks and loses no
  work), then the **least money lost** (:func:`work_lost`), then the team with the highest
  fair share, then lower priority, then the most recently admitted;
* the smallest set: add victims in that order until the claim fits, then drop, last added
  first (the most work lost first), every one the claim does not need.

**Work lost** (issue #24): ``(now − the later of its last start and its last checkpoint) ×
units × price``. A run that never reports checkpoints (``reports_checkpoints`` false) is
assumed to lose the *median* of that age over the candidates that reported a checkpoint since
their last start (each one's ``now − max(start, last checkpoint)``), capped at its own run time;
when none did, its run time. A run with the contract that has not reported one since its last
start counts as silent too: ranking it by its whole run time would make never reporting the way
to be chosen last (security review 4 #6). So silence protects no one: a silent run is ranked like
a typical checkpointing one, never as if it lost nothing (nor, since it may well checkpoint, as if
it lost everything).

**Why work lost before share** (the decision): docs/design.md "Sharing, preemption, clusters" says "among eligible victims take the
least work lost", and eligibility already carries the fairness — only teams above their
nominal quota hold victims, and each only until it is back at its nominal quota, so whichever
borrower is chosen, the claimant gets its own units back and no team is pushed below its
nominal quota. The share then only decides between borrowers that would lose the same money
(equal ages and sizes, endpoints' bursts, runs not started), as priority and recency do after
it. Ranking share first would make work lost decide only within one team, which keeps most of
what recency loses (bench/sharing.py measures both orders: :func:`recency_order` is the order
before work lost counted, kept for that comparison).

Why it cannot loop: the claimant fits within its nominal quota, so what it is admitted with
borrows nothing and it is never above its nominal quota — it is no one's victim. A victim's team
was above its nominal quota; to reclaim in turn it must get under it, where it borrows nothing
from the claimant either. (The order among victims plays no part in this.)
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from billing.ledger import interval_cost
from cluster.reasons import Reason
from core.priority import Priority
from quotas.decide import FlavorQuota

#: After this many preemptions a run is protected until it has run ``min_runtime`` since its last start.
PROTECTED_AFTER = 3


class Never:
    """Why no victims: the words for people, and a code that callers may branch on."""

    RECLAIM_OFF = "reclaim_off"
    NOT_UNDER_NOMINAL = "not_under_nominal"
    FITS = "fits"
    DELAY = "delay"
    NO_VICTIMS = "no_victims"


@dataclass(frozen=True)
class Rules:
    """A cohort's reclaim rules (:class:`quotas.models.Cohort`)."""

    reclaim: str  # Cohort.Reclaim: "never", "lower_priority" or "any"
    min_runtime: timedelta
    delay: timedelta


@dataclass(frozen=True)
class Claim:
    """The queued request a team wants its quota back for."""

    team: str
    ref: str
    units: int
    priority: int  # Priority.rank
    waiting_since: datetime


@dataclass(frozen=True)
class Candidate:
    """Held work of another member that borrows units of the claim's flavor."""

    ref: str
    team: str
    units: int  # what taking it back frees: a run's units, an endpoint burst's borrowed units
    borrowed: int
    priority: int  # Priority.rank
    admitted_at: datetime
    burst: bool = False  # an endpoint's burst: it shrinks rather than stops
    share: float = 0.0  # its team's fair share now (quotas.fairshare.shares)
    stopping: bool = False  # chosen before and its pods are still stopping: its units are as good as free
    #: Its last start (a run's pods started, again after a preemption); None: as ``admitted_at``.
    started_at: datetime | None = None
    #: When it last reported a checkpoint (None: never); one from before its last start counts from that start.
    last_checkpoint_at: datetime | None = None
    #: Whether it reports checkpoints at all; a silent run is assumed to lose the median (module docstring).
    reports_checkpoints: bool = False
    #: Price of one unit-hour (``billing.models.flavor_price``); 1 ranks by GPU-hours alone.
    price_per_hour: Decimal = Decimal(1)
    preemptions: int = 0  # how often it was preempted before

    @property
    def start(self) -> datetime:
        return self.started_at if self.started_at is not None else self.admitted_at

    def reported(self) -> bool:
        """Whether it reported a checkpoint since its last start: only then is its own age ranked.

        A run with the contract that has not (yet, or ever) is ranked as a silent one, by the
        median: otherwise never reporting would rank it as losing its whole run time, last to go
        (security review 4 #6: not reporting must never protect).
        """
        return (self.reports_checkpoints and self.last_checkpoint_at is not None and self.start is not None
                and self.last_checkpoint_at >= self.start)

    def since(self) -> datetime:
        """What a preemption now throws away starts here: its last checkpoint since its start, else its start."""
        return lost_since(self.start, self.last_checkpoint_at)


@dataclass(frozen=True)
class Verdict:
    """The victims to stop, or why there are none: ``why_not``'s code is a :class:`Never`."""

    victims: tuple[Candidate, ...] = ()
    why_not: Reason | None = None  #: None when there are victims

    def __bool__(self) -> bool:
        return bool(self.victims)


def lost_since(start: datetime, last_checkpoint_at: datetime | None) -> datetime:
    """Where a run preempted now resumes from: the later of its last start and its last checkpoint.

    A checkpoint before its last start was already resumed from; the work since that start is
    what a preemption throws away. The one rule for the ranking here and for the preemption log
    (:func:`workloads.cycle.preemption.lost_work`).
    """
    return start if last_checkpoint_at is None else max(start, last_checkpoint_at)


def lost_span(start: datetime, last_checkpoint_at: datetime | None, notice: datetime) -> tuple[datetime, timedelta]:
    """``(resume point, time lost)`` of a run given its preemption notice at ``notice`` (pure).

    The work lost runs from where the next attempt resumes (:func:`lost_since`) to the notice:
    what the run did after the notice is billed as grace, not lost. A checkpoint stamped after the
    notice (the run saved on it, or its clock ran ahead of the portal's) means nothing was lost,
    never a negative span; and the span is never longer than the attempt ran (``notice - start``,
    0 for a start the portal dates after the notice). The one rule for the log, the reason's words
    and the usage report's ``preempted_gpu_hours``.
    """
    start = min(start, notice)
    resume = min(lost_since(start, last_checkpoint_at), notice)
    return resume, notice - resume


def work_lost(candidates: list[Candidate], now: datetime) -> dict[str, Decimal]:
    """``{ref: the money a preemption now would throw away}`` (module docstring: silent runs get the median)."""
    reported = [max(0.0, (now - c.since()).total_seconds()) for c in candidates if c.reported() and not c.burst]
    median = statistics.median(reported) if reported else None
    lost: dict[str, Decimal] = {}
    for c in candidates:
        ran = max(0.0, (now - c.start).total_seconds())
        if c.burst:
            age = 0.0  # a burst serves; shrinking it computes nothing again
        elif c.reported():
            age = max(0.0, (now - c.since()).total_seconds())
        else:
            age = ran if median is None else min(median, ran)
        lost[c.ref] = interval_cost(c.price_per_hour, c.units, now - timedelta(seconds=age), now)
    return lost


def victim_order(candidate: Candidate, lost: Decimal) -> tuple:
    """Who goes first among eligible victims: burst, least money lost, highest share, lowest priority,
    newest admission (module docstring: why in that order)."""
    return (not candidate.burst, lost, -candidate.share, candidate.priority, -candidate.admitted_at.timestamp(),
            candidate.ref)


def recency_order(candidate: Candidate, lost: Decimal) -> tuple:
    """The order before work lost counted (burst, highest share, lowest priority, newest admission):
    only for bench/sharing.py to measure what ranking by work lost saves."""
    return (not candidate.burst, -candidate.share, candidate.priority, -candidate.admitted_at.timestamp(),
            candidate.ref)


def protected(candidate: Candidate, rules: Rules, now: datetime) -> bool:
    """Preempted :data:`PROTECTED_AFTER` times or more and not yet run ``min_runtime`` since its last start."""
    return candidate.preemptions >= PROTECTED_AFTER and now - candidate.start < rules.min_runtime


def _without(quota: FlavorQuota, gone: list[Candidate]) -> FlavorQuota:
    """``quota`` with the units of ``gone`` no longer in use by their teams."""
    freed: dict[str, int] = {}
    for candidate in gone:
        freed[candidate.team] = freed.get(candidate.team, 0) + candidate.units
    return dataclasses.replace(quota, lenders=tuple(
        dataclasses.replace(m, in_use=max(0, m.in_use - freed.get(m.team, 0))) for m in quota.lenders or ()))


def _fits(claim: Claim, quota: FlavorQuota, usage: int) -> bool:
    return claim.units <= quota.room(usage)


def _delay_left(claim: Claim, rules: Rules, now: datetime) -> int:
    """Whole seconds the claim still waits for capacity to free itself before it preempts (0: none)."""
    waited = now - claim.waiting_since
    return int((rules.delay - waited).total_seconds()) + 1 if waited < rules.delay else 0


def _old_enough(candidate: Candidate, rules: Rules, now: datetime) -> bool:
    """Admitted ``min_runtime`` ago and not protected after :data:`PROTECTED_AFTER` preemptions."""
    return now - candidate.admitted_at >= rules.min_runtime and not protected(candidate, rules, now)


def _smallest_set(eligible: list[Candidate], lets_in: Callable[[list[Candidate]], bool],
                  may_add: Callable[[list[Candidate], Candidate], bool] = lambda chosen, c: True,
                  ) -> list[Candidate] | None:
    """Add ``eligible`` in their order until ``lets_in(chosen)``, then drop, last added first, every
    one not needed; None when even all of them do not let the claim in."""
    chosen: list[Candidate] = []
    for candidate in eligible:
        if not may_add(chosen, candidate):
            continue
        chosen.append(candidate)
        if lets_in(chosen):
            break
    else:
        return None
    # The last one was needed: without it, it did not fit. The others are dropped most work lost first.
    for candidate in reversed(chosen[:-1]):
        rest = [c for c in chosen if c is not candidate]
        if lets_in(rest):
            chosen = rest
    return chosen


def choose_victims(claim: Claim, quota: FlavorQuota, usage: int, candidates: list[Candidate], rules: Rules,
                   now: datetime, order: Callable[[Candidate, Decimal], tuple] = victim_order) -> Verdict:
    """The borrowed work to take back so that ``claim`` fits (module docstring), or why none.

    ``quota`` is the claimant's :class:`FlavorQuota` in its cohort with every member's units in
    use now, ``usage`` its own. Candidates already ``stopping`` count as freed and are never
    chosen again, so a claim waiting for pods to stop does not take more meanwhile. ``order`` is
    :func:`victim_order` but for the bench's comparison.
    """
    if rules.reclaim == "never" or quota.lenders is None:
        return Verdict(why_not=Reason(Never.RECLAIM_OFF, "the cohort never reclaims"))
    limit = quota.limit or 0
    if usage + claim.units > limit:
        return Verdict(why_not=Reason(Never.NOT_UNDER_NOMINAL,
                                      f"needs {claim.units} with {usage} of its {limit} in use: beyond its own quota"))
    quota = _without(quota, [c for c in candidates if c.stopping])
    if _fits(claim, quota, usage):
        return Verdict(why_not=Reason(Never.FITS, "fits now (or once stopping work is gone)"))
    left = _delay_left(claim, rules, now)
    if left:
        return Verdict(why_not=Reason(Never.DELAY, f"reclaims in {left} s unless capacity frees itself"))
    over = {m.team: m.in_use - m.limit for m in quota.lenders}
    lost = work_lost(candidates, now)
    eligible = sorted((c for c in candidates
                       if not c.stopping and c.borrowed > 0 and c.team != claim.team and over.get(c.team, 0) > 0
                       and _old_enough(c, rules, now)
                       and (rules.reclaim != "lower_priority" or c.priority < claim.priority)),
                      key=lambda c: order(c, lost[c.ref]))

    def still_over(chosen: list[Candidate], candidate: Candidate) -> bool:
        # A team is only a victim while it stays above its own quota: once the ones chosen
        # bring it back to its nominal, its other work is its own.
        return over[candidate.team] - sum(c.units for c in chosen if c.team == candidate.team) > 0

    chosen = _smallest_set(eligible, lambda gone: _fits(claim, _without(quota, gone), usage), still_over)
    if chosen is None:
        return Verdict(why_not=Reason(Never.NO_VICTIMS, "no borrowed work may be taken back yet (min runtime, priority, "
                                                        "preempted often or none borrowed)"))
    return Verdict(victims=tuple(chosen))


def choose_own_victims(claim: Claim, quota: FlavorQuota, usage: int, candidates: list[Candidate], rules: Rules,
                       now: datetime, order: Callable[[Candidate, Decimal], tuple] = victim_order) -> Verdict:
    """Within-team priority (the team's ``within_team_preemption``): a queued ``high`` claim of a
    team that is full takes the team's own lower-priority work, by the rules above — the delay,
    ``min_runtime``, the protection after :data:`PROTECTED_AFTER` preemptions, the least money
    lost first and the smallest set. What it frees is the team's own usage. (An endpoint's burst
    is not a candidate here: queued work of its team already takes it back through the kind's
    ``shrink_burst``.)

    Loop-free: a victim has a lower priority than its claimant, so it can never take it back.
    """
    if claim.priority < Priority.HIGH.rank:
        return Verdict(why_not=Reason(Never.RECLAIM_OFF, "only high-priority work preempts its own team's"))
    own = [c for c in candidates if c.team == claim.team and not c.burst]
    usage -= sum(c.units for c in own if c.stopping)
    if _fits(claim, quota, usage):
        return Verdict(why_not=Reason(Never.FITS, "fits now (or once stopping work is gone)"))
    left = _delay_left(claim, rules, now)
    if left:
        return Verdict(why_not=Reason(Never.DELAY, f"preempts in {left} s unless capacity frees itself"))
    lost = work_lost(own, now)
    eligible = sorted((c for c in own if not c.stopping and c.priority < claim.priority and _old_enough(c, rules, now)),
                      key=lambda c: order(c, lost[c.ref]))
    chosen = _smallest_set(eligible, lambda gone: _fits(claim, quota, usage - sum(c.units for c in gone)))
    if chosen is None:
        return Verdict(why_not=Reason(Never.NO_VICTIMS,
                                      "none of the team's lower-priority work may be stopped yet (min runtime or none)"))
    return Verdict(victims=tuple(chosen))
