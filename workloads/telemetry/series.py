"""GPU telemetry as people see it: a workload's series as its charts draw them, and its GPUs' figures now.

:func:`series` reads a workload's rows (:class:`workloads.models.GpuTelemetry`: minute rows for
the last hour, day rows of ``SLIPWAY_TELEMETRY_STEP_MINUTES`` slots before), lays every GPU's
figures on one time axis and downsamples them with LTTB (:mod:`core.lttb`) to the chart's width —
so a week-long run draws as fast as an hour-long one. Every kind's page (a run's, an endpoint's, a
workspace's) embeds its answer for its charts and ``GET /<kind>/{id}/telemetry/`` returns it: one
function, one answer.

:func:`now_figures` is each workload's GPUs now (its newest minute): the figure beside the charts
and the ``gpu_utilization`` / ``gpu_memory_*_gb`` of the API that ``slipway top`` prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
from django.db import connection

from core.lttb import lttb
from workloads.models import GpuTelemetry
from workloads.telemetry import readings as telemetry

#: Points a chart is downsampled to without ``step``: about its plot's width in pixels (two charts a row).
CHART_POINTS = 600
#: The most points a ``step`` may ask for (the least: 3, LTTB's first, one bucket, last).
MAX_POINTS = 4000
#: What the charts draw, in order: ``(series, title, unit, decimals)`` — ``fb_total_mib`` is used + free.
CHARTS = (
    ("util_pct", "Utilization", "%", 1),
    ("fb_used_mib", "Memory used", "MiB", 0),
    ("fb_total_mib", "Memory total", "MiB", 0),
    ("temp_c", "Temperature", "°C", 1),
    ("power_w", "Power", "W", 1),
)
#: A reading older than this is not "now" (a workload that stopped, or a metrics outage).
NOW_WITHIN = timedelta(minutes=3)
MIB_PER_GB = 1024  # DCGM's frame buffer figures are MiB; the API's GB are GiB, as nvidia-smi's


def _stored(team_id: int, ref: str, since: datetime | None) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Every stored point of the workload from ``since``: ``(times (n,), gpus, values (series, gpus, n))``."""
    rows = _rows(team_id, ref, since - telemetry.DAY if since is not None else None)  # a day row may begin before it
    gpus: list[str] = []
    index: dict[str, int] = {}
    for _start, _step, _slots, ids, _data in rows:
        for gpu in ids:
            if gpu not in index:
                index[gpu] = len(gpus)
                gpus.append(gpu)
    total = sum(slots for _start, _step, slots, _ids, _data in rows)
    times = np.empty(total)
    values = np.full((len(telemetry.SERIES), len(gpus), total), np.nan, dtype=np.float32)
    at = 0
    for (step, slots, ids), run in _runs(rows):  # rows alike (a long run's days) decoded at once
        count = len(run) * slots
        starts = np.array([start.timestamp() for start, *_rest in run])
        times[at:at + count] = (starts[:, None] + np.arange(slots) * step).ravel()
        block = np.frombuffer(b"".join(data for *_rest, data in run), dtype="<f4")
        block = block.reshape(len(run), len(telemetry.SERIES), len(ids), slots).transpose(1, 2, 0, 3)
        values[:, [index[gpu] for gpu in ids], at:at + count] = block.reshape(len(telemetry.SERIES), len(ids), count)
        at += count
    keep = ~np.isnan(values).all(axis=(0, 1))  # a day's slots before or after the workload ran
    if since is not None:
        keep &= times >= since.timestamp()
    times, values = times[keep], values[:, :, keep]
    if len(times) > 1 and not (np.diff(times) > 0).all():
        order = np.argsort(times, kind="stable")
        times, values = times[order], values[:, :, order]
        # One point per time (a minute not folded yet beside its day's slot: the minute).
        last = np.append(times[1:] != times[:-1], True)
        times, values = times[last], values[:, :, last]
    return times, gpus, values


#: The rows of one workload, oldest first (a day row before the minutes of its day).
ROWS_SQL = ('SELECT "start", "step", "slots", "gpus", "values" FROM "workloads_gputelemetry" '
            'WHERE "team_id" = %s AND "ref" = %s AND "start" >= %s ORDER BY "start", "step" DESC')


def _rows(team_id: int, ref: str, since: datetime | None) -> list[tuple]:
    """``(start, step, slots, gpus, values)`` of the workload's rows from ``since``. On PostgreSQL in binary:
    a long run's rows are megabytes of ``values``, which the text protocol would send as hex, twice the size
    to move and to parse (bench/telemetry.py)."""
    since = since or datetime(1970, 1, 1, tzinfo=UTC)
    if connection.vendor == "postgresql":
        connection.ensure_connection()
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(ROWS_SQL, (team_id, ref, since), binary=True)
            return cursor.fetchall()
    return list(GpuTelemetry.objects.filter(team_id=team_id, ref=ref, start__gte=since).order_by("start", "-step")
                .values_list("start", "step", "slots", "gpus", "values"))


def _runs(rows: list[tuple]):
    """``rows`` in stretches of the same step, slot count and GPUs: ``((step, slots, gpus), stretch)``."""
    stretch: list[tuple] = []
    shape = None
    for row in rows:
        key = (row[1], row[2], tuple(row[3]))
        if key != shape and stretch:
            yield shape, stretch
            stretch = []
        shape = key
        stretch.append(row)
    if stretch:
        yield shape, stretch


def _chart_rows(values: np.ndarray) -> np.ndarray:
    """``(charts × gpus, n)``: each chart's line per GPU, in :data:`CHARTS` order."""
    used, free = values[telemetry.FB_USED], values[telemetry.FB_FREE]
    lines = {"util_pct": values[telemetry.UTIL], "fb_used_mib": used, "fb_total_mib": used + free,
             "temp_c": values[telemetry.TEMP], "power_w": values[telemetry.POWER]}
    return np.concatenate([lines[name] for name, _title, _unit, _decimals in CHARTS], axis=0)


def points_for(span_seconds: float, step: int | None) -> int:
    """How many points a series is downsampled to: one per ``step`` seconds of its span, else the chart's width."""
    if step is None:
        return CHART_POINTS
    return min(max(math.ceil(span_seconds / step) + 1, 3), MAX_POINTS)


def _rounded(values: np.ndarray, decimals: int) -> list[float | int | None]:
    """The values as JSON gives them: rounded (whole MiB; tenths of a percent, degree or watt), NaN as null."""
    rounded = np.round(values, decimals).tolist()
    if decimals:
        return [None if v != v else v for v in rounded]
    return [None if v != v else int(v) for v in rounded]


def _iso(at: datetime) -> str:
    """RFC 3339 to the second, in UTC: the same words in the page and the API."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def series(workload, since: datetime | None = None, step: int | None = None) -> dict:
    """The workload's GPU telemetry as its charts draw it (the API's ``telemetry/`` answer).

    ``since``: only points from then (default: its whole life). ``step``: about one point per this
    many seconds (default: :data:`CHART_POINTS` over the span). Each chart's lines — one per GPU —
    are downsampled by LTTB together; a ``null`` value is a gap (nothing reported then).
    """
    times, gpus, values = _stored(workload.team_id, workload.ref, since)
    points = points_for(float(times[-1] - times[0]) if len(times) else 0.0, step)
    kept = lttb(times, _chart_rows(values), points) if len(times) else []
    charts = {}
    for c, (name, _title, _unit, decimals) in enumerate(CHARTS):
        lines = []
        for g, gpu in enumerate(gpus):
            xs, vs = kept[c * len(gpus) + g] if kept else (np.empty(0), np.empty(0))
            if len(xs) and not np.isnan(vs).all():
                lines.append({"gpu": gpu, "t": xs.astype(np.int64).tolist(), "v": _rounded(vs, decimals)})
        charts[name] = lines
    return {
        "ref": workload.ref,
        "since": _iso(since) if since is not None else None,
        "until": _iso(datetime.fromtimestamp(float(times[-1]), tz=UTC)) if len(times) else None,
        "points": points,
        "gpus": gpus,
        "series": charts,
    }


@dataclass(frozen=True)
class GpuNow:
    """A workload's GPUs at its newest reading: mean utilization, memory used and size summed over them."""

    at: datetime
    util_pct: float | None
    fb_used_mib: float | None
    fb_total_mib: float | None
    gpus: int

    @property
    def used_gb(self) -> float | None:
        return None if self.fb_used_mib is None else round(self.fb_used_mib / MIB_PER_GB, 1)

    @property
    def total_gb(self) -> float | None:
        return None if self.fb_total_mib is None else round(self.fb_total_mib / MIB_PER_GB, 1)

    @property
    def words(self) -> str:
        """"88.5 % busy, 31.2 of 80.0 GiB memory in use (2 GPUs)" — the page's line; the API gives the numbers."""
        parts = [f"{self.util_pct:g} % busy" if self.util_pct is not None else "utilization not reported"]
        if self.used_gb is not None:
            parts.append(f"{self.used_gb:g} of {self.total_gb:g} GiB memory in use" if self.total_gb is not None
                         else f"{self.used_gb:g} GiB memory in use")
        return f"{', '.join(parts)} ({self.gpus} GPU{'s' if self.gpus != 1 else ''})"


def _summary(values: np.ndarray, at: datetime) -> GpuNow:
    """One minute row's ``(series, gpus)`` figures as a :class:`GpuNow` (NaN ones left out)."""

    def known(row: np.ndarray) -> np.ndarray:
        return row[~np.isnan(row)]

    util, used = known(values[telemetry.UTIL]), known(values[telemetry.FB_USED])
    sizes = values[telemetry.FB_USED] + values[telemetry.FB_FREE]
    # The size only when every GPU with memory in use tells its own (else "of" would compare unlike sums).
    total = float(np.nansum(sizes)) if len(used) and not np.isnan(sizes[~np.isnan(values[telemetry.FB_USED])]).any() \
        else None
    return GpuNow(at, round(float(util.mean()), 1) if len(util) else None,
                  float(used.sum()) if len(used) else None, total, values.shape[1])


def telemetry_context(workload, api_url: str, now: datetime) -> dict:
    """A workload page's GPU telemetry card (``workloads/_telemetry.html``): the charts' series (the
    API's answer at ``api_url``, which the page polls while the workload goes on) and its GPUs now."""
    return {"telemetry": series(workload), "telemetry_url": api_url, "telemetry_polling": not workload.is_final,
            "gpu_now": now_figures([workload], now).get(workload.ref)}


def now_figures(workloads, now: datetime) -> dict[str, GpuNow]:
    """Per ref: the GPUs' figures of each workload's newest minute within :data:`NOW_WITHIN` (one query).

    The figures belong to an attempt: only the minutes since its current attempt's pods started
    (:attr:`~workloads.models.Workload.attempt_started`, to the minute) count, and work queued again
    after a preemption, which holds no GPU now, has none — not its last attempt's (issue 46)."""
    # Work whose attempt has not started has no telemetry: it costs no query (a submission's answer reads nothing back).
    since: dict[str, tuple[int, datetime]] = {
        w.ref: (w.team_id, telemetry.floor_to(w.attempt_started, telemetry.MINUTE))
        for w in workloads if w.attempt_started is not None}
    if not since:
        return {}
    rows = (GpuTelemetry.objects.filter(ref__in=list(since), step=telemetry.MINUTE, start__gte=now - NOW_WITHIN)
            .order_by("ref", "-start").values_list("ref", "team_id", "start", "gpus", "values"))
    found: dict[str, GpuNow] = {}
    for ref, team_id, start, gpus, data in rows:  # a few minutes each: the newest comes first
        owner, first = since[ref]
        if ref not in found and owner == team_id and start >= first:
            found[ref] = _summary(telemetry.unpack(data, len(gpus), 1)[:, :, 0], start)
    return found
