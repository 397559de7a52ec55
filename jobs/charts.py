"""Metric charts of runs as plain numbers for server-side SVG (pure; no JavaScript, no CDN).

A chart is a metric (``loss``) against the step, one line per run (up to :data:`MAX_LINES`, the
compare page's limit). Lines differ by dash pattern as well as colour (``metric-0`` …
``metric-7`` in static/css/charts.css), each carries a ``<title>``, and the page puts a table of
the figures beside it, as every chart of the portal does (:mod:`billing.charts`).

The points come already thinned by the database (:func:`jobs.metrics.chart_series`: the lowest
and the highest value of each of :data:`BUCKETS` step ranges), so a run of a million steps draws
as fast as one of a hundred, and a spike is never averaged away.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 32
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
#: Step ranges a series is thinned to (two points each: about one per pixel of the plot).
BUCKETS = 288
#: Most lines on one chart (the compare page's most runs).
MAX_LINES = 8


@dataclass(frozen=True)
class Line:
    label: str
    css: str  #: ``metric-<i>``: its colour and dash pattern
    points: str  #: SVG polyline points
    last: tuple[int, float] | None  #: its last (step, value), for the table beside the chart


@dataclass(frozen=True)
class MetricChart:
    name: str
    width: int
    height: int
    lines: list[Line]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]


def ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    """Round tick values covering [lo, hi] (steps of 1, 2 or 5 × a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(lo / step) * step
    return [first + step * i for i in range(math.ceil((hi - first) / step - 1e-9) + 1)]


def label(value: float) -> str:
    """A tick's words: ``0.25``, ``1.5k``, ``2M``, ``3e-05``."""
    size = abs(value)
    if size >= 1e6:
        return f"{value / 1e6:g}M"
    if size >= 1e4:
        return f"{value / 1e3:g}k"
    return f"{value:.4g}"


def metric_chart(name: str, series: list[tuple[str, list[tuple[int, float]]]]) -> MetricChart | None:
    """The chart of metric ``name``: ``series`` is ``[(line label, [(step, value), …] in step order)]``,
    at most :data:`MAX_LINES` (the rest are left out); None when no line has a point."""
    series = [(text, points) for text, points in series[:MAX_LINES]]
    values = [v for _text, points in series for _s, v in points]
    if not values:
        return None
    steps = [s for _text, points in series for s, _v in points]
    y_ticks = ticks(min(values), max(values))
    x_ticks = ticks(0, max(max(steps), 1), 5)
    y_lo, y_hi = y_ticks[0], y_ticks[-1]
    x_hi = x_ticks[-1] or 1

    def x(step: int) -> float:
        return round(LEFT + PLOT_W * step / x_hi, 1)

    def y(value: float) -> float:
        return round(TOP + PLOT_H * (1 - (value - y_lo) / ((y_hi - y_lo) or 1)), 1)

    lines = [Line(text, f"metric-{index}", " ".join(f"{x(s)},{y(v)}" for s, v in points),
                  points[-1] if points else None)
             for index, (text, points) in enumerate(series)]
    return MetricChart(name, WIDTH, HEIGHT, lines, [(y(t), label(t)) for t in y_ticks],
                       [(x(t), label(t)) for t in x_ticks])
