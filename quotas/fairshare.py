"""Fair share within a cohort: who gets freed capacity first, and whose borrowed work goes first (docs/design.md "Sharing, preemption, clusters";
docs/glossary.md "fair share").

A team's **share** of a flavor is what it borrows, relative to what the cohort lends and to
its weight (Kueue's dominant-resource share, with a memory)::

    share = (borrowed + remembered) / lendable / fair_weight

* ``borrowed`` — units of the flavor the team holds above its nominal quota now
  (``max(0, in use − limit)``); for a queued request "after its admission", the same with the
  request's units added.
* ``remembered`` — what it borrowed before, in units: its decayed borrowed GPU-hours from the
  ledger (``UsageRecord.borrowed_gpu_hours``, every flavor) divided by the mean life of the
  decay, ``half_life / ln 2``. That is the exponentially weighted average of the units it
  borrowed: a team that borrowed ``b`` units for ever remembers ``b``, and half of what it
  borrowed ``SLIPWAY_FAIR_SHARE_HALF_LIFE_HOURS`` ago (7 days by default). So a team that
  borrowed all night yields, in the morning, to one that did not.
* ``lendable`` — what the cohort's members put into its pool for the flavor (the sum of their
  :attr:`quotas.decide.Lender.lends`).
* ``fair_weight`` — the team's weight (:class:`quotas.models.TeamSharing`); a weight of 0
  makes any borrowing an infinite share (it borrows last, and is reclaimed first), and no
  borrowing a share of 0.

Freed capacity goes by :func:`tournament`: among the queued entries that fit now, the lowest
share after admission first, then higher priority, then the older entry. Reclaim takes victims
from the team with the highest :func:`shares` first (:mod:`workloads.cycle.preemption`).

This module reads the figures through the cohort object it is given (duck-typed, as
:class:`quotas.facts.CohortFigures` provides them): admission imports it, not the other way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Protocol, TypeVar

from django.conf import settings
from django.db.models import Sum

from billing.models import UsageRecord

#: How far back the ledger is read: older borrowing weighs less than 1/256 of new.
WINDOW_HALF_LIVES = 8


class CohortShares(Protocol):
    """What a share is computed from: :class:`quotas.facts.CohortFigures` provides it."""

    slugs: dict[int, str]
    weights: dict[int, Decimal]

    def lendable(self, flavor_id: int) -> int: ...

    def borrowed(self, team_id: int, flavor_id: int, adding: int = 0) -> int: ...


def share(borrowed: float, remembered: float, lendable: int, weight: Decimal | float) -> float:
    """The share of a team that borrows ``borrowed`` units and remembers ``remembered`` (see the module)."""
    used = borrowed + remembered
    if used <= 0:
        return 0.0
    if weight <= 0 or lendable <= 0:
        return math.inf  # borrows last; nothing lent and still borrowing: at the back too
    return used / lendable / float(weight)


def share_of(cohort: CohortShares, team_id: int, flavor_id: int, remembered: dict[int, float],
             adding: int = 0) -> float:
    """:func:`share` of ``team_id`` for ``flavor_id`` holding ``adding`` units more than it does now."""
    return share(cohort.borrowed(team_id, flavor_id, adding), remembered.get(team_id, 0.0),
                 cohort.lendable(flavor_id), cohort.weights.get(team_id, Decimal(1)))


def shares(cohort: CohortShares, flavor_id: int, remembered: dict[int, float]) -> dict[int, float]:
    """``{team id: share}`` of every member for ``flavor_id`` now (pure)."""
    return {team_id: share_of(cohort, team_id, flavor_id, remembered) for team_id in cohort.slugs}


def decay(age_hours: float, half_life_hours: float) -> float:
    """The weight of something ``age_hours`` old: 1 now, ½ after a half-life."""
    return 0.5 ** (max(age_hours, 0.0) / half_life_hours)


def remembered_from(rows: Iterable[tuple[int, datetime, float]], now: datetime,
                    half_life_hours: float) -> dict[int, float]:
    """``{team id: units}`` remembered from ledger rows ``(team id, hour, borrowed GPU-hours)`` (pure).

    Each hour's GPU-hours weigh by the age of the hour's middle; the sum divided by the decay's
    mean life (``half_life / ln 2``) is the decayed average of units borrowed.
    """
    mean_life = half_life_hours / math.log(2)
    totals: dict[int, float] = {}
    for team_id, hour, gpu_hours in rows:
        age = (now - hour).total_seconds() / 3600 - 0.5
        totals[team_id] = totals.get(team_id, 0.0) + float(gpu_hours) * decay(age, half_life_hours)
    return {team_id: total / mean_life for team_id, total in totals.items()}


def remembered_units(team_ids: list[int], now: datetime) -> dict[int, float]:
    """``{team id: units}`` each team remembers having borrowed (one aggregate query; absent: none).

    Reads the ledger's borrowed GPU-hours of the last :data:`WINDOW_HALF_LIVES` half-lives,
    summed per team and hour, and decays them here.
    """
    if not team_ids:
        return {}
    half_life = float(settings.SLIPWAY_FAIR_SHARE_HALF_LIFE_HOURS)
    since = now - timedelta(hours=half_life * WINDOW_HALF_LIVES)
    rows = (UsageRecord.objects.filter(team_id__in=team_ids, start__gte=since, start__lt=now,
                                       borrowed_gpu_hours__gt=0)
            .values_list("team_id", "hour").annotate(total=Sum("borrowed_gpu_hours")).order_by())
    return remembered_from(rows, now, half_life)


T = TypeVar("T")


def tournament(entries: list[T], fits: Callable[[T], bool], rank: Callable[[T], tuple],
               admit: Callable[[T], None], scope: Callable[[T], Hashable]) -> list[T]:
    """Kueue's fair-sharing tournament: repeatedly admit, of the entries that fit, the lowest ``rank``.

    ``fits(entry)`` and ``rank(entry)`` read the state as ``admit(entry)`` leaves it; admission
    only ever takes capacity (and money), so an entry that does not fit is dropped for good. An
    admission changes the rank of entries of its ``scope`` only (admission: its flavor), so only
    those are looked at again; it may also take the fit of entries outside it (admission: what the
    team's budget leaves, which all its flavors share), so the lowest is asked again before it is
    admitted. Returns the admitted entries in the order admitted.
    """
    ranks: dict[int, tuple] = {}
    by_scope: dict[Hashable, list[int]] = {}
    for index, entry in enumerate(entries):
        by_scope.setdefault(scope(entry), []).append(index)
        if fits(entry):
            ranks[index] = rank(entry)
    admitted = []
    while ranks:
        best = min(ranks, key=ranks.__getitem__)
        del ranks[best]
        if not fits(entries[best]):
            continue
        admit(entries[best])
        admitted.append(entries[best])
        for index in by_scope[scope(entries[best])]:
            if index in ranks:
                if fits(entries[index]):
                    ranks[index] = rank(entries[index])
                else:
                    del ranks[index]
    return admitted
