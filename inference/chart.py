"""The replicas-over-time chart of an endpoint, as plain numbers for a server-side SVG (no JS, no CDN).

Pure: from the scaling log (each row says replicas ready, desired and the ceiling at a moment)
and the current figures, it computes step lines in chart coordinates; the template draws them.
Lines differ by dash pattern and carry labels, so the chart reads without colour.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from portal.formatting import format_clock
from quotas.charts import Line

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 28


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    lines: list[Line]
    y_ticks: list[tuple[float, int]]  #: (y, replicas)
    x_ticks: list[tuple[float, str]]  #: (x, time label)
    bounds: list[tuple[float, str]]  #: (y, "min 1" / "max 4") horizontal guides
    rows: list[tuple[datetime, int, int, int]]  #: the table beside it: at, ready, desired, ceiling


def replicas_chart(samples: list[tuple[datetime, int, int, int]], now: datetime, current: tuple[int, int, int],
                   min_replicas: int, max_replicas: int) -> Chart | None:
    """``samples``: ``(at, ready, desired, ceiling)`` oldest first; ``current`` the figures at ``now``."""
    points = [*samples, (now, *current)]
    if len(points) < 2:
        return None
    start, span = points[0][0], max((now - points[0][0]).total_seconds(), 1.0)
    top = max(max_replicas, *(max(p[1:]) for p in points), 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(at: datetime) -> float:
        return round(LEFT + plot_w * (at - start).total_seconds() / span, 1)

    def y(replicas: int) -> float:
        return round(TOP + plot_h * (1 - replicas / top), 1)

    def steps(index: int) -> str:
        coords, previous = [], None
        for sample in points:
            value = sample[index]
            if previous is not None:
                coords.append(f"{x(sample[0])},{y(previous)}")  # hold until the change
            coords.append(f"{x(sample[0])},{y(value)}")
            previous = value
        return " ".join(coords)

    lines = [Line("ready", "ready", steps(1)), Line("desired", "desired", steps(2)),
             Line("ceiling (granted)", "ceiling", steps(3))]
    every = max(1, top // 4)
    y_ticks = [(y(v), v) for v in range(0, top + 1, every)]
    x_ticks = [(x(start + (now - start) * f), format_clock(start + (now - start) * f)) for f in (0, 0.5, 1)]
    bounds = [(y(min_replicas), f"min {min_replicas}"), (y(max_replicas), f"max {max_replicas}")]
    return Chart(WIDTH, HEIGHT, lines, y_ticks, x_ticks, bounds, list(reversed(points))[:20])
