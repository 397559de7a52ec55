"""One month-end projection (issue 34 item 10): spent + committed, the figure the budget gate admits
against, and when that spends the budget — the same number on the dashboard, the Team page, the
usage page, the API and the CLI."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.budget_rule import BudgetState
from billing.models import TeamBudget
from billing.services import budget_summary
from core.formatting import format_money
from jobs.services import submit_run
from tests.jobs.conftest import run_payload

NOW = datetime(2026, 11, 16, tzinfo=UTC)


def state(spent, committed, limit="100", hours_left="100") -> BudgetState:
    return BudgetState(Decimal(limit) if limit is not None else None, Decimal(spent), "USD", Decimal(committed),
                       Decimal(hours_left))


def test_the_projection_is_spent_plus_committed():
    assert state("30", "50").projected_month_end == Decimal("80")


@pytest.mark.parametrize("spent,committed,burn,expected", [
    ("30", "50", "10", None),                   # admitted work does not spend it this month
    ("30", "80", "10", NOW + timedelta(hours=7)),  # 70 left at 10/h
    ("30", "80", "0", NOW + timedelta(hours=87.5)),  # nothing runs yet: committed money over the hours left (0.8/h)
    ("100", "0", "0", NOW),                     # spent already
])
def test_it_runs_out_when_the_committed_money_spends_it(spent, committed, burn, expected):
    assert state(spent, committed).runs_out_at(NOW, Decimal(burn)) == expected


def test_no_budget_never_runs_out():
    assert state("30", "80", limit=None).runs_out_at(NOW, Decimal(10)) is None


def test_runs_out_is_never_after_the_month_end_when_it_runs_out():
    # Whatever the pace, committed money at or above what is left spends it within the hours left.
    for burn in ("0", "0.01", "1", "100"):
        at = state("10", "90", hours_left="50").runs_out_at(NOW, Decimal(burn))
        assert NOW <= at <= NOW + timedelta(hours=50)


@pytest.mark.django_db
def test_every_page_and_the_api_show_the_one_projection(team, member, quota, client, monkeypatch):
    # One instant for every read: the committed money of work without a limit shrinks by the second (its
    # cost until the month's end), and two reads a moment apart may round to cents on either side of one.
    instant = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: instant)
    TeamBudget.objects.filter(team=team).update(monthly_limit=Decimal("5000"))
    data = run_payload(name="no-limit", gpus_per_worker=1)  # commits to the month's end
    data.pop("team")
    submit_run(member, team, data)
    summary = budget_summary(team)
    assert summary["projected_month_end"] == summary["spent_month"] + summary["committed"] > 0
    figure = format_money(summary["projected_month_end"], summary["currency"])
    client.force_login(member)
    api = client.get(f"/api/v1/teams/{team.slug}/usage/").json()["budget"]
    assert Decimal(api["projected_month_end"]) == summary["projected_month_end"].quantize(Decimal("0.01"))
    for url in ("/", f"/teams/{team.slug}/"):
        page = client.get(url).content.decode()
        assert f'<dd id="budget-projected">{figure}</dd>' in page, url
    usage = client.get("/usage/").content.decode()
    assert "Projected month end" in usage
    assert figure in usage
