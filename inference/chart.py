"""The replicas-over-time chart of an endpoint, as plain numbers for a server-side SVG (no JS, no CDN).

Pure: from the replica samples (each row says replicas ready, desired and the ceiling from a
moment on, written when one of them changed) and the current figures, it computes step lines
in chart coordinates; the template draws them. Lines differ by dash pattern and carry labels,
so the chart reads without colour. Time labels are anchored so none runs past the chart's
edge: the first starts at the axis, the last ends at the plot's right end.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from billing.charts import Line
from core.formatting import format_clock

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 28
DAY_SECONDS = 20 * 3600  #: from this span on, time labels name the day


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    lines: list[Line]
    y_ticks: list[tuple[float, int]]  #: (y, replicas)
    x_ticks: list[tuple[float, str, str]]  #: (x, time label, SVG text-anchor)
    bounds: list[tuple[float, str]]  #: (y, "min 1" / "max 4") horizontal guides
    rows: list[tuple[datetime, int, int, int]]  #: the table beside it: at, ready, desired, ceiling


def replicas_chart(samples: list[tuple[datetime, int, int, int]], now: datetime, current: tuple[int, int, int],
                   min_replicas: int, max_replicas: int) -> Chart | None:
    """``samples``: ``(at, ready, desired, ceiling)`` oldest first; ``current`` the figures at ``now``."""
    if samples:
        # A sample stamped after this server's clock (the reconciler runs on another host) stays inside.
        now = max(now, samples[-1][0])
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
    def label(at: datetime) -> str:
        # Over more than a day a time alone is ambiguous: the day goes first.
        if span < DAY_SECONDS:
            return format_clock(at)
        local = timezone.localtime(at)
        return f"{local:%b} {local.day} {format_clock(at)}"

    x_ticks = [(x(start + (now - start) * f), label(start + (now - start) * f), anchor)
               for f, anchor in ((0, "start"), (0.5, "middle"), (1, "end"))]
    bounds = [(y(min_replicas), f"min {min_replicas}"), (y(max_replicas), f"max {max_replicas}")]
    return Chart(WIDTH, HEIGHT, lines, y_ticks, x_ticks, bounds, list(reversed(points))[:20])


# -- cold starts: one horizontal bar per timeline, a segment per stage -----------------------------------------
BAR_HEIGHT, BAR_GAP, BAR_LEFT, BAR_TOP = 16, 8, 168, 18


@dataclass(frozen=True)
class Segment:
    x: float
    width: float
    stage: str  #: a stage of COLD_START_STAGES, or "unattributed": the CSS class of its colour
    title: str  #: what hovering it says: "Model loaded: 20 s"


@dataclass(frozen=True)
class BarRow:
    y: float
    label: str  #: the replica and how it began
    segments: list[Segment]
    elapsed: float
    attributed_share: float
    complete: bool


@dataclass(frozen=True)
class StageBars:
    width: int
    height: int
    rows: list[BarRow]
    x_ticks: list[tuple[float, str]]  #: (x, seconds) along the top
    bar_height: int = BAR_HEIGHT


def cold_start_bars(timelines: list, labels: dict[str, str]) -> StageBars | None:
    """Horizontal stacked bars of ``timelines`` (:class:`inference.coldstarts.Timeline`, newest first), one
    segment per stage in its order, on one time scale (the longest timeline spans the plot). ``labels``: the
    stages' names for the segments' titles. None without a timeline."""
    if not timelines:
        return None
    longest = max(max(t.attribution.elapsed for t in timelines), 1.0)
    plot_w = WIDTH - BAR_LEFT - RIGHT
    scale = plot_w / longest
    rows = []
    for i, found in enumerate(timelines):
        y = BAR_TOP + i * (BAR_HEIGHT + BAR_GAP)
        x, segments = float(BAR_LEFT), []
        for stage, seconds in found.attribution.segments:
            width = seconds * scale
            if width > 0:
                segments.append(Segment(round(x, 1), round(width, 1), stage,
                                        f"{labels.get(stage, stage)}: {seconds:.1f} s"))
            x += width
        how = "from zero" if found.row.from_zero else f"r{found.row.revision}"
        rows.append(BarRow(y, f"{found.row.pod[-22:]} ({how})", segments, found.attribution.elapsed,
                           found.attribution.attributed_share, found.row.complete))
    ticks = [(round(BAR_LEFT + plot_w * f, 1), f"{longest * f:.0f} s") for f in (0, 0.5, 1)]
    height = BAR_TOP + len(rows) * (BAR_HEIGHT + BAR_GAP)
    return StageBars(WIDTH, height, rows, ticks)
