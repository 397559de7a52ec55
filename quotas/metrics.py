"""The quota, queue, budget and preemption figures of ``/metrics``, read from the database at scrape time.

What teams hold, wait for and spend is state in the database, not events of one process:
computed by :class:`QuotaCollector` on each scrape, every web process reports the same figures,
whatever process admitted or billed the work, and a restart loses nothing. Each figure comes
from the rule that already computes it (:func:`quotas.facts.units_held_by_team` for units
in use and borrowed, :func:`billing.ledger.month_spend` for the month's spend), in a fixed number
of statements however many teams, flavors or workloads there are.

Labels are the team's slug and the flavor's name. Every (team, flavor) with a quota or with
units held has its ``units`` and ``queue_depth`` series, at 0 when idle, so "nothing queued" is
a value, not a missing series.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.conf import settings
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from billing.ledger import month_spend
from billing.models import PreemptionEvent, TeamBudget
from fleet.models import GpuFlavor
from quotas.facts import units_held_by_team
from quotas.models import QueuedRequest, TeamQuota
from teams.models import Team

TEAM_FLAVOR = ["team", "flavor"]


class QuotaCollector(Collector):
    """Units in use / nominal / borrowed and queue depth per team and flavor, budget burn per
    team, preemptions by cause (see the module docstring). Registered per scrape by the view."""

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        now = timezone.now()
        # 1. Names for the labels (two small statements), then each figure in one statement.
        teams = dict(Team.objects.values_list("pk", "slug"))
        flavors = dict(GpuFlavor.objects.values_list("pk", "name"))
        nominal = {(team_id, flavor_id): limit for team_id, flavor_id, limit
                   in TeamQuota.objects.values_list("team_id", "flavor_id", "limit")}
        held = units_held_by_team()
        queue = {(row["team_id"], row["flavor_id"]): (row["depth"], row["oldest"]) for row in
                 QueuedRequest.objects.values("team_id", "flavor_id").annotate(depth=Count("pk"), oldest=Min("created_at"))
                 .order_by()}

        # 2. Per team and flavor.
        in_use = GaugeMetricFamily("slipway_units_in_use", "GPU units the team holds now (active holds).",
                                   labels=TEAM_FLAVOR)
        limit = GaugeMetricFamily("slipway_units_nominal", "The team's nominal quota of the flavor.", labels=TEAM_FLAVOR)
        borrowed = GaugeMetricFamily("slipway_units_borrowed", "Units in use that the team's cohort lent it.",
                                     labels=TEAM_FLAVOR)
        depth = GaugeMetricFamily("slipway_queue_depth", "Requests waiting for quota or budget.", labels=TEAM_FLAVOR)
        oldest = GaugeMetricFamily("slipway_queue_oldest_age_seconds", "Seconds the oldest waiting request has waited.",
                                   labels=TEAM_FLAVOR)
        for key in sorted(nominal.keys() | held.keys() | queue.keys()):
            if key[0] not in teams or key[1] not in flavors:
                continue  # created or deleted between two statements: the next scrape has it
            labels = [teams[key[0]], flavors[key[1]]]
            units, lent = held.get(key, (0, 0))
            in_use.add_metric(labels, units)
            borrowed.add_metric(labels, lent)
            if key in nominal:
                limit.add_metric(labels, nominal[key])
            waiting, since = queue.get(key, (0, None))
            depth.add_metric(labels, waiting)
            if since is not None:
                oldest.add_metric(labels, max((now - since).total_seconds(), 0.0))
        yield from (in_use, limit, borrowed, depth, oldest)

        # 3. Budgets: this month's spend (the ledger's one figure) against each team's limit.
        yield from self._budgets(teams, now)

        # 4. Preemptions: the log of them is forward-only, so a count of its rows is a counter.
        preempted = CounterMetricFamily("slipway_preemptions", "Workloads preempted, by cause.", labels=["cause"])
        counts = dict(PreemptionEvent.objects.values_list("cause").annotate(n=Count("pk")).order_by())
        for cause in PreemptionEvent.Cause.values:
            preempted.add_metric([cause], counts.get(cause, 0))
        yield preempted

    @staticmethod
    def _budgets(teams: dict[int, str], now) -> Iterator[GaugeMetricFamily]:
        budgets = [row for row in TeamBudget.objects.values_list("team_id", "monthly_limit") if row[0] in teams]
        spend = month_spend([team_id for team_id, _limit in budgets], now)
        currency = settings.SLIPWAY_CURRENCY  # a budget's, as the spend's (billing.models.TeamBudget)
        spent = GaugeMetricFamily("slipway_budget_spent", "Spent this month, in the budget's currency.",
                                  labels=["team", "currency"])
        limit = GaugeMetricFamily("slipway_budget_limit", "The team's monthly budget.", labels=["team", "currency"])
        burn = GaugeMetricFamily("slipway_budget_burn_ratio", "Spent this month ÷ the monthly budget (1 = all spent).",
                                 labels=["team"])
        for team_id, monthly_limit in budgets:
            month = spend[team_id].spent
            spent.add_metric([teams[team_id], currency], float(month))
            limit.add_metric([teams[team_id], currency], float(monthly_limit))
            if monthly_limit > 0:
                burn.add_metric([teams[team_id]], float(month / monthly_limit))
        yield from (spent, limit, burn)
