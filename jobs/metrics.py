"""Training metrics and progress of runs (docs/metrics.md): what a run reports, how it is stored and read.

Two ways in, one store:

* **The API** — ``POST /api/v1/runs/{id}/metrics/`` with the run's own token (:mod:`jobs.checkpoints`):
  a batch of ``{step, name, value}`` points and an optional ``progress: {step, total}``
  (:func:`report_metrics`; validated whole, 400 with field errors, nothing half-written).
* **Its stdout** — lines in Kubeflow Katib's convention (:mod:`jobs.metric_lines`), read by
  :func:`read_run_logs`, a beat task every ``SLIPWAY_RUN_METRICS_READ_SECONDS``. The cost is bounded:
  at most ``SLIPWAY_RUN_METRICS_READ_RUNS`` runs a cycle (those read longest ago first), and per run
  one LIST of its pods and one log read from where the last one ended (``sinceTime``, the
  cluster's own time stamp of the last line read), of at most ``SLIPWAY_RUN_METRICS_READ_LINES`` lines
  (the newest) and 10 MiB. A run is read while it runs, and once more after it ends (its last lines).

Stored per (run, name, step) (:class:`jobs.models.RunMetric`); a value reported again for a step
replaces the stored one (the last write wins: the same batch sent twice, or the same lines read
twice, changes nothing; an attempt that counts steps again writes over the older values). A run
has at most :data:`MAX_NAMES` metric names: the API refuses more (400), the stdout reader drops
points of names past them; and at most ``SLIPWAY_RUN_METRICS_MAX_POINTS`` points (the API answers
409, the reader stops storing new ones), reported through the API at most ``SLIPWAY_RUN_TOKEN_RATE``
requests of the run token a minute (:func:`token_wait`, 429). Progress goes through :func:`jobs.progress.advance`, under the row's
lock (the API and the reader may both write it). Points of runs finished more than
``SLIPWAY_RUN_METRICS_KEEP_DAYS`` days ago are deleted (:func:`prune`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, F, FloatField, Max, Min, Q
from django.db.models.functions import Cast, Floor
from django.utils import timezone

from jobs import charts, metric_lines, progress
from jobs.constants import RunState
from jobs.metric_lines import NAME, Point, ProgressMark
from jobs.models import RunLogCursor, RunMetric, RunProgress, TrainingRun
from workloads import services as workloads

logger = logging.getLogger(__name__)

#: Most points in one API call.
MAX_BATCH = 1000
#: Most distinct metric names a run may have.
MAX_NAMES = 32
#: Most points of one name an API read returns (``?limit=``), and its default.
MAX_READ, DEFAULT_READ = 10_000, 1000
#: A run that ended is read once more within this long of its end (its last lines), then never.
LAST_READ_WITHIN = timedelta(minutes=30)
#: Errors listed per answer (a batch of 1000 bad points would otherwise answer 1000 messages).
MAX_ERRORS = 20


class MetricsConflict(Exception):
    """The run ended: its metrics are no longer recorded (the API answers 409)."""


class MetricsBudgetSpent(MetricsConflict):
    """The batch would take the run past ``SLIPWAY_RUN_METRICS_MAX_POINTS`` stored points (409, nothing recorded)."""


@dataclass(frozen=True)
class Batch:
    points: list[Point]
    progress: ProgressMark | None


# 1. Reports through the API ---------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_batch(data: Any) -> Batch:
    """``{"points": [{"step", "name", "value"}, …], "progress": {"step", "total"}}`` → :class:`Batch`.

    Raises ``ValidationError`` with field errors (``points[3].value``) — every one found, up to
    :data:`MAX_ERRORS` — and nothing is recorded then.
    """
    if not isinstance(data, Mapping):
        raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        if sum(len(v) for v in errors.values()) < MAX_ERRORS:
            errors.setdefault(field, []).append(message)

    unknown = sorted(str(key) for key in data if key not in ("points", "progress"))
    if unknown:
        add("non_field_errors", f"Unknown field(s): {', '.join(unknown)[:200]}.")
    raw_points = data.get("points", [])
    if raw_points is None:
        raw_points = []
    if not isinstance(raw_points, list):
        add("points", "Must be a list of {\"step\", \"name\", \"value\"} objects.")
        raw_points = []
    elif len(raw_points) > MAX_BATCH:
        add("points", f"At most {MAX_BATCH} points a call; send the rest in another.")
        raw_points = []
    points = []
    for index, item in enumerate(raw_points):
        where = f"points[{index}]"
        if not isinstance(item, Mapping):
            add(where, "Must be an object with step, name and value.")
            continue
        extra = sorted(str(key) for key in item if key not in ("step", "name", "value"))
        if extra:
            add(where, f"Unknown field(s): {', '.join(extra)[:200]}.")
        step, name, value = item.get("step"), item.get("name"), item.get("value")
        ok = True
        if not (isinstance(step, int) and not isinstance(step, bool)) or not 0 <= step <= metric_lines.MAX_STEP:
            add(f"{where}.step", f"Must be a whole number from 0 to {metric_lines.MAX_STEP}.")
            ok = False
        if not isinstance(name, str) or not NAME.fullmatch(name) or name == "step":
            add(f"{where}.name", f"Must be a metric name: a letter or _, then letters, digits, _ or -, at most "
                                 f"{metric_lines.MAX_NAME} characters (not \"step\").")
            ok = False
        if not _is_number(value) or not _finite(value):
            add(f"{where}.value", "Must be a finite number.")
            ok = False
        if ok:
            points.append(Point(step, name, float(value)))
    mark = None
    raw_progress = data.get("progress")
    if raw_progress is not None:
        if not isinstance(raw_progress, Mapping) or set(raw_progress) - {"step", "total"}:
            add("progress", "Must be an object with step and total.")
        else:
            step, total = raw_progress.get("step"), raw_progress.get("total")
            step_ok = isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= metric_lines.MAX_STEP
            total_ok = isinstance(total, int) and not isinstance(total, bool) and 1 <= total <= metric_lines.MAX_STEP
            if not step_ok:
                add("progress.step", f"Must be a whole number from 0 to {metric_lines.MAX_STEP}.")
            if not total_ok:
                add("progress.total", f"Must be a whole number from 1 to {metric_lines.MAX_STEP}.")
            if step_ok and total_ok and step > total:
                add("progress.step", "Must be at most total.")
            if step_ok and total_ok and step <= total:
                mark = ProgressMark(step, total)
    if not errors and not points and mark is None:
        add("non_field_errors", "Send points, progress or both.")
    if errors:
        raise ValidationError(errors)
    return Batch(points, mark)


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past the float range
        return False


def report_metrics(run: TrainingRun, data: Any, now: datetime | None = None) -> int:
    """Record a batch the run reported with its token; the points recorded.

    ``ValidationError`` for bad input or a batch that would give the run more than :data:`MAX_NAMES`
    names (nothing recorded); :class:`MetricsConflict` once the run has ended.
    """
    batch = parse_batch(data)
    now = now or timezone.now()
    if run.is_final:
        raise MetricsConflict(f"The run already finished ({run.state}); its metrics are no longer recorded.")
    return record(run, batch.points, [batch.progress] if batch.progress else [], now, strict=True)


# 2. The store ------------------------------------------------------------------------------------


def record(run: TrainingRun, points: list[Point], marks: list[ProgressMark], now: datetime, *,
           strict: bool = False) -> int:
    """Store ``points`` (the last of a (name, step) wins) and fold ``marks`` into the run's progress.

    Names past :data:`MAX_NAMES`: ``strict`` refuses the batch (``ValidationError`` on ``points``),
    else their points are dropped. A point or mark without a time is ``now``'s. Returns the points stored.
    """
    latest: dict[tuple[str, int], Point] = {}
    for point in points:  # one row per (name, step) in a statement: PostgreSQL updates a row once
        latest[(point.name, point.step)] = point
    names = {name for name, _step in latest}
    if names:
        known = set(RunMetric.objects.filter(run=run).values_list("name", flat=True).distinct())
        room = sorted(names - known)[: max(MAX_NAMES - len(known), 0)]
        if len(known | names) > MAX_NAMES:
            if strict:
                raise ValidationError({"points": [
                    f"A run may have at most {MAX_NAMES} metric names; this run has {len(known)} "
                    f"and the batch adds {len(names - known)}."]})
            latest = {key: point for key, point in latest.items() if key[0] in known or key[0] in room}
    latest = _within_budget(run, latest, strict)
    rows = [RunMetric(run=run, name=p.name, step=p.step, value=p.value, recorded_at=p.at or now)
            for p in latest.values()]
    with transaction.atomic():
        if rows:
            RunMetric.objects.bulk_create(rows, batch_size=MAX_BATCH, update_conflicts=True,
                                          unique_fields=["run", "name", "step"], update_fields=["value", "recorded_at"])
        if marks:
            _advance(run, marks, now)
    return len(rows)


def _within_budget(run: TrainingRun, latest: dict[tuple[str, int], Point], strict: bool) -> dict[tuple[str, int], Point]:
    """``latest`` when storing it keeps the run within ``SLIPWAY_RUN_METRICS_MAX_POINTS`` rows (a point
    that replaces a stored one adds none). Past it: ``strict`` refuses the batch
    (:class:`MetricsBudgetSpent`), else the new points that do not fit are dropped (security review 5 #7).
    One COUNT over the run's index a batch; two batches at once may overshoot by one batch."""
    budget = settings.SLIPWAY_RUN_METRICS_MAX_POINTS
    if not budget or not latest:
        return latest
    stored = RunMetric.objects.filter(run=run).count()
    if stored + len(latest) <= budget:
        return latest
    names, steps = {name for name, _s in latest}, {step for _n, step in latest}
    present = set(RunMetric.objects.filter(run=run, name__in=names, step__in=steps).values_list("name", "step"))
    new = [key for key in latest if key not in present]
    room = max(budget - stored, 0)
    if len(new) <= room:
        return latest
    if strict:
        raise MetricsBudgetSpent(
            f"A run stores at most {budget} metric points (SLIPWAY_RUN_METRICS_MAX_POINTS); this run has {stored} "
            f"and the batch adds {len(new)} new ones, so nothing of it was recorded. Report less often, or fewer names.")
    logger.warning("Run %s is at its %s metric points: %s new points of its log dropped", run.pk, budget,
                   len(new) - room)
    dropped = set(new[room:])
    return {key: point for key, point in latest.items() if key not in dropped}


def token_wait(token_hash: str, now: float | None = None) -> int:
    """Count one request of the run token whose SHA-256 is ``token_hash``; the seconds it must wait (0: go on).

    At most ``SLIPWAY_RUN_TOKEN_RATE`` requests a minute, counted in the shared cache per (token,
    calendar minute): a fixed window, so a burst at a minute's turn may reach twice the rate for a
    moment. The cache unreachable: allowed (the batch and the point budget still bound it)."""
    rate = settings.SLIPWAY_RUN_TOKEN_RATE
    if not rate:
        return 0
    now = time.time() if now is None else now
    window = int(now // 60)
    key = f"slipway:run-token-rate:{token_hash[:32]}:{window}"
    try:
        count = 1 if cache.add(key, 1, timeout=120) else cache.incr(key)
    except ValueError:  # expired between add and incr: a new window
        count = 1
    except Exception:
        logger.warning("Run token rate: cache unreachable, a request not counted")
        return 0
    return 0 if count <= rate else max(math.ceil((window + 1) * 60 - now), 1)


def _advance(run: TrainingRun, marks: list[ProgressMark], now: datetime) -> None:
    """Fold ``marks`` into the run's progress row, created on its first report (inside the caller's transaction)."""
    row = RunProgress.objects.select_for_update().filter(run=run).first()
    if row is None:
        try:
            with transaction.atomic():
                first = marks[0]
                at = first.at or now
                row = RunProgress.objects.create(run=run, step=first.step, total=first.total, at=at,
                                                 window_step=first.step, window_at=at)
                marks = marks[1:]
        except IntegrityError:  # the other writer made it first: take it, locked
            row = RunProgress.objects.select_for_update().get(run=run)
    state = state_of(row)
    for mark in marks:
        state = progress.advance(state, mark.step, mark.total, mark.at or now, run.attempt_started)
    RunProgress.objects.filter(run=run).update(step=state.step, total=state.total, at=state.at,
                                              window_step=state.window_step, window_at=state.window_at,
                                              rate=state.rate)


def state_of(row: RunProgress | None) -> progress.Progress | None:
    if row is None:
        return None
    return progress.Progress(row.step, row.total, row.at, row.window_step, row.window_at, row.rate)


# 3. Reading ----------------------------------------------------------------------------------------


def earlier_attempt(run: TrainingRun, state: progress.Progress | None) -> bool:
    """``state`` (the run's stored progress) is its last attempt's, not the current one's
    (:func:`jobs.progress.earlier_attempt`)."""
    return progress.earlier_attempt(state, run.attempt, run.attempt_started)


def _states(runs: list[TrainingRun]) -> dict[int, progress.Progress]:
    """The stored progress of each of ``runs`` that reported any, in one query."""
    return {row.run_id: state_of(row) for row in RunProgress.objects.filter(run_id__in=[run.pk for run in runs])}


def picked(run: TrainingRun, state: progress.Progress | None, now: datetime) -> tuple[progress.Eta | None, str]:
    """The run's one ETA and its source (:func:`jobs.progress.pick`: its own reports, else its trainer's)."""
    own = progress.eta(state, now, earlier_attempt(run, state))
    return progress.pick(own, progress.trainer_eta(run.trainer_report, now))


def etas(runs: Iterable[TrainingRun], now: datetime | None = None) -> dict[int, progress.Eta]:
    """``{run id: ETA}`` of the ``runs`` that reported progress (or whose trainer did), in one query."""
    now = now or timezone.now()
    runs = list(runs)
    states = _states(runs)
    found = {}
    for run in runs:
        eta, _source = picked(run, states.get(run.pk), now)
        if eta is not None:
            found[run.pk] = eta
    return found


def names(run: TrainingRun) -> list[str]:
    """The run's metric names, sorted (the index gives them without reading the points)."""
    return sorted(RunMetric.objects.filter(run=run).values_list("name", flat=True).distinct())


def series(run_ids: Iterable[int], names_wanted: Iterable[str] | None = None, since_step: int | None = None,
           limit: int | None = None) -> dict[int, dict[str, list[tuple[int, float]]]]:
    """``{run id: {name: [(step, value), …]}}`` in step order, one query.

    ``since_step``: only steps after it (a follower's next read); ``limit``: at most that many
    points of each name, the first ones after ``since_step`` (ask again from the last step for more).
    """
    rows = RunMetric.objects.filter(run_id__in=list(run_ids))
    if names_wanted is not None:
        rows = rows.filter(name__in=list(names_wanted))
    if since_step is not None:
        rows = rows.filter(step__gt=since_step)
    found: dict[int, dict[str, list[tuple[int, float]]]] = {}
    for run_id, name, step, value in rows.order_by("run_id", "name", "step").values_list("run_id", "name", "step",
                                                                                         "value").iterator(2000):
        points = found.setdefault(run_id, {}).setdefault(name, [])
        if limit is None or len(points) < limit:
            points.append((step, value))
    return found


# 4. The stdout reader -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadFigures:
    runs: int
    lines: int
    points: int


def runs_to_read(now: datetime, limit: int) -> list[TrainingRun]:
    """The runs whose logs the reader reads this cycle: running, or ended lately and not read since
    (their last lines), those read longest ago (or never) first, at most ``limit``."""
    recent = Q(state__in=TrainingRun.FINAL_STATES, finished_at__gte=now - LAST_READ_WITHIN, cluster__isnull=False)
    candidates = (TrainingRun.objects.filter(Q(state=RunState.RUNNING) | recent)
                  .exclude(log_cursor__done=True)
                  .select_related("team", "cluster", "log_cursor")
                  .order_by("log_cursor__read_at", "pk"))  # NULLs (never read) last in PostgreSQL's ascending order
    never = list(candidates.filter(log_cursor__isnull=True)[:limit])
    return never + list(candidates.filter(log_cursor__isnull=False)[: max(limit - len(never), 0)])


def read_log(run: TrainingRun, now: datetime, lines_max: int) -> tuple[int, int]:
    """Read the new lines of ``run``'s main log and record what they report: ``(lines, points)``."""
    try:
        cursor = run.log_cursor
    except RunLogCursor.DoesNotExist:
        cursor = None
    since = cursor.since if cursor is not None and cursor.since is not None else (
        run.attempt_started_at or run.started_at or now - LAST_READ_WITHIN)
    lines = workloads.logs(run, tail=lines_max, since=since).lines
    parsed = metric_lines.parse_lines(lines)
    stored = record(run, parsed.points, parsed.progress, now)
    RunLogCursor.objects.update_or_create(run=run, defaults={
        "since": parsed.last_at or since, "read_at": now, "done": run.is_final})
    return len(lines), stored


def read_run_logs(now: datetime | None = None) -> ReadFigures:
    """One cycle of the stdout reader (the module docstring: which runs, at what cost)."""
    now = now or timezone.now()
    runs = runs_to_read(now, settings.SLIPWAY_RUN_METRICS_READ_RUNS)
    lines = points = 0
    for run in runs:
        try:
            read, stored = read_log(run, now, settings.SLIPWAY_RUN_METRICS_READ_LINES)
        except Exception:  # one run's bad read must not stop the others' (the next cycle tries it again)
            logger.exception("metrics: reading the log of run %s failed", run.pk)
            continue
        lines += read
        points += stored
    return ReadFigures(len(runs), lines, points)


def prune(now: datetime | None = None) -> int:
    """Delete the points of runs finished more than ``SLIPWAY_RUN_METRICS_KEEP_DAYS`` days ago (0: none); how many."""
    days = settings.SLIPWAY_RUN_METRICS_KEEP_DAYS
    if days <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=days)
    deleted, _ = RunMetric.objects.filter(run__finished_at__lt=cutoff).delete()
    return deleted


def progress_answer(run: TrainingRun, state: progress.Progress | None, now: datetime) -> dict | None:
    """A run's progress as the API answers it (``progress`` of a run and of ``metrics/``); None without any.
    From the source :func:`picked` chooses (``source``): the run's own reports (``step`` of ``total``; with
    ``last_attempt`` true, its last attempt's step and percent, no rate, no ETA), or its trainer's status (``step``
    None, ``percent`` and the ETA the trainer gave). ``trainer_metrics``: the trainer's latest metrics, if any."""
    eta, source = picked(run, state, now)
    if eta is None:
        return None
    report = run.trainer_report
    own = source == "run" and state is not None
    return {"source": source, "step": state.step if own else None, "total": state.total if own else None,
            "percent": round(eta.percent, 1), "rate_per_second": eta.rate,
            "updated_at": state.at if own else report.at, "eta": eta.at,
            "eta_seconds": max(round((eta.at - now).total_seconds()), 0) if eta.at is not None and not eta.done else None,
            "done": eta.done, "stale": eta.stale, "last_attempt": eta.earlier,
            "trainer_metrics": dict(report.metrics) if report is not None else {}}


def progress_answers(runs: Iterable[TrainingRun], now: datetime | None = None) -> dict[int, dict]:
    """``{run id: progress_answer}`` of the ``runs`` with any progress, one query."""
    now = now or timezone.now()
    runs = list(runs)
    states = _states(runs)
    answers = {run.pk: progress_answer(run, states.get(run.pk), now) for run in runs}
    return {pk: answer for pk, answer in answers.items() if answer is not None}


def chart_series(run_ids: Iterable[int], names_wanted: Iterable[str] | None = None,
                 buckets: int = charts.BUCKETS) -> dict[int, dict[str, list[tuple[int, float]]]]:
    """``{run id: {name: [(step, value), …]}}`` thinned for a chart of about ``buckets`` columns.

    A series of at most ``2 × buckets`` points comes whole; a longer one as the lowest and the
    highest value of each of ``buckets`` equal step ranges (both at the range's middle step: the
    line spans what the range held, so no spike is averaged away), counted by the database. One
    query for the ranges, one for the short series, one per long series.
    """
    rows = RunMetric.objects.filter(run_id__in=list(run_ids))
    if names_wanted is not None:
        rows = rows.filter(name__in=list(names_wanted))
    ranges = list(rows.values("run_id", "name").annotate(lo=Min("step"), hi=Max("step"), n=Count("id"))
                  .order_by("run_id", "name"))
    found: dict[int, dict[str, list[tuple[int, float]]]] = {}
    short = Q(pk__in=[])
    for r in ranges:
        found.setdefault(r["run_id"], {})[r["name"]] = []
        if r["n"] <= 2 * buckets:
            short |= Q(run_id=r["run_id"], name=r["name"])
    for run_id, name, step, value in (rows.filter(short).order_by("run_id", "name", "step")
                                      .values_list("run_id", "name", "step", "value")):
        found[run_id][name].append((step, value))
    for r in ranges:
        if r["n"] <= 2 * buckets:
            continue
        # In double precision: rows stored before steps were capped at 2**53 reach 2**63 - 1, where
        # (step - lo) * buckets overflows a bigint (security review 5 #6); a bucket needs no exact step.
        span = float(r["hi"] - r["lo"] + 1)
        bucket = Floor((Cast(F("step"), FloatField()) - float(r["lo"])) * float(buckets) / span)
        thinned = (rows.filter(run_id=r["run_id"], name=r["name"]).annotate(bucket=bucket).values("bucket")
                   .annotate(low=Min("value"), high=Max("value"), first=Min("step"), last=Max("step"))
                   .order_by("bucket"))
        points = found[r["run_id"]][r["name"]]
        for b in thinned:
            middle = (b["first"] + b["last"]) // 2
            points += [(middle, b["high"]), (middle, b["low"])] if b["high"] != b["low"] else [(middle, b["low"])]
    return found
