"""Open segments summed in SQL (per team, kind, flavor, spot, start and units) price exactly as one by one.

The comparison runs on the database the suite runs on: SQLite by default, PostgreSQL with
``DATABASE_URL`` set (as CI runs it), so both vendors' raw values (SQLite's floats for decimal
columns and text for timestamps) go through the grouped path.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.ledger import cost_per_hour, month_start, open_groups, open_segments, open_spend, usage_hour
from billing.models import TeamBudget
from billing.services import budget_summaries, budget_summary, enforce_budgets
from core.money import ZERO
from jobs.models import TrainingRun
from quotas.demo import seed_team_quotas
from teams.models import Team
from tests.factories import hold_of
from tests.workloads.tinykind.models import Notebook

#: Mid-month, off the hour and the second, so every clipping and rounding path is taken.
NOW = datetime(2026, 11, 17, 14, 41, 27, 654321, tzinfo=UTC)


def per_segment(team_ids: list[int], now: datetime) -> dict[int, tuple[Decimal, Decimal, dict[str, Decimal]]]:
    """The former figure: every open segment priced on its own in Python (``(spent, burn, by kind)`` per team)."""
    since = month_start(now)
    totals: dict[int, tuple[Decimal, Decimal, dict[str, Decimal]]] = {t: (ZERO, ZERO, {}) for t in team_ids}
    for segment in open_segments(team_ids, now):
        spent, burn, by_prefix = totals[segment.team_id]
        # Each segment clipped to the month and priced alone (every one here ends at now, after the month's start).
        cost = replace(segment, start=max(segment.start, since)).charge()[0]
        prefix = segment.ref.partition(":")[0]
        by_prefix[prefix] = by_prefix.get(prefix, ZERO) + cost
        totals[segment.team_id] = (spent + cost, burn + cost_per_hour(segment.price, segment.units),
                                   by_prefix)
    return totals


def open_notebook(team, user, flavor, since, units, spot=False, state="running"):
    notebook = Notebook.objects.create(team=team, created_by=user, name=f"nb-{Notebook.objects.count()}", flavor=flavor,
                                       state=state, spot=spot, gpus=units)
    hold_of(notebook, since, units)
    return notebook


def open_run(team, user, flavor, since, units, spot=False):
    run = TrainingRun.objects.create(team=team, created_by=user, flavor=flavor, name=f"r-{TrainingRun.objects.count()}",
                                     image="registry.example.com/ml/t:1", command=["python", "train.py"],
                                     state="running", spot=spot)
    hold_of(run, since, units)
    return run


@pytest.mark.django_db
def test_grouped_open_spend_equals_pricing_every_segment(team, other_team, member, flavors):
    hour = usage_hour(NOW)
    starts = [
        hour,  # the steady case: every run open for over an hour restarted its segment here
        hour - timedelta(minutes=7, seconds=3, microseconds=1),  # spans an hour boundary (not closed yet)
        NOW - timedelta(seconds=4, microseconds=999_999),  # a few seconds, microseconds in the price
        NOW - timedelta(days=30),  # before the month's start: only this month counts
        month_start(NOW) - timedelta(microseconds=1),
    ]
    mig, mig3 = flavors["a100-1g.10gb"], flavors["a100-3g.40gb"]
    for index, since in enumerate(starts):
        for flavor, units in ((flavors["a100-80gb"], 1), (flavors["l4"], 3), (mig, 2), (mig3, 1)):
            for spot in (False, True):
                open_notebook(team, member, flavor, since, units + index % 2, spot)
                open_notebook(team, member, flavor, since, units + index % 2, spot)  # alike: one row, count 2
                open_run(other_team, member, flavor, since, units, spot)
    open_run(team, member, flavors["h100-80gb"], hour, 4)
    # Not open up to now: nothing to count.
    open_notebook(team, member, flavors["l4"], NOW + timedelta(seconds=1), 1)
    open_notebook(team, member, flavors["l4"], hour, 0)

    team_ids = [team.pk, other_team.pk]
    groups = open_groups(team_ids, NOW)
    assert len(groups) < len(open_segments(team_ids, NOW))  # segments alike come as one row
    old = per_segment(team_ids, NOW)
    new = open_spend(team_ids, month_start(NOW), NOW)
    for team_id in team_ids:
        spent, burn, by_prefix = old[team_id]
        assert spent > 0 and burn > 0
        assert (new[team_id].spent, new[team_id].burn_per_hour, new[team_id].by_prefix) == (spent, burn, by_prefix)
    assert set(new[team.pk].by_prefix) == {"nb", "run"}


@pytest.mark.django_db
def test_a_team_without_open_segments_spends_nothing_open(team, flavors):
    assert open_spend([team.pk], month_start(NOW), NOW)[team.pk].spent == ZERO


@pytest.mark.django_db
def test_the_summaries_of_many_teams_are_each_teams_own(team, other_team, member, flavors):
    seed_team_quotas(team, {"l4": 4}, Decimal("100"))
    open_notebook(team, member, flavors["l4"], usage_hour(NOW), 2)
    open_run(other_team, member, flavors["a100-80gb"], usage_hour(NOW), 1)
    together = budget_summaries([team.pk, other_team.pk], NOW)
    assert together == {team.pk: budget_summary(team, NOW), other_team.pk: budget_summary(other_team, NOW)}
    assert together[team.pk]["monthly_limit"] == Decimal("100") and together[other_team.pk]["monthly_limit"] is None


def budget_step_queries(workloads: int, flavors, member) -> int:
    team = Team.objects.create(slug=f"busy-{workloads}", name=f"busy {workloads}")
    seed_team_quotas(team, {"l4": workloads, "a100-80gb": workloads}, Decimal("1000000"))
    TeamBudget.objects.filter(team=team).update(policy=TeamBudget.Policy.STOP)
    for index in range(workloads):
        flavor = flavors["l4"] if index % 2 else flavors["a100-80gb"]
        open_notebook(team, member, flavor, usage_hour(NOW) - timedelta(seconds=index), 1, spot=index % 3 == 0)
        open_run(team, member, flavor, usage_hour(NOW), 1)
    with CaptureQueriesContext(connection) as queries:
        step = enforce_budgets(NOW)
    assert step.to_stop == [] and step.alerted == []
    TeamBudget.objects.filter(team=team).delete()
    return len(queries)


@pytest.mark.django_db
def test_the_budget_step_reads_a_fixed_number_of_statements_however_many_workloads_run(
        member, flavors, django_assert_num_queries):
    few = budget_step_queries(2, flavors, member)
    assert budget_step_queries(40, flavors, member) == few
    # Budgets, the ledger's sums, the open segments' sums and committed money: one statement each.
    seed_team_quotas(member.memberships.first().team, {"l4": 2}, Decimal("50"))
    with django_assert_num_queries(4):
        enforce_budgets(NOW)
