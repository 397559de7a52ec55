"""Admission: the only code that compares a team's usage with its limits.

* :func:`decide` is pure: given a request, the units in use, the flavor/limit facts and the
  budget, it returns a :class:`Decision` (admit, queue or reject, a reason constant and a
  message in plain words). Every rule lives there, so it is tested table-driven.
* :func:`admit` runs one transaction: take the team's admission lock (:func:`teams.services.lock_team`),
  read the quota and sum the active reservations *after* it is held, decide, and write a
  reservation or a queue entry. Concurrent admissions for one team therefore serialise on the
  lock and each sees the reservations of the ones before it: the platform never over-admits.
* :func:`release` frees a workload's units (idempotent); :func:`admit_waiting` then admits
  queued work that fits, in queue order (priority, then FIFO), best-effort: a small request
  may pass a large one that does not fit yet.
* Every decision :func:`admit` takes is counted by its :attr:`Decision.label`, with the time
  it took (``/metrics``, :mod:`core.metrics`); queued work admitted later counts once more.
* Clusters (issue 34): work of a flavor that only draining, degraded or lost clusters offer
  waits in the queue with :data:`~quotas.constants.Reason.WAITING_FOR_CLUSTER`, holding
  nothing, and is admitted once a cluster that offers it is ready again. Whether one is, is
  worked out outside :func:`decide` (:func:`cluster_waits`, by
  :func:`cluster.placement.no_usable_cluster` from the clusters as last recorded) and passed to
  it as data; every caller of :func:`decide` that admits new work passes it.
* Cohorts (DESIGN §9): a team in a cohort may borrow what other members leave unused
  (:class:`FlavorQuota` holds the rule); its admissions take the cohort's lock after the
  team's (:func:`lock_admission`), and its queue is re-admitted with the whole cohort's.

Queued entries whose request can no longer ever fit (the quota was lowered, the flavor
retired, the budget spent) stay queued with that reason, so an admin can fix the quota and
the work continues; they leave the queue only by being admitted or released.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, IntegerField, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

import fleet.services as fleet
from cluster.placement import PLACEABLE_STATES, ClusterOffer, no_usable_cluster
from core import metrics
from core.formatting import format_amount
from core.rawsql import sql_decimal
from fleet.constants import Health
from fleet.models import Cluster
from quotas import fairshare
from quotas.constants import DecisionLabel, Outcome, Priority, Reason
from quotas.ledger import (
    ZERO,
    closed_spend_subquery,
    committed,
    cost_ahead,
    hours_left_in_month,
    month_end,
    month_spend,
    month_start,
)
from quotas.models import Cohort, GpuFlavor, QueuedRequest, Reservation, TeamBudget, TeamQuota, TeamSharing
from quotas.pricing import dearest_sql
from quotas.signals import workload_admitted
from teams.models import Team
from teams.services import lock_team


@dataclass(frozen=True)
class ResourceRequest:
    """What a workload asks for. ``units`` is the total, ``units_per_node`` one worker/replica."""

    flavor: str
    units: int
    units_per_node: int
    priority: Priority = Priority.NORMAL
    spot: bool = False
    description: str = ""
    #: The estimated cost of the whole request (a known end), or None when its end is unknown.
    estimated_cost: Decimal | None = None
    #: What admitting it commits per hour (its units at its price; an endpoint's guaranteed
    #: minimum), or None for a request the budget does not weigh (an endpoint's burst, which
    #: is never committed and goes back when the budget is spent).
    cost_per_hour: Decimal | None = None
    #: Burst above an endpoint's guaranteed minimum: not granted once the month's spend passed
    #: the budget's alert threshold (:attr:`BudgetState.alert`).
    burst: bool = False
    #: Whether it may use units its cohort lends (:class:`FlavorQuota`): not an endpoint's
    #: guaranteed minimum, which must not be preemptible; its burst may.
    may_borrow: bool = True

    def committed_cost(self, hours_left: Decimal) -> Decimal | None:
        """What admitting it commits this month, with ``hours_left`` until the month's end.

        The rule that never rewards leaving a runtime limit out: a request with a known end
        commits its estimated cost, but no more than it costs until the month's end; one
        without a known end (a run without a limit, an endpoint's minimum) commits what it
        costs until the month's end — the most any limit could commit this month. It is the
        figure :func:`quotas.ledger.committed` counts for the workload once it is admitted.
        """
        if self.cost_per_hour is None:
            return self.estimated_cost
        to_month_end = self.cost_per_hour * max(hours_left, ZERO)
        return to_month_end if self.estimated_cost is None else min(self.estimated_cost, to_month_end)


@dataclass(frozen=True)
class Decision:
    outcome: str  # Outcome.ADMIT | QUEUE | REJECT
    reason: str  # a Reason constant
    message: str  # plain words, for people
    position: int | None = None  # 1-based queue position when queued
    borrows: int = 0  # units of the request above the team's nominal quota, lent by its cohort
    #: With ``borrows``: the cohort's other members that lend the flavor, who may take the units back.
    lent_by: tuple[str, ...] = ()

    @property
    def preemptible(self) -> bool:
        """Admitted with borrowed units: reclaim may take them back (DESIGN §9)."""
        return self.borrows > 0

    @property
    def admitted(self) -> bool:
        return self.outcome == Outcome.ADMIT

    @property
    def queued(self) -> bool:
        return self.outcome == Outcome.QUEUE

    @property
    def rejected(self) -> bool:
        return self.outcome == Outcome.REJECT

    @property
    def label(self) -> str:
        """Its :class:`~quotas.constants.DecisionLabel`: the outcome, an admission that borrows told apart."""
        if self.admitted:
            return DecisionLabel.BORROWED if self.preemptible else DecisionLabel.ADMITTED
        return DecisionLabel.QUEUED if self.queued else DecisionLabel.REJECTED


@dataclass(frozen=True)
class Lender:
    """Another member of the team's cohort, for one flavor: its nominal quota, lending limit and use."""

    team: str
    limit: int
    in_use: int
    lending_limit: int | None = None  # None: all of its unused quota

    @property
    def lends(self) -> int:
        """What of its quota it puts into the cohort's pool; the rest (``limit − lends``) is its private floor."""
        return self.limit if self.lending_limit is None else min(self.limit, self.lending_limit)

    @property
    def pooled_use(self) -> int:
        """Its units in use beyond its private floor: what it takes from the cohort's pool."""
        return max(0, self.in_use - (self.limit - self.lends))


@dataclass(frozen=True)
class FlavorQuota:
    """What :func:`decide` knows about the requested flavor and the team's limit for it.

    ``lenders`` is None for a team outside any cohort (its limit is a wall, today's rule);
    in a cohort it holds the other members' figures for the flavor (maybe none). The cohort
    rule is Kueue's: each member puts ``lends`` of its nominal quota into a pool (all of it
    without a lending limit) and keeps the rest as a private floor; units a member uses
    beyond its floor come out of the pool. A request fits when the team stays within
    ``limit + borrowing_limit`` and what it takes from the pool is still free. So no team is
    ever above its nominal quota plus its borrowing limit, the cohort never holds more than
    the sum of its members' nominal quotas, and a lender's floor is always its own.
    """

    exists: bool = True
    active: bool = True
    max_units_per_node: int = 1
    limit: int | None = None  # None: the team has no quota for this flavor
    borrowing_limit: int | None = None  # in a cohort; None: as much as the cohort lends
    lending_limit: int | None = None  # in a cohort; None: all of its unused quota
    lenders: tuple[Lender, ...] | None = None  # None: not in a cohort

    def _own(self, usage: int) -> Lender:
        return Lender("", self.limit or 0, usage, self.lending_limit)

    def room(self, usage: int, may_borrow: bool = True) -> int:
        """How many units the team may add now, holding ``usage`` (≥ 0)."""
        own = self._own(usage)
        if self.lenders is None:
            return max(0, own.limit - usage)
        pool_free = sum(m.lends - m.pooled_use for m in (own, *self.lenders))
        room = max(0, pool_free) + max(0, own.limit - own.lends - usage)
        ceiling = self.ceiling(may_borrow)
        if ceiling is not None:
            room = min(room, ceiling - usage)
        return max(0, room)

    def ceiling(self, may_borrow: bool = True) -> int | None:
        """The most the team may ever hold (None: bounded by what the cohort lends alone)."""
        own = self.limit or 0
        if self.lenders is None or not may_borrow:
            return own
        return None if self.borrowing_limit is None else own + self.borrowing_limit

    def idle(self) -> FlavorQuota:
        """The same quota with every lender idle."""
        if self.lenders is None:
            return self
        return dataclasses.replace(self, lenders=tuple(dataclasses.replace(m, in_use=0) for m in self.lenders))

    def most(self, may_borrow: bool = True) -> int:
        """The largest request that could ever fit: every lender idle, the team holding nothing."""
        return self.idle().room(0, may_borrow)

    def borrowable(self, usage: int, may_borrow: bool = True) -> int:
        """What the cohort could lend the team now: its room beyond its own unused quota."""
        return max(0, self.room(usage, may_borrow) - max(0, (self.limit or 0) - usage))

    def borrows(self, usage: int, units: int) -> int:
        """Units of a request of ``units`` above the team's nominal quota, holding ``usage``."""
        own = self.limit or 0
        return max(0, usage + units - own) - max(0, usage - own)

    def lenders_text(self) -> str:
        return ", ".join(f"{m.team} uses {m.in_use} of its {m.limit}" for m in self.lenders or ())


@dataclass(frozen=True)
class BudgetState:
    """A team's month in money, and the one place its left / exhausted / alert state is worked out.

    :func:`decide` reads it to admit; budget summaries (pages, the API, the reconcile cycle's
    budget step) report the same properties.
    """

    monthly_limit: Decimal | None = None  # None: no budget, spending is unlimited
    spent_month: Decimal = ZERO
    currency: str = "USD"
    committed: Decimal = ZERO  # estimated cost still to come from admitted work (ledger.committed)
    #: Hours until the month's end: what work without a known end commits (a month of 31 days
    #: when not given, the most a month can leave).
    hours_left: Decimal = Decimal(31 * 24)
    #: Percent of the limit whose spending raises the alert (None: only a spent budget alerts).
    alert_threshold_percent: int | None = None

    @property
    def left(self) -> Decimal:
        """What the month's budget leaves once spent and committed money is counted."""
        return (self.monthly_limit or ZERO) - self.spent_month - self.committed

    @property
    def projected_month_end(self) -> Decimal:
        """The month's spend at its end, the one projection (issue 34): spent plus what admitted
        work commits — the figure this gate admits against, so a page never projects one number
        while admission counts another."""
        return self.spent_month + self.committed

    def runs_out_at(self, now: datetime, burn_per_hour: Decimal) -> datetime | None:
        """When the month's budget is spent: None without one, or when admitted work does not
        spend it this month (:attr:`projected_month_end` below the limit); ``now`` once spent;
        else at the pace its committed money is spent — what runs now, or the committed money
        spread over the hours left when that is faster (work admitted but not started yet)."""
        limit = self.monthly_limit
        if limit is None or self.projected_month_end < limit:
            return None
        if self.spent_month >= limit:
            return now
        pace = max(burn_per_hour, self.committed / self.hours_left if self.hours_left > 0 else ZERO)
        if pace <= 0:
            return now
        return now + timedelta(hours=float((limit - self.spent_month) / pace))

    @property
    def exhausted(self) -> bool:
        """The month's spend reached the limit: new work is refused (and a "stop" policy stops work)."""
        return self.monthly_limit is not None and self.spent_month >= self.monthly_limit

    @property
    def alert(self) -> bool:
        """The month's spend reached the alert threshold (or the limit): the banner, the audit, no burst."""
        if self.monthly_limit is None:
            return False
        limit, threshold = self.monthly_limit, self.alert_threshold_percent
        return self.exhausted or (threshold is not None and limit > 0
                                  and self.spent_month * 100 >= limit * threshold)


def decide(request: ResourceRequest, usage: int, quota: FlavorQuota, budget: BudgetState | None = None,
           no_cluster: str = "") -> Decision:
    """Admit, queue or reject ``request`` given ``usage`` units of its flavor in use by the team.

    Checks run from "can never work" to "not now", so the message names the real obstacle.
    ``no_cluster`` is why no cluster can take new work of the flavor now ("" when one can:
    :func:`cluster_waits`); work that fits the team's quota and budget then waits for a cluster,
    the last check — quota or money, when they also hold it back, is what the team can act on.
    Money: a request waits for budget when what admitting it commits this month
    (:meth:`ResourceRequest.committed_cost`: without a runtime limit, its cost until the month's
    end) exceeds what the budget leaves after spent and committed money. More committed money
    only ever queues (``admit`` relies on it to decide at a bound first).
    """
    name, units = request.flavor, request.units
    if not quota.exists:
        return Decision(Outcome.REJECT, Reason.UNKNOWN_FLAVOR, f"unknown GPU flavor {name!r}")
    if not quota.active:
        return Decision(Outcome.REJECT, Reason.INACTIVE_FLAVOR, f"GPU flavor {name} is no longer offered")
    if units < 1 or request.units_per_node < 1 or request.units_per_node > units:
        return Decision(Outcome.REJECT, Reason.INVALID_REQUEST,
                        f"invalid request: {units} units in total, {request.units_per_node} per worker")
    if request.burst and budget is not None and budget.alert:
        # Before the quota: no burst at all past the alert threshold. Not "never": it returns
        # when the month turns or an admin raises the budget.
        return Decision(Outcome.QUEUE, Reason.BUDGET_ALERT,
                        f"the month's spend passed {budget.alert_threshold_percent or 100}% of the budget")
    in_cohort = quota.lenders is not None
    # In a cohort a nominal quota of 0 may still borrow; outside one it is no quota at all.
    if (quota.limit is None) if in_cohort else not quota.limit:
        return Decision(Outcome.REJECT, Reason.NO_QUOTA_FOR_FLAVOR,
                        f"the team has no quota for {name}; ask a platform admin")
    if request.units_per_node > quota.max_units_per_node:
        return Decision(Outcome.REJECT, Reason.EXCEEDS_LARGEST_NODE,
                        f"needs {request.units_per_node}\u00d7 {name} per worker, "
                        f"but the largest node has {quota.max_units_per_node}")
    most = quota.most(request.may_borrow)
    if units > most:
        lend = f" and what its cohort can lend ({most - quota.limit})" if most > quota.limit else ""
        if in_cohort and not request.may_borrow and quota.most() > quota.limit:
            lend = "; a guaranteed minimum never borrows from the cohort"
        return Decision(Outcome.REJECT, Reason.EXCEEDS_QUOTA,
                        f"needs {units}\u00d7 {name}, more than the team's limit of {quota.limit}{lend}")
    if budget is not None and budget.exhausted:
        return Decision(Outcome.REJECT, Reason.BUDGET_EXHAUSTED,
                        f"monthly budget spent: {format_amount(budget.spent_month)} of "
                        f"{format_amount(budget.monthly_limit)} {budget.currency}")
    if units > quota.room(usage, request.may_borrow):
        message = f"waiting for quota: needs {units}\u00d7 {name}, {usage} of {quota.limit} in use"
        if in_cohort:
            others = f" ({quota.lenders_text()})" if quota.lenders else ""
            message += f"; the cohort can lend {quota.borrowable(usage)}{others}"
            if not request.may_borrow:
                message += ", but a guaranteed minimum never borrows"
        return Decision(Outcome.QUEUE, Reason.WAITING_FOR_QUOTA, message)
    cost = request.committed_cost(budget.hours_left) if budget is not None else None
    if budget is not None and budget.monthly_limit is not None and cost is not None and cost > budget.left:
        # Not "never": it starts when an admin raises the budget, work ends early, or the month turns.
        # Without a known end it counts until the month's end (ResourceRequest.committed_cost), so
        # leaving the runtime limit out never starts a run that a limit would have queued.
        until = " until the month's end (no runtime limit)" if request.estimated_cost is None else ""
        return Decision(Outcome.QUEUE, Reason.WAITING_FOR_BUDGET,
                        f"waiting for budget: est. {format_amount(cost)}{until} would exceed the "
                        f"{format_amount(max(budget.left, ZERO))} {budget.currency} left this month")
    if no_cluster:
        # Not "never": a drained cluster made ready again, a lost one answering again, admits it.
        return Decision(Outcome.QUEUE, Reason.WAITING_FOR_CLUSTER, f"waiting: {no_cluster}")
    borrows = quota.borrows(usage, units) if in_cohort else 0
    lent = f", {borrows} borrowed from the cohort" if borrows else ""
    lent_by = tuple(m.team for m in quota.lenders if m.lends > 0) if borrows else ()
    return Decision(Outcome.ADMIT, Reason.ADMITTED,
                    f"admitted: {units}\u00d7 {name}, {usage + units} of {quota.limit} now in use{lent}",
                    borrows=borrows, lent_by=lent_by)


# -- reading the facts decide() needs ------------------------------------------------------


def _quota_rows():
    """Quota rows with their flavors and their team's cohort id (``cohort_of_team``, read in
    the same query: a team outside any cohort pays no query for being outside)."""
    return TeamQuota.objects.select_related("flavor").annotate(cohort_of_team=F("team__sharing__cohort_id"))


def team_quotas(team) -> dict[int, TeamQuota]:
    """``{flavor id: TeamQuota}`` of the team, with the flavors and its cohort id (one query)."""
    return {q.flavor_id: q for q in _quota_rows().filter(team=team)}


def cohort_of_quotas(quotas: dict[int, TeamQuota]) -> CohortFigures | None:
    """The :class:`CohortFigures` of the team whose :func:`team_quotas` these are (None outside a
    cohort, or without quota rows, where nothing could be borrowed anyway)."""
    row = next(iter(quotas.values()), None)
    return cohort_figures(getattr(row, "cohort_of_team", None))


@dataclass
class CohortFigures:
    """A cohort's members, their quotas, units in use and fair-share weights, read once (three queries)."""

    slugs: dict[int, str]  # team id → slug
    quotas: dict[tuple[int, int], TeamQuota]  # (team id, flavor id) → quota
    usage: dict[tuple[int, int], int]  # (team id, flavor id) → units held
    weights: dict[int, Decimal] = dataclasses.field(default_factory=dict)  # team id → fair_weight (absent: 1)

    def member(self, team_id: int, flavor_id: int) -> Lender:
        """A member's :class:`Lender` figures for a flavor (limit 0 without a quota)."""
        quota = self.quotas.get((team_id, flavor_id))
        return Lender(self.slugs.get(team_id, ""), quota.limit if quota else 0,
                      self.usage.get((team_id, flavor_id), 0), quota.lending_limit if quota else None)

    def lendable(self, flavor_id: int) -> int:
        """What the members put into the cohort's pool for a flavor (the sum of their :attr:`Lender.lends`)."""
        return sum(self.member(team_id, flavor_id).lends for team_id in self.slugs)

    def borrowed(self, team_id: int, flavor_id: int, adding: int = 0) -> int:
        """Units of a flavor the member holds above its nominal quota (holding ``adding`` more)."""
        member = self.member(team_id, flavor_id)
        return max(0, member.in_use + adding - member.limit)

    def lenders(self, team_id: int, flavor_id: int) -> tuple[Lender, ...]:
        """The other members' figures for a flavor (those with a quota of it or units of it in use)."""
        lenders = []
        for member, slug in sorted(self.slugs.items(), key=lambda item: item[1]):
            quota, used = self.quotas.get((member, flavor_id)), self.usage.get((member, flavor_id), 0)
            if member != team_id and (quota is not None or used):
                lenders.append(Lender(slug, quota.limit if quota else 0, used, quota.lending_limit if quota else None))
        return tuple(lenders)


def cohort_id_of(team) -> int | None:
    """The id of the team's cohort, or None outside any."""
    return TeamSharing.objects.filter(team_id=team.pk).values_list("cohort_id", flat=True).first()


def cohort_figures(cohort_id: int | None) -> CohortFigures | None:
    """:class:`CohortFigures` of a cohort (None for None)."""
    if cohort_id is None:
        return None
    members = list(TeamSharing.objects.filter(cohort_id=cohort_id).values_list("team_id", "team__slug", "fair_weight"))
    slugs = {team_id: slug for team_id, slug, _weight in members}
    quotas = {(q.team_id, q.flavor_id): q for q in TeamQuota.objects.filter(team_id__in=slugs)}
    usage = {key: units for key, (units, _borrowed)
             in Reservation.objects.held().filter(team_id__in=slugs).units_by_team_and_flavor().items()}
    return CohortFigures(slugs, quotas, usage, {team_id: weight for team_id, _slug, weight in members})


def lock_admission(team) -> int | None:
    """Take what admission in ``team`` locks, in the one order: the team lock
    (:func:`teams.services.lock_team`), then, for a team in a cohort, the cohort's row
    (``FOR NO KEY UPDATE``). Returns the cohort's id (None outside a cohort).

    Why this order: a team outside any cohort keeps exactly today's path (the team lock is
    its first statement and the membership is read under it, in admit's facts statement). It
    cannot deadlock: whoever holds a cohort's lock never waits for a team's
    (:func:`_admit_waiting_in_cohort` takes other members' team locks with ``SKIP LOCKED``),
    and several team locks are only ever taken by id. Membership changes take the team locks,
    so the cohort read under the team lock stays true until commit. Taking it twice is free.
    """
    lock_team(team)
    cohort_id = cohort_id_of(team)
    if cohort_id is not None:
        _lock_cohort(cohort_id)
    return cohort_id


def _lock_cohort(cohort_id: int) -> None:
    list(Cohort.objects.select_for_update(no_key=True).filter(pk=cohort_id).values_list("pk", flat=True))


def flavor_quota(flavor: GpuFlavor | None, quota: TeamQuota | None,
                  cohort: CohortFigures | None = None, team_id: int | None = None) -> FlavorQuota:
    """The :class:`FlavorQuota` facts of a flavor and the team's quota row (with its cohort's lenders)."""
    if flavor is None:
        return FlavorQuota(exists=False)
    return FlavorQuota(active=flavor.usable, max_units_per_node=flavor.max_units_per_node,
                       limit=quota.limit if quota is not None else None,
                       borrowing_limit=quota.borrowing_limit if quota is not None else None,
                       lending_limit=quota.lending_limit if quota is not None else None,
                       lenders=cohort.lenders(team_id, flavor.pk) if cohort is not None else None)


class ClusterWaits:
    """Why no cluster can take new work of a flavor now (:func:`cluster.placement.no_usable_cluster`),
    for :func:`decide`'s ``no_cluster``: asked per flavor and capacity type, the clusters read once
    (:func:`fleet.services.recorded_offers`, one query, on the first question) — so a queue of
    any length costs one read per pass."""

    def __init__(self) -> None:
        self._offers: list[ClusterOffer] | None = None
        self._found: dict[tuple[int, bool], str] = {}

    def all_ready(self) -> bool:
        """Every cluster takes new work: nothing waits for one (no flavor needs reading to know)."""
        if self._offers is None:
            self._offers = fleet.recorded_offers()
        return all(offer.state in PLACEABLE_STATES for offer in self._offers)

    def __call__(self, flavor: GpuFlavor | None, spot: bool) -> str:
        if flavor is None or self.all_ready():
            return ""
        key = (flavor.pk, spot)
        if key not in self._found:
            self._found[key] = no_usable_cluster(flavor.to_spec(), spot, self._offers)
        return self._found[key]


def budget_state(budget: TeamBudget | None, spent: Decimal, committed: Decimal, now: datetime) -> BudgetState:
    """The :class:`BudgetState` of a team's budget row (None: no budget) with its month's figures."""
    if budget is None:
        return BudgetState(None, spent, settings.SLIPWAY_CURRENCY, committed, hours_left_in_month(now))
    return BudgetState(budget.monthly_limit, spent, budget.currency, committed, hours_left_in_month(now),
                       budget.alert_threshold_percent)


def _budget_state(team) -> BudgetState | None:
    """The team's budget and month-to-date spend (:func:`quotas.ledger.month_spend`), or None without a budget."""
    budget = TeamBudget.objects.filter(team=team).first()
    if budget is None:
        return None
    now = timezone.now()
    return budget_state(budget, month_spend([team.pk], now)[team.pk].spent, committed(team.pk, now), now)


def units_in_use(team=None, flavor_id: int | None = None) -> dict[int, int]:
    """``{flavor id: units}`` the team holds now (every team's when None; one flavor's when given), one query.

    Units in use are the units of the active (unreleased) reservations: the one figure
    :func:`decide` compares with limits, and that quota pages, the API, the Capacity page and
    burst scaling show. (Admission's hot path reads the same sum in its facts statement.)
    """
    held = Reservation.objects.held()
    if team is not None:
        held = held.filter(team=team)
    if flavor_id is not None:
        held = held.filter(flavor_id=flavor_id)
    return held.units_by_flavor()


def units_held_by_team() -> dict[tuple[int, int], tuple[int, int]]:
    """``{(team id, flavor id): (units in use, borrowed units)}`` of every team, one query:
    :func:`units_in_use` of all teams at once, with the part of it their cohorts lent."""
    return Reservation.objects.held().units_by_team_and_flavor()


def in_use_of_row():
    """:func:`units_in_use` of each row's team and flavor, as an annotation (a correlated subquery):
    for lists of quota rows (the admin console) without a query per row."""
    units = (Reservation.objects.held().filter(team=OuterRef("team"), flavor=OuterRef("flavor"))
             .order_by().values("team").annotate(total=Sum("units")).values("total"))
    return Coalesce(Subquery(units, output_field=IntegerField()), Value(0))


def borrowable(team, quotas: dict[int, TeamQuota], in_use: dict[int, int]) -> dict[int, int]:
    """``{flavor id: units}`` the team's cohort could lend it now, per flavor of ``quotas``
    (:func:`team_quotas`) holding ``in_use`` (:func:`units_in_use`); {} outside a cohort."""
    cohort = cohort_of_quotas(quotas)
    if cohort is None:
        return {}
    return {fid: flavor_quota(quota.flavor, quota, cohort, team.pk).borrowable(in_use.get(fid, 0))
            for fid, quota in quotas.items()}


def borrowed_units(refs: list[str]) -> dict[str, int]:
    """``{ref: borrowed units}`` of the held reservations of ``refs`` that borrow any (one query)."""
    return Reservation.objects.held().borrowed_by_ref(refs)


def borrowed_units_of(ref):
    """:func:`borrowed_units` of each row whose ref is the expression ``ref``, as an annotation (a
    correlated subquery on the held reservation's unique ref): lists without a query more."""
    held = Reservation.objects.held().filter(ref=ref).values("borrowed_units")[:1]
    return Coalesce(Subquery(held, output_field=IntegerField()), Value(0))


def _in_use(team, flavor_id: int) -> int:
    return units_in_use(team, flavor_id).get(flavor_id, 0)


# -- the hot path in SQL -------------------------------------------------------------------
#
# admit() runs on every submission and holds the team's lock while it runs, so its three
# statements (and release()'s update) are plain SQL: compiling them with the ORM cost ~5 ms
# of CPU per admission, which under concurrency outweighed the database work itself and cut
# throughput by a factor of five (bench/admission.py measures it).


@lru_cache(maxsize=4)
def _hot_sql(vendor: str) -> tuple[str, str, str]:
    """The facts, insert and release statements for ``vendor`` (table names from the models)."""
    # Values always travel as parameters; only table and column names are formatted in.
    q = connection.ops.quote_name
    quota, flavor, res, queue, budget, sharing, cluster = (
        q(model._meta.db_table)
        for model in (TeamQuota, GpuFlavor, Reservation, QueuedRequest, TeamBudget, TeamSharing, Cluster)
    )
    facts = (  # f.active: GpuFlavor.usable, read in the same round trip; the team's cohort too
        f"SELECT f.id, f.active, f.max_units_per_node, tq.{q('limit')}, tq.borrowing_limit, tq.lending_limit,"  # noqa: S608 - only quoted model table names are interpolated
        f" (SELECT cohort_id FROM {sharing} WHERE team_id = %(team)s),"
        f" EXISTS(SELECT 1 FROM {res} WHERE ref = %(ref)s AND released_at IS NULL),"
        f" EXISTS(SELECT 1 FROM {queue} WHERE ref = %(ref)s),"
        f" (SELECT COALESCE(SUM(units), 0) FROM {res}"
        f"  WHERE team_id = %(team)s AND flavor_id = f.id AND released_at IS NULL),"
        f" b.monthly_limit, b.currency, b.alert_threshold_percent,"
        # A budgeted team's ledger rows this month: month_spend's closed part (a round trip less under the lock).
        f" CASE WHEN b.monthly_limit IS NULL THEN NULL ELSE {closed_spend_subquery(q, '%(team)s', '%(since)s')} END,"
        # What bounds committed money (see admit): every unit the team holds, the dearest price any
        # work can be quoted or charged (a cluster's own price included: quotas.pricing).
        f" (SELECT COALESCE(SUM(units), 0) FROM {res} WHERE team_id = %(team)s AND released_at IS NULL),"
        f" {dearest_sql(q, flavor)},"
        # Whether any cluster may take no new work (see admit): not the rule, only when to ask it.
        f" EXISTS(SELECT 1 FROM {cluster} WHERE draining OR health <> %(ready)s)"
        f" FROM (SELECT 1 AS one) AS one"
        f" LEFT JOIN {flavor} f ON f.name = %(flavor)s"
        f" LEFT JOIN {quota} tq ON tq.flavor_id = f.id AND tq.team_id = %(team)s"
        f" LEFT JOIN {budget} b ON b.team_id = %(team)s"
    )
    insert = (f"INSERT INTO {res} (team_id, ref, flavor_id, units, units_per_node, priority, spot, description,"  # noqa: S608 - only quoted model table names are interpolated
              f" borrowed_units, created_at) VALUES (%(team)s, %(ref)s, %(flavor)s, %(units)s, %(per_node)s,"
              f" %(priority)s, %(spot)s, %(description)s, %(borrowed)s, %(now)s)")
    release = f"UPDATE {res} SET released_at = %(now)s WHERE ref = %(ref)s AND released_at IS NULL"  # noqa: S608
    return facts, insert, release


def _request_of(entry: QueuedRequest | Reservation) -> ResourceRequest:
    """A queue entry's request as submitted (priced as it was); a reservation's unpriced (what a resize asks)."""
    request = ResourceRequest(flavor=entry.flavor.name, units=entry.units, units_per_node=entry.units_per_node,
                              priority=Priority.from_rank(entry.priority), spot=entry.spot,
                              description=entry.description)
    if isinstance(entry, QueuedRequest):
        request = dataclasses.replace(request, estimated_cost=entry.estimated_cost, cost_per_hour=entry.cost_per_hour,
                                      may_borrow=entry.may_borrow)
    return request


def _reservation_for(team, ref: str, flavor: GpuFlavor, request: ResourceRequest, borrowed: int = 0) -> Reservation:
    return Reservation(team=team, ref=ref, flavor=flavor, units=request.units, units_per_node=request.units_per_node,
                       priority=Priority(request.priority).rank, spot=request.spot,
                       description=request.description[:200], borrowed_units=borrowed)


# -- the transactional entry points --------------------------------------------------------


def admit(team, request: ResourceRequest, ref: str) -> Decision:
    """Admit, queue or reject ``request`` for workload ``ref`` of ``team``, atomically.

    Nests in the caller's transaction, so the caller's own row and the reservation commit
    together. Admitting a ref that is already admitted or queued returns that outcome again
    without writing anything.
    """
    started = time.perf_counter()
    facts_sql, insert_sql, _ = _hot_sql(connection.vendor)
    # No savepoint of its own (two statements less on every submission): an error here fails
    # the caller's transaction as a whole, which is what every caller wants — the workload row
    # written just before must not commit without its admission.
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        # 1. Serialise admissions of this team (the team lock). Everything read below is
        #    read *after* the lock is granted, by a new statement: under READ COMMITTED a
        #    statement sees what was committed before it started, so only a later statement
        #    sees the reservations of whoever held the lock before us.
        lock_team(team)
        # 2. Every fact in one round trip: the flavor and the team's limit for it, is the ref
        #    already admitted or queued, the units of the flavor in use, the budget, and what
        #    bounds committed money, and a budgeted team's ledger rows this month. Its
        #    month-to-date spend is then the ledger's one figure (month_spend: the open segments).
        now = timezone.now()
        cursor.execute(facts_sql, {"ref": ref, "team": team.pk, "flavor": request.flavor, "ready": Health.READY,
                                   "since": connection.ops.adapt_datetimefield_value(month_start(now))})
        (flavor_id, active, max_per_node, limit, borrowing_limit, lending_limit, member_of, admitted, queued, usage,
         budget_limit, currency, threshold, closed, held_units, dearest, some_not_ready) = cursor.fetchone()
        if admitted:
            return Decision(Outcome.ADMIT, Reason.ADMITTED, f"already admitted: {ref}")
        if queued:
            return queue_decision(team, ref)

        # 3. Decide. A team in a cohort then takes the cohort's lock (lock_admission's order:
        #    team, then cohort) and reads every member's figures under it, as a new statement,
        #    so two members never both borrow the same idle unit.
        lenders = None
        if member_of is not None:
            _lock_cohort(member_of)
            if flavor_id is not None:
                cohort = cohort_figures(member_of)
                lenders = cohort.lenders(team.pk, flavor_id)
                usage = cohort.usage.get((team.pk, flavor_id), 0)
        facts = (FlavorQuota(exists=False) if flavor_id is None
                 else FlavorQuota(active=bool(active), max_units_per_node=max_per_node, limit=limit,
                                  borrowing_limit=borrowing_limit, lending_limit=lending_limit, lenders=lenders))
        budget = None
        if budget_limit is not None:
            # Month-to-date spend: the ledger's closed rows plus what runs now, up to this instant.
            # Committed money (admitted work's estimated cost still to come) is first taken at
            # a bound: each workload commits at most its reserved units, at its own price, to
            # the month's end, so every held unit at the dearest price never commits less.
            bound = cost_ahead(sql_decimal(dearest) or ZERO, int(held_units), now, month_end(now))
            spent = month_spend([team.pk], now, {team.pk: closed})[team.pk].spent
            budget = BudgetState(sql_decimal(budget_limit), spent, currency, bound, hours_left_in_month(now), threshold)
        decision = decide(request, int(usage), facts, budget)
        if decision.reason == Reason.WAITING_FOR_BUDGET:
            # More committed money only ever queues: an admission at the bound stands at the
            # exact figure, and only "waiting for budget" needs that figure read (one statement).
            budget = dataclasses.replace(budget, committed=committed(team.pk, now))
            decision = decide(request, int(usage), facts, budget)
        if decision.admitted and some_not_ready:
            # Only while some cluster is not plainly ready (a superset of the clusters that take
            # no new work, read with the facts) are the clusters and the flavor read, and
            # ClusterWaits applies the rule — every other admission stays at its statements.
            no_cluster = ClusterWaits()(GpuFlavor.objects.get(pk=flavor_id), request.spot)
            decision = decide(request, int(usage), facts, budget, no_cluster)

        # 4. Write what was decided.
        if decision.admitted:
            cursor.execute(insert_sql, {
                "team": team.pk, "ref": ref, "flavor": flavor_id, "units": request.units,
                "per_node": request.units_per_node, "priority": Priority(request.priority).rank,
                "spot": request.spot, "description": request.description[:200], "borrowed": decision.borrows,
                "now": connection.ops.adapt_datetimefield_value(now)})
        elif decision.queued:
            entry = QueuedRequest.objects.create(
                team=team, ref=ref, flavor_id=flavor_id, units=request.units, units_per_node=request.units_per_node,
                priority=Priority(request.priority).rank, spot=request.spot, description=request.description[:200],
                estimated_cost=request.estimated_cost, cost_per_hour=request.cost_per_hour,
                may_borrow=request.may_borrow)
            decision = Decision(decision.outcome, decision.reason, decision.message, queue_position(team, entry))
        # A replayed ref returned above, uncounted: each request counts once, as first decided.
        metrics.count_admission(decision.label, time.perf_counter() - started)
        return decision


def release(ref: str) -> bool:
    """Release ``ref``'s reservation and drop its queue entry. Idempotent; returns whether anything changed.

    Call :func:`admit_waiting` for the team afterwards (the reconciler does every cycle) so
    queued work can use the freed units.
    """
    # 1. The common case, one statement: the conditional update is the idempotence (a
    #    released row no longer matches). A ref is either reserved or queued, never both.
    if _release_reservation(ref):
        return True
    # 2. Not reserved: maybe queued. If admit_waiting is admitting it right now, this DELETE
    #    waits for that transaction and then finds nothing...
    if QueuedRequest.objects.filter(ref=ref).delete()[0]:
        return True
    # 3. ...and the reservation it wrote is visible to a new statement: release that too.
    return _release_reservation(ref)


def _release_reservation(ref: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(_hot_sql(connection.vendor)[2],
                       {"ref": ref, "now": connection.ops.adapt_datetimefield_value(timezone.now())})
        return cursor.rowcount > 0


def requeue(team, ref: str, request: ResourceRequest, queued_since: datetime) -> bool:
    """Give back ``ref``'s reservation and put its request back in the queue at its old place.

    For preempted work (DESIGN §9): ``queued_since`` is when it was first submitted, so it waits
    ahead of everything of its priority submitted after it. Under the team's admission lock, in
    the caller's transaction; returns False when ``ref`` held no reservation (requeued already).
    """
    with transaction.atomic():
        lock_admission(team)
        if not _release_reservation(ref):
            return False
        flavor = GpuFlavor.objects.get(name=request.flavor)
        entry = QueuedRequest.objects.create(
            team=team, ref=ref, flavor=flavor, units=request.units, units_per_node=request.units_per_node,
            priority=Priority(request.priority).rank, spot=request.spot, description=request.description[:200],
            estimated_cost=request.estimated_cost, cost_per_hour=request.cost_per_hour, may_borrow=request.may_borrow)
        QueuedRequest.objects.filter(pk=entry.pk).update(created_at=queued_since)  # auto_now_add set "now"
    return True


def resize(team, ref: str, units: int, burst: bool = False) -> Decision:
    """Grow or shrink ``ref``'s active reservation to ``units``, under the team's admission lock.

    Growing is decided by :func:`decide` as if the reservation were requested anew at its new
    size, with its current units counted as free: what does not fit now (quota, budget) is
    refused with the reason and changes nothing — a resize never queues. Shrinking always
    succeeds. An inference endpoint's burst replicas are granted (``burst``: held back past the
    budget's alert threshold, :attr:`ResourceRequest.burst`) and reclaimed this way.
    Raises ``LookupError`` when ``ref`` holds no reservation, ``ValueError`` for ``units < 1``.
    """
    if units < 1:
        raise ValueError("a reservation holds at least one unit; release it instead")
    with transaction.atomic():
        cohort = cohort_figures(lock_admission(team))
        reservation = Reservation.objects.held().select_related("flavor").filter(team=team, ref=ref).first()
        if reservation is None:
            raise LookupError(f"{ref} holds no reservation in team {team.slug}")
        current = reservation.units
        if units <= current:
            if units < current:
                # Shrinking gives borrowed units back first.
                Reservation.objects.filter(pk=reservation.pk).update(
                    units=units, borrowed_units=max(0, reservation.borrowed_units - (current - units)))
            return Decision(Outcome.ADMIT, Reason.ADMITTED, f"{ref} now holds {units}\u00d7 {reservation.flavor.name}")
        decision, facts, usage = _growth(team, reservation, units, burst, cohort)
        if decision.admitted:
            grown = facts.borrows(usage + current, units - current) if cohort is not None else 0
            Reservation.objects.filter(pk=reservation.pk).update(
                units=units, borrowed_units=reservation.borrowed_units + grown)
            return dataclasses.replace(decision, borrows=reservation.borrowed_units + grown)
        # A resize is answered now or never: "waiting for quota" is a refusal with that reason.
        return Decision(Outcome.REJECT, decision.reason, decision.message)


def _growth(team, reservation: Reservation, units: int, burst: bool,
            cohort: CohortFigures | None) -> tuple[Decision, FlavorQuota, int]:
    """:func:`decide`'s word on growing ``reservation`` to ``units``: the request anew at its new
    size, its current units counted as free. With the facts and the usage it was asked with."""
    # Only burst may borrow: an endpoint's minimum grown by a new base never does.
    request = dataclasses.replace(_request_of(reservation), units=units, burst=burst, may_borrow=burst)
    usage = _in_use(team, reservation.flavor_id) - reservation.units
    quota = TeamQuota.objects.filter(team=team, flavor=reservation.flavor).first()
    facts = flavor_quota(reservation.flavor, quota, cohort, team.pk)
    return decide(request, usage, facts, _budget_state(team)), facts, usage


def preview_resize(team, ref: str, units: int, burst: bool = False) -> Decision:
    """What :func:`resize` would decide for ``ref`` grown to ``units`` right now, without locking or writing.

    The same question as the resize itself (:func:`_growth`), so a preview of burst says what
    the endpoint would really be granted. Raises ``LookupError`` when ``ref`` holds no reservation.
    """
    reservation = Reservation.objects.held().select_related("flavor").filter(team=team, ref=ref).first()
    if reservation is None:
        raise LookupError(f"{ref} holds no reservation in team {team.slug}")
    if units <= reservation.units:
        return Decision(Outcome.ADMIT, Reason.ADMITTED, f"{ref} holds {reservation.units}\u00d7 {reservation.flavor.name}")
    return _growth(team, reservation, units, burst, cohort_figures(cohort_id_of(team)))[0]


def admit_waiting(team) -> list[str]:
    """Admit the team's queued requests that fit now, in queue order; returns the admitted refs.

    For each one ``workload_admitted`` is sent inside this transaction, so the owner's state
    change commits (or rolls back) together with the reservation.
    """
    with transaction.atomic():
        cohort_id = lock_admission(team)
        if cohort_id is not None:
            return _admit_waiting_in_cohort(cohort_id)
        quotas = team_quotas(team)
        entries = list(QueuedRequest.objects.filter(team=team).select_related("flavor")
                       .order_by(*QueuedRequest.QUEUE_ORDER))
        if not entries:
            return []
        order = queue_order(entries, units_in_use(team), quotas, _budget_state(team), ClusterWaits())
        if not order:
            return []
        admitted = [entry for entry, _decision in order]
        labels = [decision.label for _entry, decision in order]
        Reservation.objects.bulk_create([_reservation_for(team, e.ref, e.flavor, _request_of(e)) for e in admitted])
        QueuedRequest.objects.filter(pk__in=[e.pk for e in admitted]).delete()
        for entry, label in zip(admitted, labels, strict=True):
            workload_admitted.send(sender=None, ref=entry.ref, team=team)
            metrics.count_admission(label)
        return [e.ref for e in admitted]


def queue_order(entries: list[QueuedRequest], usage: dict[int, int], quotas: dict[int, TeamQuota],
                budget: BudgetState | None, waits: ClusterWaits | None = None) -> list[tuple[QueuedRequest, Decision]]:
    """``(entry, decision)`` of a team's queued ``entries`` (outside any cohort, in queue order)
    admitted now, in the order admitted; pure: ``usage`` ({flavor id: units}) is updated as they are.

    Best-effort in queue order, each decided by :func:`decide`: a later, smaller request that
    fits passes one that does not. :func:`admit_waiting` admits by it, and the start estimates
    (:mod:`workloads.estimates`) simulate the queue with it. ``waits``: what the clusters say
    (:class:`ClusterWaits`; None: the simulation's assumption that a cluster takes the work).
    """
    admitted = []
    for entry in entries:
        decision = decide(_request_of(entry), usage.get(entry.flavor_id, 0),
                          flavor_quota(entry.flavor, quotas.get(entry.flavor_id)), budget,
                          waits(entry.flavor, entry.spot) if waits is not None else "")
        if decision.admitted:
            # Best-effort: keep scanning, a later smaller request may still fit.
            usage[entry.flavor_id] = usage.get(entry.flavor_id, 0) + entry.units
            admitted.append((entry, decision))
    return admitted


def _admit_waiting_in_cohort(cohort_id: int) -> list[str]:
    """:func:`admit_waiting` for a cohort (its lock held): every member's queue, as one.

    Units one member frees may be borrowed by another, so the members' queues are taken
    together by fair share (:func:`quotas.fairshare.tournament`): of the entries that fit now,
    work within its own team's nominal quota goes before any that borrows (whatever their
    queue order: units a team reclaimed go to it, not back to the borrower they were taken
    from — no preemption loop, :mod:`quotas.reclaim`); then the one whose team's share after
    admitting it is lowest, then the higher priority, then the older entry. An entry that
    borrows nothing adds nothing to its team's share. Each entry is decided (by :func:`decide`,
    the one rule of fit) against the cohort's figures as updated by the admissions before it.
    The other members' team locks are taken only where free (``SKIP LOCKED``: holding a cohort's lock, nobody waits for a team's,
    :func:`lock_admission`), so each admitted entry's team is held.
    """
    # The members whose team lock is free now (or ours): a member busy deciding elsewhere is
    # skipped, never waited for — its own path re-admits its queue when it ends (at the latest
    # the next reconcile cycle does).
    members = set(Team.objects.select_for_update(no_key=True, skip_locked=True, of=("self",))
                  .filter(sharing__cohort_id=cohort_id).values_list("pk", flat=True))
    entries = list(QueuedRequest.objects.filter(team_id__in=members).select_related("flavor", "team")
                   .order_by(*QueuedRequest.QUEUE_ORDER))
    if not entries:
        return []
    cohort = cohort_figures(cohort_id)
    remembered = fairshare.remembered_units(list(cohort.slugs), timezone.now())
    budgets: dict[int, BudgetState | None] = {}
    for entry in entries:
        if entry.team_id not in budgets:
            budgets[entry.team_id] = _budget_state(entry.team)
    order = fair_order(entries, cohort, budgets, remembered, ClusterWaits())
    if not order:
        return []
    Reservation.objects.bulk_create([_reservation_for(e.team, e.ref, e.flavor, _request_of(e), borrowed)
                                     for e, borrowed in order])
    QueuedRequest.objects.filter(pk__in=[e.pk for e, _ in order]).delete()
    for entry, borrowed in order:
        workload_admitted.send(sender=None, ref=entry.ref, team=entry.team)
        metrics.count_admission(Decision(Outcome.ADMIT, Reason.ADMITTED, "", borrows=borrowed).label)
    return [e.ref for e, _ in order]


def fair_order(entries: list[QueuedRequest], cohort: CohortFigures, budgets: dict[int, BudgetState | None],
               remembered: dict[int, float], waits: ClusterWaits | None = None) -> list[tuple[QueuedRequest, int]]:
    """``(entry, borrowed units)`` of the cohort's queued ``entries`` admitted now, in the order
    admitted (pure: ``cohort.usage`` is updated as they are). The fair-sharing tournament over
    :func:`decide`, nominal work first (see :func:`_admit_waiting_in_cohort`); ``remembered`` is
    :func:`quotas.fairshare.remembered_units` of the members; ``waits`` what the clusters say
    (:class:`ClusterWaits`; None: every cluster takes new work, as a replay of quotas alone assumes)."""
    def decision(entry):
        key = (entry.team_id, entry.flavor_id)
        return decide(_request_of(entry), cohort.usage.get(key, 0),
                      flavor_quota(entry.flavor, cohort.quotas.get(key), cohort, entry.team_id),
                      budgets.get(entry.team_id), waits(entry.flavor, entry.spot) if waits is not None else "")

    def rank(entry):
        borrows = cohort.borrowed(entry.team_id, entry.flavor_id, entry.units) > cohort.borrowed(
            entry.team_id, entry.flavor_id)
        after = fairshare.share_of(cohort, entry.team_id, entry.flavor_id, remembered, entry.units)
        return (borrows, after, -entry.priority, entry.created_at, entry.pk)

    borrows: dict[int, int] = {}

    def admit(entry):
        key = (entry.team_id, entry.flavor_id)
        borrows[id(entry)] = decision(entry).borrows
        cohort.usage[key] = cohort.usage.get(key, 0) + entry.units

    admitted = fairshare.tournament(entries, lambda entry: decision(entry).admitted, rank, admit,
                                    lambda entry: entry.flavor_id)
    return [(entry, borrows[id(entry)]) for entry in admitted]


# -- the queue, read-only ------------------------------------------------------------------


def units_of(team, flavor_id: int) -> tuple[int, int]:
    """``(in use, limit)`` of the team's units of a flavor right now (limit 0 without a quota; no lock)."""
    limit = TeamQuota.objects.filter(team=team, flavor_id=flavor_id).values_list("limit", flat=True).first() or 0
    return _in_use(team, flavor_id), limit


def _ahead_of(entry: QueuedRequest) -> Q:
    """Entries admitted before ``entry``: the one tie rule of the queue (:attr:`QueuedRequest.QUEUE_ORDER`).

    Higher priority first; within a priority the earlier submission (``created_at``), and of two
    submitted at the same instant the one recorded first (``pk``). An entry not submitted yet
    (a preview's) is behind everything of its priority, where its submission would land.
    """
    if entry.pk is None:
        return Q(priority__gte=entry.priority)
    return (Q(priority__gt=entry.priority)
            | Q(priority=entry.priority, created_at__lt=entry.created_at)
            | Q(priority=entry.priority, created_at=entry.created_at, pk__lt=entry.pk))


def queue_position(team, entry: QueuedRequest) -> int:
    """``entry``'s 1-based place in the team's queue (one query); an unsaved entry's is where it would land."""
    return QueuedRequest.objects.filter(team=team).filter(_ahead_of(entry)).count() + 1


def queue_positions(team) -> dict[str, int]:
    """``{ref: position}`` of the team's queued workloads, 1-based in admission order (one query)."""
    refs = QueuedRequest.objects.filter(team=team).order_by(*QueuedRequest.QUEUE_ORDER).values_list("ref", flat=True)
    return {ref: i for i, ref in enumerate(refs, start=1)}


def queue_reasons(team) -> dict[str, str]:
    """``{ref: plain-words reason}`` for every queued workload of the team, from current figures."""
    entries = list(QueuedRequest.objects.filter(team=team).select_related("flavor")
                   .order_by(*QueuedRequest.QUEUE_ORDER))
    if not entries:
        return {}
    quotas = team_quotas(team)
    usage = units_in_use(team)
    budget = _budget_state(team)
    cohort = cohort_of_quotas(quotas)
    waits = ClusterWaits()
    reasons = {}
    for entry in entries:
        decision = decide(_request_of(entry), usage.get(entry.flavor_id, 0),
                          flavor_quota(entry.flavor, quotas.get(entry.flavor_id), cohort, team.pk), budget,
                          waits(entry.flavor, entry.spot))
        if decision.admitted:
            # It fits now; the next admit_waiting (at the latest the next reconcile) takes it.
            reasons[entry.ref] = f"about to be admitted: {entry.units}\u00d7 {entry.flavor.name} fit now"
        else:
            reasons[entry.ref] = decision.message
    return reasons


#: Reasons that hold work back for money: no quota freeing up starts it.
MONEY_REASONS = (Reason.WAITING_FOR_BUDGET, Reason.BUDGET_EXHAUSTED)


def held_beyond_quota(team, candidate: tuple[str, ResourceRequest] | None = None,
                      entries: list[QueuedRequest] | None = None,
                      quotas: dict[int, TeamQuota] | None = None) -> dict[str, Decision]:
    """``{ref: decision}`` of the queued work (and of ``candidate``, a request not submitted yet)
    that would still not be admitted were its flavor's quota all free: waiting for money, for a
    cluster that takes new work, or asking for more than the team may ever hold. Work not named here waits for quota alone.

    For start estimates (:mod:`workloads.forecast`): such work is not ahead of anyone (the
    queue is best-effort, :func:`admit_waiting` passes it), and no end of other work starts it.
    ``entries`` (with their flavors) and ``quotas`` (:func:`team_quotas`) are the team's when the
    caller read them already.
    """
    if entries is None:
        entries = list(QueuedRequest.objects.filter(team=team).select_related("flavor"))
    if not entries and candidate is None:
        return {}
    quotas = team_quotas(team) if quotas is None else quotas
    budget = _budget_state(team)
    requests = [(entry.ref, _request_of(entry), entry.flavor) for entry in entries]
    if candidate is not None:
        ref, request = candidate
        flavor = GpuFlavor.objects.filter(name=request.flavor).first()
        requests.append((ref, request, flavor))
    cohort = cohort_of_quotas(quotas)
    waits = ClusterWaits()
    held = {}
    for ref, request, flavor in requests:
        quota = quotas.get(flavor.pk) if flavor is not None else None
        decision = decide(request, 0, flavor_quota(flavor, quota, cohort, team.pk).idle(), budget,
                          waits(flavor, request.spot))
        if not decision.admitted:
            held[ref] = decision
    return held


def queue_reason(team, ref: str) -> str:
    """The current reason ``ref`` waits, or "" when it is not queued."""
    return queue_reasons(team).get(ref, "")


def queue_decision(team, ref: str) -> Decision:
    """The queued Decision of an already-queued ``ref`` (its current reason and position)."""
    return Decision(Outcome.QUEUE, Reason.WAITING_FOR_QUOTA, queue_reason(team, ref),
                    queue_positions(team).get(ref))


def preview(team, request: ResourceRequest) -> Decision:
    """What :func:`admit` would decide for ``request`` right now, without locking or writing.

    For the portal's live "would it start now?" preview; the real decision is :func:`admit`'s.
    """
    quota = _quota_rows().filter(team=team, flavor__name=request.flavor).first()
    flavor = quota.flavor if quota is not None else GpuFlavor.objects.filter(name=request.flavor).first()
    usage = _in_use(team, flavor.pk) if quota is not None else 0
    budget = _budget_state(team) if quota is not None else None
    cohort = cohort_figures(quota.cohort_of_team) if quota is not None else None
    return decide(request, usage, flavor_quota(flavor, quota, cohort, team.pk), budget,
                  ClusterWaits()(flavor, request.spot))
