"""An endpoint's traffic as the gateways measured it: series for the page and the API, figures now, folding.

The gateways (``gateway/``) add their counts to :class:`inference.models.TrafficWindow` rows of
:data:`RAW_STEP` seconds, one per endpoint, revision and window (the increments of several
gateway processes add up). This module only reads them, and folds old ones:

* :func:`series` — requests a second, error rate (5xx over requests), latency p50/p95/p99 of whole
  requests and time to first token p50/p95 of streams (read from the merged histograms of
  :mod:`inference.histogram`: merging is exact, so the percentile of a bucket of many windows
  is the percentile of all its requests), output tokens a second and the most requests in
  flight, per ``step`` seconds from ``since``, for the endpoint and for each revision;
* :func:`figures_now` — the same over the last :data:`NOW_SECONDS` (the page's words);
* :func:`compact` — rows of 10 s older than ``SLIPWAY_TRAFFIC_RAW_MINUTES`` folded into rows of
  :data:`MINUTE` (counts and histograms summed, so nothing is lost but the resolution; the most in
  flight is the largest), and rows older than ``SLIPWAY_TRAFFIC_KEEP_DAYS`` pruned. Run single-flight
  by a beat task (:func:`inference.tasks.compact_traffic`), as the GPU telemetry's folding is;
* :func:`gateway_demand` — what the gateways see of endpoints now (:class:`inference.models.GatewayLoad`,
  the fresh rows summed over gateway processes): the sandbox's KEDA reads it through the hook
  :func:`core.backend.register_demand_reader` hands down (the sandbox may not import this app).

Rows per endpoint and revision: 720 of 10 s for the raw two hours, then 1,440 a day.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import FloatField, Func, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from cluster.backends.base import ClusterAddress, EndpointDemand
from inference import histogram
from inference.constants import REF_PREFIX
from inference.models import GatewayLoad, TrafficWindow
from workloads.identity import WorkloadId

#: The step of the rows the gateways write, and of the folded rows (seconds).
RAW_STEP = 10
MINUTE = 60
#: The default step of a series, and the most points one may have (a day minute by minute, and more).
DEFAULT_STEP = 60
MAX_POINTS = 2000
#: The span a series covers when no ``since`` is given: the page's charts.
DEFAULT_SPAN = timedelta(hours=1)
#: The figures "now" are those of this many last seconds.
NOW_SECONDS = 300
#: A GatewayLoad row older than this is a gateway that went away (they write every ~2 s).
FRESH_SECONDS = 10
#: GatewayLoad rows this old are deleted by :func:`prune` (their gateway is long gone).
GONE_AFTER = timedelta(hours=1)
#: Endpoints folded per :func:`compact` batch (bounds the rows one transaction reads).
COMPACT_BATCH = 50

#: What each point of a series holds, in order (the API's field names).
FIGURES = ("requests_per_second", "error_rate", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms",
           "ttft_p50_ms", "ttft_p95_ms", "tokens_per_second", "in_flight")


class TooManyPoints(ValueError):
    """``since`` and ``step`` ask for more than :data:`MAX_POINTS` points."""


@dataclass(frozen=True)
class Windows:
    """Rows of TrafficWindow as arrays, one entry per row: what a read adds up (numpy: a week of minutes of two
    revisions is 20,000 rows, each with two histograms)."""

    revision: np.ndarray  # (n,)
    start: np.ndarray  # (n,) Unix seconds
    counts: np.ndarray  # (n, 4): requests, status_5xx, output_tokens, in_flight_max
    latency: np.ndarray  # (n, histogram.SIZE)
    ttft: np.ndarray  # (n, histogram.SIZE)

    def __len__(self) -> int:
        return len(self.start)


REQUESTS, ERRORS, TOKENS, IN_FLIGHT = range(4)


def _histograms(texts: list[str]) -> np.ndarray:
    """Stored histograms (their JSON text) as an ``(n, SIZE)`` array, an empty or short list counting as zeros.

    Parsed by numpy's C reader at once when every one is whole (as the gateways write them): JSON decoding row by
    row was most of a week's read (1 s of 4 for 40,000 histograms)."""
    if all(text.count(",") == histogram.SIZE - 1 for text in texts):
        flat = np.fromstring(",".join(text.strip()[1:-1] for text in texts), sep=",") if texts else np.zeros(0)
        if flat.size == len(texts) * histogram.SIZE:
            return flat.reshape(len(texts), histogram.SIZE)
    out = np.zeros((len(texts), histogram.SIZE))
    for i, counts in enumerate(json.loads(text) for text in texts):
        if counts:
            out[i, :len(counts)] = counts[:histogram.SIZE]
    return out


class _Epoch(Func):
    """A timestamp column as Unix seconds, computed by the database (a datetime per row costs ~30 µs to load)."""

    output_field = FloatField()

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="EXTRACT(EPOCH FROM %(expressions)s)::float8", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="CAST(strftime('%%%%s', %(expressions)s) AS REAL)", **extra)


def _windows(endpoint, since: datetime, revision: int | None = None) -> Windows:
    rows = TrafficWindow.objects.filter(endpoint=endpoint, team_id=endpoint.team_id, start__gte=since)
    if revision is not None:
        rows = rows.filter(revision=revision)
    found = list(rows.order_by("start").annotate(
        at=_Epoch("start"), latency_text=Cast("latency", TextField()), ttft_text=Cast("ttft", TextField())).values_list(
        "revision", "at", "requests", "status_5xx", "output_tokens", "in_flight_max", "latency_text", "ttft_text"))
    return Windows(np.array([r[0] for r in found], dtype=np.int64),
                   np.array([r[1] for r in found], dtype=np.float64),
                   np.array([r[2:6] for r in found], dtype=np.float64).reshape(len(found), 4),
                   _histograms([r[6] for r in found]), _histograms([r[7] for r in found]))


#: Each bucket's bounds for interpolation: the +Inf bucket reads as the last bound (histogram.quantile's rule).
_LOW = np.array((0.0, *histogram.BOUNDS_MS))
_HIGH = np.array((*histogram.BOUNDS_MS, histogram.BOUNDS_MS[-1]))


def _quantiles(counts: np.ndarray, q: float) -> list[float | None]:
    """:func:`inference.histogram.quantile` of each row of ``counts`` (points × buckets), the same arithmetic in
    the same order (so the figures are those of the function, to the last digit), rounded to 0.1 ms."""
    total = counts.sum(axis=1)
    cumulative = np.cumsum(counts, axis=1)
    rank = q * total
    at = np.argmax(cumulative >= rank[:, None], axis=1)  # the first bucket the rank falls in (it holds counts)
    rows = np.arange(len(counts))
    held = counts[rows, at]
    seen = cumulative[rows, at] - held
    with np.errstate(invalid="ignore", divide="ignore"):
        value = _LOW[at] + (_HIGH[at] - _LOW[at]) * ((rank - seen) / held)
    return [round(float(v), 1) if n else None for v, n in zip(value, total, strict=True)]


def _figures(windows: Windows, index: np.ndarray, seconds: np.ndarray) -> dict[str, list]:
    """The figures of each point (``index``: each row's point, -1 for none; ``seconds``: what each point spans),
    as one list per figure: what uPlot and the API's readers want."""
    points = len(seconds)
    keep = index >= 0
    at = index[keep]

    def summed(column: int) -> np.ndarray:
        return np.bincount(at, weights=windows.counts[keep, column], minlength=points)

    def merged(histograms: np.ndarray) -> np.ndarray:
        out = np.zeros((points, histogram.SIZE))
        np.add.at(out, at, histograms[keep])
        return out

    requests, errors, tokens = summed(REQUESTS), summed(ERRORS), summed(TOKENS)
    in_flight = np.zeros(points)
    np.maximum.at(in_flight, at, windows.counts[keep, IN_FLIGHT])
    latency, ttft = merged(windows.latency), merged(windows.ttft)
    return {
        "requests_per_second": [round(float(r / s), 3) for r, s in zip(requests, seconds, strict=True)],
        "error_rate": [round(float(e / r), 4) if r else None for e, r in zip(errors, requests, strict=True)],
        "latency_p50_ms": _quantiles(latency, 0.50),
        "latency_p95_ms": _quantiles(latency, 0.95),
        "latency_p99_ms": _quantiles(latency, 0.99),
        "ttft_p50_ms": _quantiles(ttft, 0.50),
        "ttft_p95_ms": _quantiles(ttft, 0.95),
        "tokens_per_second": [round(float(t / s), 3) for t, s in zip(tokens, seconds, strict=True)],
        "in_flight": [int(n) for n in in_flight],
    }


def _epoch(at: datetime) -> int:
    return int(at.timestamp())


def floor_to(at: datetime, seconds: int) -> datetime:
    stamp = _epoch(at)
    return datetime.fromtimestamp(stamp - stamp % seconds, tz=UTC)


def raw_cutoff(now: datetime) -> datetime:
    """Rows starting before this are (or are about to be) folded into minutes."""
    return floor_to(now - timedelta(minutes=settings.SLIPWAY_TRAFFIC_RAW_MINUTES), MINUTE)


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def points_between(since: datetime, until: datetime, step: int) -> int:
    """How many points ``step`` makes of ``since``…``until`` (the bound :data:`MAX_POINTS` is checked on)."""
    return max(math.ceil((_epoch(until) - _epoch(floor_to(since, step))) / step), 1)


def _grid(since: datetime, now: datetime, step: int) -> list[tuple[int, int]]:
    """The points' ``(start, width)``: ``step`` over the raw window; before it, over folded minutes, ``step``
    rounded up to whole minutes (a 10 s point of a folded minute would hold a minute's requests)."""
    cutoff = _epoch(raw_cutoff(now))
    coarse = max(MINUTE, math.ceil(step / MINUTE) * MINUTE)
    points = []
    at = _epoch(floor_to(since, coarse if _epoch(since) < cutoff else step))
    end = _epoch(now)
    while at < end:
        width = coarse if at < cutoff else step
        if at < cutoff < at + width:  # the last folded point stops where the raw window starts
            width = cutoff - at
        points.append((at, width))
        at += width
    return points


def series(endpoint, since: datetime | None = None, step: int | None = None, revision: int | None = None,
           now: datetime | None = None) -> dict:
    """The endpoint's traffic as its charts draw it (the API's ``traffic/`` answer).

    ``since`` (default: :data:`DEFAULT_SPAN` ago) and ``step`` (seconds per point, a multiple of
    :data:`RAW_STEP`; default :data:`DEFAULT_STEP`) make at most :data:`MAX_POINTS` points, else
    :class:`TooManyPoints`. ``revision``: that revision's requests only. Every point from ``since``
    to now is there (no requests: a rate of 0 and no percentile). ``t`` is each point's start (Unix
    seconds) and ``seconds`` what it spans: ``step``, but a whole minute at least where the rows are
    folded (older than ``SLIPWAY_TRAFFIC_RAW_MINUTES``). The endpoint's ``in_flight`` is its revisions'
    peaks added (an upper bound when they did not coincide; the same figure before and after folding).
    """
    now = now or timezone.now()
    step = step or DEFAULT_STEP
    since = since or now - DEFAULT_SPAN
    if points_between(since, now, step) > MAX_POINTS:
        raise TooManyPoints(f"At most {MAX_POINTS} points: a step of {step} s from {_iso(since)} makes "
                            f"{points_between(since, now, step)}; ask for a larger step or a later since.")
    grid = _grid(since, now, step)
    starts = np.array([at for at, _width in grid], dtype=np.float64)
    seconds = np.array([width for _at, width in grid], dtype=np.float64)
    first = datetime.fromtimestamp(grid[0][0], tz=UTC) if grid else since
    windows = _windows(endpoint, first, revision)
    index = np.searchsorted(starts, windows.start, side="right") - 1
    total = _figures(windows, index, seconds)
    revisions = []
    for number in sorted(set(windows.revision.tolist())):
        revisions.append({"revision": number, **_figures(windows, np.where(windows.revision == number, index, -1),
                                                        seconds)})
    total["in_flight"] = [sum(r["in_flight"][i] for r in revisions) for i in range(len(grid))]
    return {
        "ref": endpoint.ref,
        "since": _iso(first),
        "until": _iso(now),
        "step": step,
        "revision": revision,
        "t": [at for at, _width in grid],
        "seconds": [width for _at, width in grid],
        "total": total,
        "revisions": revisions,
    }


@dataclass(frozen=True)
class FiguresNow:
    """The last :data:`NOW_SECONDS` of an endpoint (and of each revision): the page's words."""

    seconds: int
    total: dict
    revisions: dict[int, dict]

    def words(self, figures: dict | None = None) -> str:
        """"2.4 requests/s, 0.5 % errors, p50 310 ms, p95 880 ms, p99 1.2 s, first token p50 95 ms, 41 tokens/s"."""
        f = figures or self.total
        if not f["requests_per_second"]:
            return "no requests"
        parts = [f"{f['requests_per_second']:g} requests/s", f"{100 * (f['error_rate'] or 0):.1f} % errors"]
        for name, label in (("latency_p50_ms", "p50"), ("latency_p95_ms", "p95"), ("latency_p99_ms", "p99")):
            if f[name] is not None:
                parts.append(f"{label} {_ms(f[name])}")
        if f["ttft_p50_ms"] is not None:
            parts.append(f"first token p50 {_ms(f['ttft_p50_ms'])}")
        if f["tokens_per_second"]:
            parts.append(f"{f['tokens_per_second']:g} tokens/s")
        return ", ".join(parts)


def _ms(value: float) -> str:
    return f"{value / 1000:.1f} s" if value >= 1000 else f"{value:.0f} ms"


def figures_now(endpoint, now: datetime | None = None) -> FiguresNow:
    """The endpoint's figures over the last :data:`NOW_SECONDS` (whole windows of :data:`RAW_STEP` seconds): one
    point of :func:`series`' rules, for the endpoint and each revision."""
    now = now or timezone.now()
    windows = _windows(endpoint, floor_to(now - timedelta(seconds=NOW_SECONDS), RAW_STEP))
    seconds = np.array([float(NOW_SECONDS)])
    one = np.zeros(len(windows), dtype=np.int64)

    def point(index: np.ndarray) -> dict:
        return {name: values[0] for name, values in _figures(windows, index, seconds).items()}

    revisions = {number: point(np.where(windows.revision == number, one, -1))
                 for number in sorted(set(windows.revision.tolist()))}
    total = point(one)
    total["in_flight"] = sum(figures["in_flight"] for figures in revisions.values())
    return FiguresNow(NOW_SECONDS, total, revisions)


# -- folding 10 s windows into minutes, and retention ---------------------------------------------------
def compact(now: datetime) -> tuple[int, int]:
    """Fold the 10 s rows that start before :func:`raw_cutoff` into minute rows, then prune past
    ``SLIPWAY_TRAFFIC_KEEP_DAYS``. Returns (rows folded, rows pruned).

    Sums stay exact: a minute row holds the sum of its windows' counts and histograms (plus what
    it held already: a late window of a minute folded before adds to it), and the largest
    in-flight figure. The windows are read ``FOR UPDATE`` and deleted in the transaction that
    writes their minutes, so an increment a gateway writes meanwhile waits, then lands in a new
    window, folded next time. Run single-flight (:func:`inference.tasks.compact_traffic`).
    """
    cutoff = raw_cutoff(now)
    folded = 0
    while endpoints := list(TrafficWindow.objects.filter(step=RAW_STEP, start__lt=cutoff).order_by("endpoint_id")
                            .values_list("endpoint_id", flat=True).distinct()[:COMPACT_BATCH]):
        folded += _fold(endpoints, cutoff)
    return folded, prune(now)


SUMMED = ("requests", "status_2xx", "status_4xx", "status_5xx", "streams", "input_tokens", "output_tokens",
          "busy_seconds")


def _fold(endpoints: list[int], cutoff: datetime) -> int:
    with transaction.atomic():
        windows = list(TrafficWindow.objects.select_for_update().filter(
            endpoint_id__in=endpoints, step=RAW_STEP, start__lt=cutoff).order_by("pk"))
        minutes: dict[tuple[int, int, datetime], TrafficWindow] = {}
        for window in windows:
            key = (window.endpoint_id, window.revision, floor_to(window.start, MINUTE))
            if key not in minutes:
                minutes[key] = TrafficWindow(endpoint_id=window.endpoint_id, team_id=window.team_id,
                                             revision=window.revision, start=key[2], step=MINUTE,
                                             latency=histogram.empty(), ttft=histogram.empty())
            _add(minutes[key], window)
        existing = TrafficWindow.objects.select_for_update().filter(
            endpoint_id__in=endpoints, step=MINUTE, start__in={key[2] for key in minutes})
        for row in existing:
            key = (row.endpoint_id, row.revision, row.start)
            if key in minutes:
                _add(minutes[key], row)
        TrafficWindow.objects.bulk_create(
            list(minutes.values()), update_conflicts=True, unique_fields=["endpoint", "revision", "step", "start"],
            update_fields=[*SUMMED, "latency", "ttft", "in_flight_max", "team"])
        TrafficWindow.objects.filter(pk__in=[w.pk for w in windows]).delete()
    return len(windows)


def _add(into: TrafficWindow, row: TrafficWindow) -> None:
    for name in SUMMED:
        setattr(into, name, getattr(into, name) + getattr(row, name))
    into.latency = histogram.merge([into.latency, row.latency])
    into.ttft = histogram.merge([into.ttft, row.ttft])
    into.in_flight_max = max(into.in_flight_max, row.in_flight_max)


def prune(now: datetime) -> int:
    """Delete the rows older than ``SLIPWAY_TRAFFIC_KEEP_DAYS`` (0: keep for ever); returns how many."""
    # A gateway process that went away leaves its load rows (they are read only while fresh).
    GatewayLoad.objects.filter(updated_at__lt=now - GONE_AFTER).delete()
    if settings.SLIPWAY_TRAFFIC_KEEP_DAYS <= 0:
        return 0
    horizon = now - timedelta(days=settings.SLIPWAY_TRAFFIC_KEEP_DAYS)
    deleted, _ = TrafficWindow.objects.filter(start__lt=horizon).delete()
    return deleted


# -- what the gateways see now: the autoscaler's figures ------------------------------------------------
def gateway_demand(addresses: Iterable[ClusterAddress], now: datetime | None = None
                   ) -> dict[ClusterAddress, EndpointDemand]:
    """Per endpoint address: its requests held, in flight and a second, summed over the gateways whose row is
    fresh (written in the last :data:`FRESH_SECONDS`). One query. Addresses of other kinds, and endpoints no
    gateway reports, are left out (no gateway sees them: no demand)."""
    now = now or timezone.now()
    wanted = set(addresses)
    pks = set()
    for address in wanted:
        identity = WorkloadId.from_object_name(address.object_name)
        if identity is not None and identity.prefix == REF_PREFIX:
            pks.add(identity.pk)
    if not pks:
        return {}
    found: dict[ClusterAddress, EndpointDemand] = {}
    rows = GatewayLoad.objects.filter(endpoint_id__in=pks, updated_at__gte=now - timedelta(
        seconds=FRESH_SECONDS)).values_list("endpoint_id", "endpoint__team__namespace", "held", "in_flight",
                                            "requests_per_second")
    for endpoint_id, namespace, held, in_flight, rate in rows:
        # The endpoint's own address: the same object name in another namespace is not this endpoint.
        address = ClusterAddress(namespace, WorkloadId(REF_PREFIX, endpoint_id).object_name)
        if address not in wanted:
            continue
        seen = found.get(address, EndpointDemand())
        found[address] = EndpointDemand(seen.held + held, seen.in_flight + in_flight,
                                        round(seen.requests_per_second + rate, 3))
    return found
