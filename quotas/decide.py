"""The admission rule, pure: :func:`decide` is the only comparison of a team's usage with its limits.

Given a request (:class:`ResourceRequest`), the units of its flavor the team holds, what the
flavor and the team's quota allow (:class:`FlavorQuota`, with its cohort's lenders) and the
team's month in money (:class:`billing.budget_rule.BudgetState`), :func:`decide` returns a :class:`Decision`: admit,
queue or reject, a reason constant and a message in plain words. Every rule lives here, so it is
tested table-driven, and a replay (the start estimates, ``bench/sharing.py``) asks the very rule
the portal admits by.

Pure: it reads no database, clock or setting. Whoever calls it reads the facts first
(:mod:`quotas.facts`), under the admission lock when it writes what was decided
(:mod:`quotas.admission`); this module imports neither.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from decimal import Decimal

from billing.budget_rule import BudgetState
from cluster.reasons import Reason
from core.formatting import format_amount
from core.money import ZERO
from core.priority import Priority
from quotas.constants import AdmissionCode, DecisionLabel, Outcome


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
    #: What its hold commits until its runtime limit or the month's end (:func:`billing.ledger.committed`):
    #: the units its kind guarantees (a run's all, an endpoint's minimum), 0 for work that commits nothing.
    committed_units: int = 0
    #: Its runtime limit in minutes (None: none), counted from its pods' start: where a commitment ends.
    limit_minutes: int | None = None
    #: Who asked: the user its open segment's cost is reported under (None: nobody in particular).
    user_id: int | None = None
    #: The framework of its distributed training ("" for work that is none): only clusters whose training API takes
    #: it can run it (:func:`cluster.training.takes`), so only they count when admission asks whether one may.
    training_framework: str = ""
    #: The id of its team's reservation it names (docs/reservations.md "Open or targeted"; None: none): it goes
    #: into that reservation's windows — first, in an open one — and while the reservation is not over it waits for
    #: them rather than starting on the quota (:attr:`FlavorQuota.reserved_named`).
    for_reservation: int | None = None

    def committed_cost(self, hours_left: Decimal) -> Decimal | None:
        """What admitting it commits this month, with ``hours_left`` until the month's end.

        The rule that never rewards leaving a runtime limit out: a request with a known end
        commits its estimated cost, but no more than it costs until the month's end; one
        without a known end (a run without a limit, an endpoint's minimum) commits what it
        costs until the month's end — the most any limit could commit this month. It is the
        figure :func:`billing.ledger.committed` counts for the workload once it is admitted.
        """
        if self.cost_per_hour is None:
            return self.estimated_cost
        to_month_end = self.cost_per_hour * max(hours_left, ZERO)
        return to_month_end if self.estimated_cost is None else min(self.estimated_cost, to_month_end)


@dataclass(frozen=True)
class Decision:
    outcome: str  # Outcome.ADMIT | QUEUE | REJECT
    #: Why: its code (an :class:`~quotas.constants.AdmissionCode`) for code, its words for people.
    reason: Reason
    position: int | None = None  # 1-based queue position when queued
    borrows: int = 0  # units of the request above the team's nominal quota, lent by its cohort
    #: Admitted into one of the team's reserved windows open now, on top of its nominal quota
    #: (docs/reservations.md "Inside the window"): its caller says which (billing.reserved.take).
    reserved: bool = False
    #: With ``borrows``: the cohort's other members that lend the flavor, who may take the units back.
    lent_by: tuple[str, ...] = ()

    @classmethod
    def of(cls, outcome: str, code: str, words: str, **rest) -> Decision:
        """A decision whose reason is ``code`` in ``words``."""
        return cls(outcome, Reason(code, words), **rest)

    @property
    def preemptible(self) -> bool:
        """Admitted with borrowed units: reclaim may take them back (docs/design.md "Sharing, preemption, clusters")."""
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
    #: The most units free in one of the team's reserved windows of the flavor open now: a request that
    #: fits one whole is admitted into it, on top of the quota (docs/reservations.md "Inside the window").
    reserved: int = 0
    #: The most units one of its windows of the flavor not over yet holds: work only such a window can
    #: hold waits for it instead of being refused.
    reserved_ahead: int = 0
    #: ``reserved`` and ``reserved_ahead`` are those of the reservation the request names, not over yet
    #: (:attr:`ResourceRequest.for_reservation`): it waits for that reservation's window rather than the quota.
    reserved_named: bool = False

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


def after_admitting(budget: BudgetState | None, request: ResourceRequest, decision: Decision) -> BudgetState | None:
    """``budget`` once ``request``, admitted by ``decision``, commits its money: what a pass over a queue decides the
    next entry against, so entries that each fit what the budget leaves are never all admitted past it together.

    Admitted work commits :meth:`ResourceRequest.committed_cost` (the figure :func:`billing.ledger.committed`
    counts for it once admitted); work admitted into a reserved window commits nothing of its own (the window's
    money was committed at booking), and neither does a request the budget does not weigh.
    """
    if budget is None or not decision.admitted or decision.reserved:
        return budget
    cost = request.committed_cost(budget.hours_left)
    if not cost:
        return budget
    return dataclasses.replace(budget, committed=budget.committed + cost)


def decide(request: ResourceRequest, usage: int, quota: FlavorQuota, budget: BudgetState | None = None,
           no_cluster: str = "") -> Decision:
    """Admit, queue or reject ``request`` given ``usage`` units of its flavor in use by the team.

    Checks run from "can never work" to "not now", so the message names the real obstacle.
    ``no_cluster`` is why no cluster can take new work of the flavor now ("" when one can:
    :class:`quotas.facts.ClusterWaits`); work that fits the team's quota and budget then waits for a cluster,
    the last check — quota or money, when they also hold it back, is what the team can act on.
    Money: a request waits for budget when what admitting it commits this month
    (:meth:`ResourceRequest.committed_cost`: without a runtime limit, its cost until the month's
    end) exceeds what the budget leaves after spent and committed money. More committed money
    only ever queues (:func:`quotas.admission.admit` relies on it to decide at a bound first).
    """
    name, units = request.flavor, request.units
    if not quota.exists:
        return Decision.of(Outcome.REJECT, AdmissionCode.UNKNOWN_FLAVOR, f"unknown GPU flavor {name!r}")
    if not quota.active:
        return Decision.of(Outcome.REJECT, AdmissionCode.INACTIVE_FLAVOR, f"GPU flavor {name} is no longer offered")
    if units < 1 or request.units_per_node < 1 or request.units_per_node > units:
        return Decision.of(Outcome.REJECT, AdmissionCode.INVALID_REQUEST,
                        f"invalid request: {units} units in total, {request.units_per_node} per worker")
    if request.burst and budget is not None and budget.alert:
        # Before the quota: no burst at all past the alert threshold. Not "never": it returns
        # when the month turns or an admin raises the budget.
        return Decision.of(Outcome.QUEUE, AdmissionCode.BUDGET_ALERT,
                        f"the month's spend passed {budget.alert_threshold_percent or 100}% of the budget")
    # The team's reserved windows (docs/reservations.md "Inside the window"): one open now holds the
    # request whole, on top of the quota; one not over yet will, so the request waits for it.
    into_window = not request.spot and units <= quota.reserved
    awaits_window = not request.spot and units <= max(quota.reserved, quota.reserved_ahead)
    in_cohort = quota.lenders is not None
    # In a cohort a nominal quota of 0 may still borrow; outside one it is no quota at all.
    if ((quota.limit is None) if in_cohort else not quota.limit) and not awaits_window:
        return Decision.of(Outcome.REJECT, AdmissionCode.NO_QUOTA_FOR_FLAVOR,
                        f"the team has no quota for {name}; ask a platform admin")
    if request.units_per_node > quota.max_units_per_node:
        return Decision.of(Outcome.REJECT, AdmissionCode.EXCEEDS_LARGEST_NODE,
                        f"needs {request.units_per_node}\u00d7 {name} per worker, "
                        f"but the largest node has {quota.max_units_per_node}")
    if into_window:
        # Before quota and money: the window's units are the team's on top of its quota, and their
        # money was committed at booking (its own work commits nothing more inside it).
        return Decision.of(Outcome.ADMIT, AdmissionCode.ADMITTED,
                        f"admitted into the team's reservation: {units}\u00d7 {name} of its "
                        f"{quota.reserved} reserved and free", reserved=True)
    if quota.reserved_named and awaits_window:
        # Work for a booking waits for its window (a held release run starts in it, not on the quota before it
        # and then outside it): the queue admits it when the window opens, or when the work in it ends.
        return Decision.of(Outcome.QUEUE, AdmissionCode.WAITING_FOR_QUOTA,
                        f"waiting for a window of the reservation it names ({quota.reserved_ahead}\u00d7 {name}; "
                        f"{quota.reserved} free in one now)")
    most = quota.most(request.may_borrow)
    if units > most and awaits_window:
        # Not "never": the team's window holds it when it opens (the queue admits it then).
        return Decision.of(Outcome.QUEUE, AdmissionCode.WAITING_FOR_QUOTA,
                        f"waiting for the team's reservation of {max(quota.reserved, quota.reserved_ahead)}\u00d7 {name}")
    if units > most:
        lend = f" and what its cohort can lend ({most - quota.limit})" if most > quota.limit else ""
        if in_cohort and not request.may_borrow and quota.most() > quota.limit:
            lend = "; a guaranteed minimum never borrows from the cohort"
        return Decision.of(Outcome.REJECT, AdmissionCode.EXCEEDS_QUOTA,
                        f"needs {units}\u00d7 {name}, more than the team's limit of {quota.limit}{lend}")
    if budget is not None and budget.exhausted:
        return Decision.of(Outcome.REJECT, AdmissionCode.BUDGET_EXHAUSTED,
                        f"monthly budget spent: {format_amount(budget.spent_month)} of "
                        f"{format_amount(budget.monthly_limit)} {budget.currency}")
    if units > quota.room(usage, request.may_borrow):
        message = f"waiting for quota: needs {units}\u00d7 {name}, {usage} of {quota.limit or 0} in use"
        if in_cohort:
            others = f" ({quota.lenders_text()})" if quota.lenders else ""
            message += f"; the cohort can lend {quota.borrowable(usage)}{others}"
            if not request.may_borrow:
                message += ", but a guaranteed minimum never borrows"
        return Decision.of(Outcome.QUEUE, AdmissionCode.WAITING_FOR_QUOTA, message)
    cost = request.committed_cost(budget.hours_left) if budget is not None else None
    if budget is not None and budget.monthly_limit is not None and cost is not None and cost > budget.left:
        # Not "never": it starts when an admin raises the budget, work ends early, or the month turns.
        # Without a known end it counts until the month's end (ResourceRequest.committed_cost), so
        # leaving the runtime limit out never starts a run that a limit would have queued.
        until = " until the month's end (no runtime limit)" if request.estimated_cost is None else ""
        return Decision.of(Outcome.QUEUE, AdmissionCode.WAITING_FOR_BUDGET,
                        f"waiting for budget: est. {format_amount(cost)}{until} would exceed the "
                        f"{format_amount(max(budget.left, ZERO))} {budget.currency} left this month")
    if no_cluster:
        # Not "never": a drained cluster made ready again, a lost one answering again, admits it.
        return Decision.of(Outcome.QUEUE, AdmissionCode.WAITING_FOR_CLUSTER, f"waiting: {no_cluster}")
    borrows = quota.borrows(usage, units) if in_cohort else 0
    lent = f", {borrows} borrowed from the cohort" if borrows else ""
    lent_by = tuple(m.team for m in quota.lenders if m.lends > 0) if borrows else ()
    return Decision.of(Outcome.ADMIT, AdmissionCode.ADMITTED,
                    f"admitted: {units}\u00d7 {name}, {usage + units} of {quota.limit or 0} now in use{lent}",
                    borrows=borrows, lent_by=lent_by)
