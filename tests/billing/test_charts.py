"""The chart geometry of the Usage page (pure functions)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

from billing.charts import LEFT, PLOT_W, TOP, burn_chart, daily_stacked, nice_ticks
from core.formatting import format_money

NOV = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)


def test_ticks_are_round_and_reach_the_top():
    assert nice_ticks(9.8) == [0, 5, 10]
    assert nice_ticks(1000) == [0, 500, 1000]
    assert nice_ticks(1234) == [0, 500, 1000, 1500]
    assert nice_ticks(0) == [0.0, 1.0]
    assert nice_ticks(0.3)[-1] >= 0.3


def test_money_labels_are_the_portals_money_format_also_for_float_chart_values():
    assert format_money(1234567.8, "USD") == "1,234,567.80 USD"  # coordinates are floats; labels are not
    assert format_money(Decimal("9.8"), "EUR") == "9.80 EUR"


def test_stacked_bars_stack_bottom_up_and_skip_empty_days_in_the_table():
    days = [date(2026, 11, 1), date(2026, 11, 2)]
    chart = daily_stacked(days, ["a", "b"], {(days[0], "a"): Decimal(6), (days[0], "b"): Decimal(4)}, "USD")
    first, second = chart.segments
    assert (first.pattern, second.pattern) == ("solid", "diagonal")
    assert first.y + first.height == TOP + 192 and second.y + second.height == first.y  # b sits on a
    assert [row[0] for row in chart.rows] == ["Nov 1"]
    assert daily_stacked(days, ["a"], {}, "USD") is None


def test_the_burn_chart_marks_when_the_budget_runs_out():
    now = datetime(2026, 11, 16, tzinfo=UTC)
    chart = burn_chart(*NOV, [(date(2026, 11, d), Decimal(10)) for d in range(1, 16)], now, spent=Decimal(150),
                       committed=Decimal(20), projected=Decimal(170), limit=Decimal(160),
                       runs_out_at=datetime(2026, 11, 21, tzinfo=UTC), currency="USD")
    # One projection, spent + committed (BudgetState.projected_month_end): one line, to the month's end.
    assert [line.css for line in chart.lines] == ["actual", "projected"]
    assert float(chart.lines[1].points.split()[-1].split(",")[0]) == LEFT + PLOT_W
    assert ("Projected month end", "170.00 USD") in chart.rows
    assert chart.marks[-1][2] == "runs out Nov 21" and ("Budget runs out", "2026-11-21 00:00 UTC") in chart.rows
    assert chart.budget[1] == "budget 160.00 USD"
    # A month that is over: only what was spent.
    past = burn_chart(*NOV, [(date(2026, 11, 1), Decimal(5))], NOV[1], spent=Decimal(5), committed=None,
                      projected=None, limit=None, runs_out_at=None, currency="USD")
    assert [line.css for line in past.lines] == ["actual"] and past.budget is None and past.marks == []
