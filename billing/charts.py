"""The Usage page's charts as plain numbers for server-side SVG (no JavaScript, no CDN).

Pure: the functions take figures and return chart coordinates; the templates draw them. Every
chart reads without colour alone: stacked series differ by fill *pattern* as well as colour,
lines by dash pattern, each mark carries a ``<title>``, and a table beside each chart holds its
figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from core.formatting import format_amount, format_money, format_when

WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 84, 16, 16, 32  # the templates draw axes at x=84 and x=624
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
#: Fills of stacked series, defined as SVG patterns in ``billing/_chart_defs.html``: they differ
#: by pattern (not only by colour), in this order.
PATTERNS = ("solid", "diagonal", "dots", "cross", "horizontal", "vertical")


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """Round tick values from 0 to at least ``top`` (steps of 1, 2 or 5 × a power of ten)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [step * i for i in range(math.ceil(top / step - 1e-9) + 1)]


@dataclass(frozen=True)
class Segment:
    """One series' part of one day's bar."""

    x: float
    y: float
    width: float
    height: float
    pattern: str
    title: str


@dataclass(frozen=True)
class StackedBars:
    width: int
    height: int
    segments: list[Segment]
    y_ticks: list[tuple[float, str]]  #: (y, label)
    x_ticks: list[tuple[float, str]]  #: (x, day label)
    legend: list[tuple[str, str]]  #: (series, pattern)
    series: list[str]  #: the table's columns
    rows: list[tuple[str, list[Decimal], Decimal]]  #: the table: day ("Nov 3"), per series, total


def daily_stacked(days: list[date], series: list[str], values: dict[tuple[date, str], Decimal],
                  currency: str) -> StackedBars | None:
    """One bar per day of ``days``, stacked by ``series`` (bottom first); None when nothing was spent."""
    totals = {day: sum((values.get((day, s), Decimal(0)) for s in series), Decimal(0)) for day in days}
    if not days or not any(totals.values()):
        return None
    ticks = nice_ticks(float(max(totals.values())))
    top = ticks[-1]
    slot = PLOT_W / len(days)
    bar = max(slot * 0.7, 1.0)
    patterns = {name: PATTERNS[i % len(PATTERNS)] for i, name in enumerate(series)}

    def y(amount: float) -> float:
        return round(TOP + PLOT_H * (1 - amount / top), 1)

    segments = []
    for index, day in enumerate(days):
        base = 0.0
        for name in series:
            amount = float(values.get((day, name), 0))
            if amount <= 0:
                continue
            segments.append(Segment(round(LEFT + slot * index + (slot - bar) / 2, 1), y(base + amount), round(bar, 1),
                                    round(y(base) - y(base + amount), 1), patterns[name],
                                    f"{day:%b} {day.day}, {name}: {format_money(amount, currency)}"))
            base += amount
    every = max(1, math.ceil(len(days) / 10))
    x_ticks = [(round(LEFT + slot * (i + 0.5), 1), f"{day.day}") for i, day in enumerate(days) if i % every == 0]
    rows = [(f"{day:%b} {day.day}", [values.get((day, s), Decimal(0)) for s in series], totals[day])
            for day in days if totals[day]]
    return StackedBars(WIDTH, HEIGHT, segments, [(y(t), format_amount(t)) for t in ticks], x_ticks,
                       [(name, patterns[name]) for name in series], series, rows)


@dataclass(frozen=True)
class Line:
    label: str
    css: str  #: the class that sets its dash pattern
    points: str  #: SVG polyline points


@dataclass(frozen=True)
class BurnChart:
    width: int
    height: int
    lines: list[Line]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]
    budget: tuple[float, str] | None  #: (y, label) of the budget line
    marks: list[tuple[float, float, str]]  #: (x, y, label): today's spend, when the budget runs out
    rows: list[tuple[str, str]]  #: the table beside it: what, how much


def burn_chart(start: datetime, end: datetime, daily: list[tuple[date, Decimal]], now: datetime, *,
               spent: Decimal, committed: Decimal | None, projected: Decimal | None, limit: Decimal | None,
               runs_out_at: datetime | None, currency: str) -> BurnChart | None:
    """The month's spend so far against the budget, with what is committed and the projection to its end.

    ``daily``: each day's cost, oldest first. For a past month ``committed`` and ``projected``
    are None (the month is over: only the actual line).
    """
    if not daily and not limit:
        return None
    span = (end - start).total_seconds()
    current = min(max(now, start), end)
    tops = [float(spent), float(limit or 0), float(projected or 0), float(spent + (committed or 0))]
    ticks = nice_ticks(max(*tops, 1.0))
    top = ticks[-1]

    def x(at: datetime) -> float:
        return round(LEFT + PLOT_W * (at - start).total_seconds() / span, 1)

    def y(amount: Decimal | float) -> float:
        return round(TOP + PLOT_H * (1 - float(amount) / top), 1)

    points, running = [f"{x(start)},{y(0)}"], Decimal(0)
    for day, cost in daily:
        running += cost
        day_end = min(datetime.combine(day + timedelta(days=1), datetime.min.time(), start.tzinfo), current)
        points.append(f"{x(day_end)},{y(running)}")
    points.append(f"{x(current)},{y(spent)}")
    lines = [Line("spent", "actual", " ".join(points))]
    rows = [("Spent", format_money(spent, currency))]
    if committed is not None:
        rows.append(("Committed (admitted work, to its limit or the month's end)", format_money(committed, currency)))
    if projected is not None:
        # One projection (billing.budget_rule.BudgetState.projected_month_end): spent + committed.
        lines.append(Line("projected: spent + committed", "projected", f"{x(current)},{y(spent)} {x(end)},{y(projected)}"))
        rows.append(("Projected month end", format_money(projected, currency)))
    budget = (y(limit), f"budget {format_money(limit, currency)}") if limit else None
    if limit:
        rows.append(("Budget", format_money(limit, currency)))
    marks = [(x(current), y(spent), f"{format_money(spent, currency)} spent")] if committed is not None else []
    if runs_out_at is not None and limit:
        local = timezone.localtime(runs_out_at)
        marks.append((x(runs_out_at), y(limit), f"runs out {local:%b} {local.day}"))
        rows.append(("Budget runs out", format_when(runs_out_at)))
    days = (end - start).days
    x_ticks = [(x(start + timedelta(days=d)), f"{(start + timedelta(days=d)).day}") for d in range(0, days, 5)]
    return BurnChart(WIDTH, HEIGHT, lines, [(y(t), format_amount(t)) for t in ticks], x_ticks, budget, marks, rows)
