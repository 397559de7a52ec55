"""GPU telemetry of workloads: read once per reconcile cycle, kept as a compact time series.

Each cycle the backend answers one query for every observed workload's GPUs
(:meth:`cluster.backends.base.ClusterBackend.gpu_telemetry`: the DCGM exporter's utilization,
frame buffer used and free, temperature and power, per GPU). :func:`measure` asks; the idle
measure takes its utilization from the same answer (:func:`workloads.idle.utilization`), and
:func:`record` keeps it, then the cycle hands it on as ``report.telemetry`` (alerts read it there).

**Storage** (:class:`workloads.models.GpuTelemetry`, docs/metrics.md "GPU telemetry"): one
*minute row* per workload and minute — all its GPUs, the minute's last reading (each is already
Prometheus' average over :data:`cluster.metrics.WINDOW`) — written by one statement per cycle.
Minutes older than ``SLIPWAY_TELEMETRY_RAW_MINUTES`` are folded by :func:`compact` (a beat task)
into one *day row* per workload and day, a slot per ``SLIPWAY_TELEMETRY_STEP_MINUTES``: the
slot's mean utilization and power, its highest memory used (lowest free) and temperature — the
peaks are what runs out of memory and what throttles. Rows older than
``SLIPWAY_TELEMETRY_KEEP_DAYS`` are pruned by the same task.

Rows per week-long 8-GPU run: 60 minute rows + 8 day rows (each 5 series × 8 GPUs × 144 slots
× 4 bytes, 23 KB) ≈ 68 rows and 190 KB, where a row per GPU and minute would be 80,640.
"""

from __future__ import annotations

import logging
import warnings
from collections import defaultdict
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import Q

from cluster.backends.base import ClusterAddress, ObservedWorkload, WorkloadTelemetry
from cluster.errors import ClusterError
from workloads.identity import WorkloadId
from workloads.models import GpuTelemetry
from workloads.registry import kind_for

logger = logging.getLogger(__name__)

#: The series of a row's ``values``, in order: :class:`cluster.backends.base.GpuReading`'s fields.
SERIES = ("util_pct", "fb_used_mib", "fb_free_mib", "temp_c", "power_w")
UTIL, FB_USED, FB_FREE, TEMP, POWER = range(len(SERIES))
#: A minute row's step (seconds), and the span of a day row.
MINUTE = 60
DAY = timedelta(days=1)
#: Refs folded per :func:`compact` batch (bounds the rows one batch reads).
COMPACT_BATCH = 200

#: A cycle's readings per workload address, or None when the metrics source could not answer.
Readings = dict[ClusterAddress, WorkloadTelemetry] | None


def measure(backend, observed: list[ObservedWorkload]) -> Readings:
    """The backend's one telemetry query for this cycle's observation (None when it failed)."""
    if not observed:
        return {}
    try:
        return backend.gpu_telemetry(observed)
    except ClusterError as exc:
        logger.warning("reconcile: GPU telemetry unavailable, idle flags kept as they were: %s", exc)
        return None


def of_workloads(readings: Readings, workloads) -> dict[WorkloadId, WorkloadTelemetry]:
    """The readings of ``workloads`` (those a cycle follows), by identity: what it records and reports."""
    if not readings:
        return {}
    found = {}
    for workload in workloads:
        telemetry = readings.get(ClusterAddress(workload.namespace, workload.object_name))
        if telemetry is not None and telemetry.gpus:
            found[workload.identity] = telemetry
    return found


# -- the rows' values ---------------------------------------------------------------------------------
def pack(values: np.ndarray) -> bytes:
    """``(series, gpus, slots)`` figures as a row's ``values`` (little-endian float32)."""
    return np.ascontiguousarray(values, dtype="<f4").tobytes()


def unpack(data: bytes | memoryview, gpus: int, slots: int) -> np.ndarray:
    """A row's ``values`` as a ``(series, gpus, slots)`` float32 array (NaN: not reported)."""
    return np.frombuffer(data, dtype="<f4").reshape(len(SERIES), gpus, slots)


def _figure(value: float | None) -> float:
    return float("nan") if value is None else value


def reading_values(telemetry: WorkloadTelemetry) -> np.ndarray:
    """One reading as a ``(series, gpus, 1)`` array."""
    return np.array([[[_figure(getattr(gpu, name))] for gpu in telemetry.gpus] for name in SERIES], dtype="<f4")


# -- recording ----------------------------------------------------------------------------------------
def _teams(identities) -> dict[WorkloadId, int]:
    """Each workload's team id (one query per kind)."""
    by_prefix: dict[str, list[int]] = defaultdict(list)
    for identity in identities:
        by_prefix[identity.prefix].append(identity.pk)
    teams = {}
    for prefix, pks in by_prefix.items():
        kind = kind_for(prefix)
        if kind is not None:
            for pk, team_id in kind.model.objects.filter(pk__in=pks).values_list("pk", "team_id"):
                teams[WorkloadId(prefix, pk)] = team_id
    return teams


def minute_of(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def record(cluster, readings: dict[WorkloadId, WorkloadTelemetry], now: datetime) -> int:
    """Keep this cycle's ``readings`` as each workload's row of ``now``'s minute (one upsert); returns how many.

    A later cycle of the same minute overwrites it: a minute holds its last reading.
    """
    readings = {identity: t for identity, t in readings.items() if t.gpus}
    if not readings:
        return 0
    teams = _teams(readings)
    minute = minute_of(now)
    rows = [GpuTelemetry(team_id=teams[identity], ref=identity.ref, start=minute, step=MINUTE, slots=1,
                         gpus=[gpu.gpu for gpu in telemetry.gpus], values=pack(reading_values(telemetry)))
            for identity, telemetry in readings.items() if identity in teams]
    GpuTelemetry.objects.bulk_create(rows, update_conflicts=True, unique_fields=["ref", "step", "start"],
                                     update_fields=["team", "gpus", "slots", "values"])
    logger.debug("telemetry: %d workloads of %s at %s", len(rows), getattr(cluster, "name", cluster), minute)
    return len(rows)


# -- folding minutes into days, and retention ---------------------------------------------------------
def bucket_seconds() -> int:
    """The step of a day row's slots (``SLIPWAY_TELEMETRY_STEP_MINUTES``, a divisor of a day)."""
    return settings.SLIPWAY_TELEMETRY_STEP_MINUTES * 60


def floor_to(at: datetime, seconds: int) -> datetime:
    """``at`` rounded down to a multiple of ``seconds`` since the epoch (a day's slots line up with UTC days)."""
    stamp = int(at.timestamp())
    return datetime.fromtimestamp(stamp - stamp % seconds, tz=UTC)


#: How a slot's minutes fold into one figure, per series: the mean of utilization and power, the
#: peak of memory used and temperature, the trough of memory free (so used + free stays the size).
FOLD = {UTIL: np.nanmean, FB_USED: np.nanmax, FB_FREE: np.nanmin, TEMP: np.nanmax, POWER: np.nanmean}


@contextmanager
def _quiet_nan_warnings():
    """numpy warns of a slot with no figure at all (its nanmean is NaN, as meant)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def fold(values: np.ndarray) -> np.ndarray:
    """``(series, gpus, minutes)`` → ``(series, gpus)``, each series by its :data:`FOLD` rule (all-NaN stays NaN)."""
    out = np.full(values.shape[:2], np.nan, dtype="<f4")
    with _quiet_nan_warnings():
        for series, reduce in FOLD.items():
            out[series] = reduce(values[series], axis=-1)
    return out


def compact(now: datetime) -> tuple[int, int]:
    """Fold the minute rows older than ``SLIPWAY_TELEMETRY_RAW_MINUTES`` into day rows, then prune
    what is past ``SLIPWAY_TELEMETRY_KEEP_DAYS``. Returns (minute rows folded, rows pruned).

    Only whole slots are folded (those ending before the raw window), so a slot is folded once, from
    all its minutes; the minute rows go in the transaction that writes their day. Run single-flight
    (:func:`workloads.tasks.compact_telemetry`).
    """
    step = bucket_seconds()
    cutoff = floor_to(now - timedelta(minutes=settings.SLIPWAY_TELEMETRY_RAW_MINUTES), step)
    folded = 0
    while refs := list(GpuTelemetry.objects.filter(step=MINUTE, start__lt=cutoff).order_by("ref")
                       .values_list("ref", flat=True).distinct()[:COMPACT_BATCH]):
        folded += _fold_refs(refs, cutoff, step)
    return folded, prune(now)


def _fold_refs(refs: list[str], cutoff: datetime, step: int) -> int:
    with transaction.atomic():
        minutes = list(GpuTelemetry.objects.filter(step=MINUTE, start__lt=cutoff, ref__in=refs)
                       .order_by("ref", "start").values_list("pk", "team_id", "ref", "start", "gpus", "values"))
        groups: dict[tuple[str, datetime], list[tuple]] = defaultdict(list)
        for row in minutes:
            groups[(row[2], floor_to(row[3], int(DAY.total_seconds())))].append(row)
        days = {(d.ref, d.start): d for d in GpuTelemetry.objects.filter(
            step=step, ref__in=refs, start__in={day for _ref, day in groups})}
        written = [_merge_day(days.get(key), key, rows, step) for key, rows in groups.items()]
        GpuTelemetry.objects.bulk_create(written, update_conflicts=True, unique_fields=["ref", "step", "start"],
                                         update_fields=["team", "gpus", "slots", "values"])
        GpuTelemetry.objects.filter(pk__in=[row[0] for row in minutes]).delete()
    return len(minutes)


def _merge_day(day: GpuTelemetry | None, key: tuple[str, datetime], minutes: list[tuple], step: int) -> GpuTelemetry:
    """The day row ``key`` with ``minutes`` folded into its slots (a slot already filled is combined by its rule)."""
    ref, start = key
    slots = int(DAY.total_seconds()) // step
    gpus = list(day.gpus) if day is not None else []
    for _pk, _team, _ref, _start, ids, _values in minutes:
        gpus += [gpu for gpu in ids if gpu not in gpus]
    index = {gpu: i for i, gpu in enumerate(gpus)}
    values = np.full((len(SERIES), len(gpus), slots), np.nan, dtype="<f4")
    if day is not None:
        values[:, :len(day.gpus), :] = unpack(day.values, len(day.gpus), day.slots)
    by_slot: dict[int, list[tuple]] = defaultdict(list)
    for row in minutes:
        by_slot[int((row[3] - start).total_seconds()) // step].append(row)
    for slot, rows in by_slot.items():
        stacked = np.full((len(SERIES), len(gpus), len(rows) + 1), np.nan, dtype="<f4")
        stacked[:, :, -1] = values[:, :, slot]  # what the slot held already
        for i, (_pk, _team, _ref, _start, ids, data) in enumerate(rows):
            stacked[:, [index[gpu] for gpu in ids], i] = unpack(data, len(ids), 1)[:, :, 0]
        values[:, :, slot] = fold(stacked)
    return GpuTelemetry(team_id=minutes[-1][1], ref=ref, start=start, step=step, slots=slots, gpus=gpus,
                        values=pack(values))


def prune(now: datetime) -> int:
    """Delete the rows wholly older than ``SLIPWAY_TELEMETRY_KEEP_DAYS`` (0: keep for ever); returns how many."""
    if settings.SLIPWAY_TELEMETRY_KEEP_DAYS <= 0:
        return 0
    horizon = now - timedelta(days=settings.SLIPWAY_TELEMETRY_KEEP_DAYS)
    deleted, _ = GpuTelemetry.objects.filter(Q(step=MINUTE, start__lt=horizon)
                                             | Q(step__gt=MINUTE, start__lt=horizon - DAY)).delete()
    return deleted
