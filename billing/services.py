"""The billing app's public functions: a team's month in money for pages, the API and the reconcile
cycle's budget step, and the price changes staff make.

The budget's rule is :class:`billing.budget_rule.BudgetState`; spend and commitments are read from
the ledger and the quota holds (:mod:`billing.ledger`). A budget *change* re-runs admission, so it is
capacity's action (:func:`quotas.services.set_team_budget`), which audits it with
:func:`audit_budget_change`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

import core.backend
import fleet.services as fleet
from billing.budget_rule import BudgetState
from billing.events import budget_alert
from billing.ledger import MonthSpend, committed, committed_by_team, hours_left_in_month, month_spend, month_start
from billing.models import ClusterPrice, TeamBudget
from core.formatting import stored_amount
from fleet.models import GpuFlavor
from teams.models import AuditEvent, Team
from teams.services import audit

# -- a team's month in money ---------------------------------------------------------------


def budget_state(budget: TeamBudget | None, spent: Decimal, committed: Decimal, now: datetime) -> BudgetState:
    """The :class:`BudgetState` of a team's budget row (None: no budget) with its month's figures."""
    if budget is None:
        return BudgetState(None, spent, settings.SLIPWAY_CURRENCY, committed, hours_left_in_month(now))
    return BudgetState(budget.monthly_limit, spent, settings.SLIPWAY_CURRENCY, committed, hours_left_in_month(now),
                       budget.alert_threshold_percent)


def team_budget_state(team) -> BudgetState | None:
    """The team's budget and month-to-date spend (:func:`billing.ledger.month_spend`), or None without a budget."""
    budget = TeamBudget.objects.filter(team=team).first()
    if budget is None:
        return None
    now = timezone.now()
    return budget_state(budget, month_spend([team.pk], now)[team.pk].spent, committed(team.pk, now), now)


def budget_summary(team: Team, now: datetime | None = None) -> dict:
    """The team's month in money (docs/api.md ``budget``); limit None without a budget.

    ``committed``: estimated cost still to come this month from admitted work (runs to their
    runtime limit; runs without one and endpoint minimums to the month's end); ``burn_per_hour``: what runs now costs per
    hour; ``projected_month_end``: spent plus committed, the one projection, which the budget gate
    admits against (:attr:`billing.budget_rule.BudgetState.projected_month_end`); ``runs_out_at``:
    when that spends the budget, or None when it lasts the month (:meth:`~billing.budget_rule.BudgetState.runs_out_at`).
    """
    return budget_summaries([team.pk], now)[team.pk]


def budget_summaries(team_ids: list[int], now: datetime | None = None) -> dict[int, dict]:
    """:func:`budget_summary` of each team in ``team_ids``, computed together: five statements for any number.

    The reconcile cycle reads every budgeted team's month through it once (:func:`enforce_budgets`).
    """
    now = now or timezone.now()
    return _summaries(team_ids, {budget.team_id: budget for budget in TeamBudget.objects.filter(team_id__in=team_ids)},
                      now)


def _summaries(team_ids: list[int], budgets: dict[int, TeamBudget], now: datetime) -> dict[int, dict]:
    """:func:`budget_summaries` with the teams' budgets already read (four statements)."""
    spend = month_spend(team_ids, now)
    ahead = committed_by_team(team_ids, now)
    return {team_id: _summary(budgets.get(team_id), spend[team_id], ahead[team_id], now) for team_id in team_ids}


def _summary(budget: TeamBudget | None, spend: MonthSpend, ahead: Decimal, now: datetime) -> dict:
    """A team's month in money from its figures (see :func:`budget_summary`).

    ``left``, ``exhausted`` and ``alert`` are :class:`billing.budget_rule.BudgetState`'s, the rule
    admission decides by (``left`` is not part of the API's ``budget``).
    """
    state = budget_state(budget, spend.spent, ahead, now)
    spent, burn, limit = spend.spent, spend.burn_per_hour, state.monthly_limit
    summary = {"monthly_limit": limit, "spent_month": spent, "currency": state.currency,
               "alert_threshold_pct": state.alert_threshold_percent, "alert": state.alert, "committed": ahead,
               "burn_per_hour": burn, "projected_month_end": state.projected_month_end,
               "runs_out_at": state.runs_out_at(now, burn),
               "policy": budget.policy if budget is not None else None, "exhausted": state.exhausted,
               "left": state.left if limit is not None else None}
    return summary


def budget_bar(team: Team) -> dict:
    """:func:`budget_summary` plus the ``percent`` of the monthly limit spent (None without a budget).

    The dashboard and the Team page draw the team's budget from it (``billing/_budget_card.html``).
    """
    budget = budget_summary(team)
    limit, spent = budget["monthly_limit"], budget["spent_month"]
    budget["percent"] = min(100, round(100 * spent / limit)) if limit else None
    return budget


@dataclass
class BudgetStep:
    """What the reconcile cycle's budget step found: alerts audited now, teams whose work is to stop."""

    alerted: list[str] = field(default_factory=list)  #: slugs of the teams whose alert was audited now
    to_stop: list[Team] = field(default_factory=list)  #: spent budgets whose policy is to stop running work


def enforce_budgets(now: datetime | None = None) -> BudgetStep:
    """Every budgeted team's month, read once: audit crossed alert thresholds (once a month each)
    and name the teams whose spent budget says "stop".

    A fixed number of statements however many workloads run (:func:`budget_summaries`), plus
    one audit event per alert written now.
    """
    now = now or timezone.now()
    budgets = list(TeamBudget.objects.select_related("team"))
    summaries = _summaries([budget.team_id for budget in budgets], {budget.team_id: budget for budget in budgets}, now)
    step = BudgetStep()
    alerting = [budget for budget in budgets if summaries[budget.team_id]["alert"]]
    if alerting:
        target = f"budget {month_start(now):%Y-%m}"
        noted = set(AuditEvent.objects.filter(action=AuditEvent.Action.BUDGET_ALERT, target=target,
                                              team_id__in=[budget.team_id for budget in alerting])
                    .values_list("team_id", flat=True))
        for budget in alerting:
            if budget.team_id not in noted:
                summary = summaries[budget.team_id]
                # Its own transaction: what the apps above write on this audit event (the alert's
                # notification) commits with it, since this event is what says "alerted already".
                with transaction.atomic():
                    event = audit(AuditEvent.Action.BUDGET_ALERT, team=budget.team, target=target,
                                  spent=stored_amount(summary["spent_month"]),
                                  limit=stored_amount(summary["monthly_limit"]),
                                  threshold_pct=summary["alert_threshold_pct"])
                    budget_alert.send(sender=AuditEvent, audit_event=event)
                step.alerted.append(budget.team.slug)
    step.to_stop = [budget.team for budget in budgets
                    if budget.policy == TeamBudget.Policy.STOP and summaries[budget.team_id]["exhausted"]]
    return step


def budget_fields(budget: TeamBudget | None) -> dict | None:
    """The audited fields of a budget, as JSON-safe values."""
    if budget is None:
        return None
    return {"monthly_limit": stored_amount(budget.monthly_limit), "currency": budget.currency,
            "alert_threshold_percent": budget.alert_threshold_percent, "policy": budget.policy}


def audit_budget_change(actor, team: Team, old: dict | None, new: dict | None, ip: str | None = None) -> None:
    audit(AuditEvent.Action.BUDGET_CHANGED, actor=actor, team=team, target="budget", ip=ip, old=old, new=new)


# -- price changes ------------------------------------------------------------------------


_UNSET = object()


@transaction.atomic
def set_flavor_prices(actor, flavor: GpuFlavor, price_per_hour: Decimal, spot_price_per_hour: Decimal,
                      old=_UNSET, ip: str | None = None) -> GpuFlavor:
    """Change a flavor's prices; audited with old and new. Usage already recorded keeps its old cost.

    ``old`` is ``(price, spot_price)`` when the caller already wrote the row (the admin form
    saves every field), ``None`` for a flavor just created; by default the flavor's own values.
    """
    if old is _UNSET:
        old = (flavor.price_per_hour, flavor.spot_price_per_hour)
    before = {"price_per_hour": None, "spot_price_per_hour": None} if old is None else {
        "price_per_hour": stored_amount(old[0]), "spot_price_per_hour": stored_amount(old[1])}
    flavor.price_per_hour, flavor.spot_price_per_hour = price_per_hour, spot_price_per_hour
    flavor.save(update_fields=["price_per_hour", "spot_price_per_hour"])
    after = {"price_per_hour": stored_amount(price_per_hour), "spot_price_per_hour": stored_amount(spot_price_per_hour)}
    if before != after:
        audit(AuditEvent.Action.PRICE_CHANGED, actor=actor, target=f"flavor {flavor.name}", ip=ip,
              flavor=flavor.name, old=before, new=after)
    return flavor


def set_cluster_price(actor, flavor: GpuFlavor, cluster, price_per_hour: Decimal | None,
                      spot_price_per_hour: Decimal | None = None, ip: str | None = None) -> ClusterPrice | None:
    """Price ``flavor`` on ``cluster`` (``price_per_hour`` None: the flavor's price again); audited
    with old and new. Usage already recorded keeps its old cost; open segments are priced anew."""
    row = ClusterPrice.objects.filter(flavor=flavor, cluster=cluster).first()
    before = None if row is None else {"price_per_hour": stored_amount(row.price_per_hour),
                                       "spot_price_per_hour": stored_amount(row.spot_price_per_hour)}
    if price_per_hour is None:
        if row is not None:
            row.delete()
        row, after = None, None
    else:
        row, _ = ClusterPrice.objects.update_or_create(
            flavor=flavor, cluster=cluster,
            defaults={"price_per_hour": price_per_hour, "spot_price_per_hour": spot_price_per_hour})
        after = {"price_per_hour": stored_amount(price_per_hour), "spot_price_per_hour": stored_amount(spot_price_per_hour)}
    if before != after:
        audit(AuditEvent.Action.PRICE_CHANGED, actor=actor, target=f"flavor {flavor.name} on {cluster.name}", ip=ip,
              flavor=flavor.name, cluster=cluster.name, old=before, new=after)
    return row


def seed_cluster_prices() -> int:
    """Give each cluster the prices its backend offers it at (the sandbox inventory's ``prices``),
    for flavors that exist and clusters not priced yet: a staff change is never overwritten.
    Returns how many prices were set."""
    made = 0
    flavors = {f.name: f for f in GpuFlavor.objects.all()}
    offered = {o.name: o for o in core.backend.offered_clusters()}
    for cluster in fleet.clusters():
        seed = offered.get(cluster.name)
        if seed is None:
            continue
        for name in sorted({*seed.prices, *seed.spot_prices}):
            flavor = flavors.get(name)
            if flavor is None:
                continue
            # A price the backend leaves out is the flavor's (a spot price alone keeps its on-demand one).
            _row, created = ClusterPrice.objects.get_or_create(
                flavor=flavor, cluster=cluster,
                defaults={"price_per_hour": seed.prices.get(name, flavor.price_per_hour),
                          "spot_price_per_hour": seed.spot_prices.get(name)})
            made += created
    return made
