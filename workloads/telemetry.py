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
from collections import defaultdict
from datetime import datetime, timedelta

import numpy as np

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
