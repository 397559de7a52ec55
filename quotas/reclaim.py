"""Reclaim: which borrowed work a team takes its nominal quota back from (DESIGN §9). Pure.

A team in a cohort whose queued request would fit within its own nominal quota, but does not
fit now because other members borrowed the units it lends, takes them back: :func:`choose_victims`
names the smallest set of borrowed workloads whose end lets the request in, or none with the
reason why not. Nothing here reads the database or the clock; :mod:`workloads.preemption` feeds it
the cohort's figures and acts on the answer.

The rules, in order:

* the cohort's ``reclaim`` is not ``never``; with ``lower_priority`` only work of lower priority
  than the claim may be taken;
* the claim fits within the team's nominal quota (``usage + units ≤ limit``): reclaim gives a
  team back what is its own, borrowing never preempts anyone;
* the claim has waited ``preemption_delay`` (capacity that frees itself wins first);
* victims are borrowed work only — a workload holding borrowed units, of a team holding more
  than its own nominal quota now — and never admitted less than ``min_runtime`` ago;
* an endpoint's burst goes first (it only shrinks), then the team with the highest fair share,
  then lower priority, then the most recently admitted (:func:`victim_order`, where the next
  issue's "least work lost" slots in);
* the smallest set: add victims in that order until the claim fits, then drop, newest first,
  every one the claim does not need.

Why it cannot loop: the claimant fits within its nominal quota, so what it is admitted with
borrows nothing and it is never above its nominal quota — it is no one's victim. A victim's team
was above its nominal quota; to reclaim in turn it must get under it, where it borrows nothing
from the claimant either.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta

from quotas.admission import FlavorQuota


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


@dataclass(frozen=True)
class Verdict:
    victims: tuple[Candidate, ...] = ()
    why_not: str = ""  # a Never code when there are no victims
    words: str = ""

    def __bool__(self) -> bool:
        return bool(self.victims)


def victim_order(candidate: Candidate) -> tuple:
    """Who goes first among eligible victims: burst, highest share, lowest priority, newest admission."""
    return (not candidate.burst, -candidate.share, candidate.priority, -candidate.admitted_at.timestamp(),
            candidate.ref)


def _without(quota: FlavorQuota, gone: list[Candidate]) -> FlavorQuota:
    """``quota`` with the units of ``gone`` no longer in use by their teams."""
    freed: dict[str, int] = {}
    for candidate in gone:
        freed[candidate.team] = freed.get(candidate.team, 0) + candidate.units
    return dataclasses.replace(quota, lenders=tuple(
        dataclasses.replace(m, in_use=max(0, m.in_use - freed.get(m.team, 0))) for m in quota.lenders or ()))


def _fits(claim: Claim, quota: FlavorQuota, usage: int) -> bool:
    return claim.units <= quota.room(usage)


def choose_victims(claim: Claim, quota: FlavorQuota, usage: int, candidates: list[Candidate], rules: Rules,
                   now: datetime) -> Verdict:
    """The borrowed work to take back so that ``claim`` fits (module docstring), or why none.

    ``quota`` is the claimant's :class:`FlavorQuota` in its cohort with every member's units in
    use now, ``usage`` its own. Candidates already ``stopping`` count as freed and are never
    chosen again, so a claim waiting for pods to stop does not take more meanwhile.
    """
    if rules.reclaim == "never" or quota.lenders is None:
        return Verdict(why_not=Never.RECLAIM_OFF, words="the cohort never reclaims")
    limit = quota.limit or 0
    if usage + claim.units > limit:
        return Verdict(why_not=Never.NOT_UNDER_NOMINAL,
                       words=f"needs {claim.units} with {usage} of its {limit} in use: beyond its own quota")
    quota = _without(quota, [c for c in candidates if c.stopping])
    if _fits(claim, quota, usage):
        return Verdict(why_not=Never.FITS, words="fits now (or once stopping work is gone)")
    waited = now - claim.waiting_since
    if waited < rules.delay:
        left = int((rules.delay - waited).total_seconds()) + 1
        return Verdict(why_not=Never.DELAY, words=f"reclaims in {left} s unless capacity frees itself")
    over = {m.team: m.in_use - m.limit for m in quota.lenders}
    eligible = sorted((c for c in candidates
                       if not c.stopping and c.borrowed > 0 and c.team != claim.team and over.get(c.team, 0) > 0
                       and now - c.admitted_at >= rules.min_runtime
                       and (rules.reclaim != "lower_priority" or c.priority < claim.priority)),
                      key=victim_order)
    chosen: list[Candidate] = []
    for candidate in eligible:
        # A team is only a victim while it stays above its own quota: once the ones chosen
        # bring it back to its nominal, its other work is its own.
        left_over = over[candidate.team] - sum(c.units for c in chosen if c.team == candidate.team)
        if left_over <= 0:
            continue
        chosen.append(candidate)
        if _fits(claim, _without(quota, chosen), usage):
            break
    else:
        return Verdict(why_not=Never.NO_VICTIMS,
                       words="no borrowed work may be taken back yet (min runtime, priority or none borrowed)")
    for candidate in reversed(chosen[:-1]):  # the last one was needed: without it, it did not fit
        rest = [c for c in chosen if c is not candidate]
        if _fits(claim, _without(quota, rest), usage):
            chosen = rest
    return Verdict(victims=tuple(chosen), words=", ".join(c.ref for c in chosen))
