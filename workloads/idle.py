"""Idle GPUs: allocated, paid for, and unused — measured, billed apart, and flagged in money.

Once per reconcile cycle the backend reports each running workload's GPU telemetry
(:meth:`cluster.backends.base.ClusterBackend.gpu_telemetry`: Prometheus' DCGM series on a
real cluster, the simulated exporter in the sandbox; :func:`workloads.telemetry.readings.measure`), and its
utilization — the mean over its GPUs — is read from that one answer (:func:`utilization`). A workload whose utilization is under
``SLIPWAY_IDLE_UTIL_PCT`` is *idle*: its open billing segment is idle time, and the ledger
records that time's GPU-hours and cost in its ``idle_*`` columns as well
(:func:`billing.segments.plan_billing` closes the segment when the flag flips, so idle time is
exact to one reconcile interval). ``idle_since`` marks the start of an unbroken idle stretch;
after ``SLIPWAY_IDLE_WINDOW_MINUTES`` the portal flags the workload with what its idle time
cost.

Unmeasured is not idle: a workload the metrics do not cover counts as busy (no waste is
claimed that was not measured). When the metrics source cannot answer at all, the cycle keeps
each workload's flag as it was rather than flipping every segment on an outage.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from billing import ledger
from cluster.backends.base import ClusterAddress, WorkloadTelemetry
from core.money import ZERO

#: A cycle's measurement: utilization per workload, or None when the source could not answer.
Utilization = dict[ClusterAddress, float] | None


def utilization(readings: dict[ClusterAddress, WorkloadTelemetry] | None) -> Utilization:
    """Each workload's utilization from the cycle's telemetry readings (None stays None: an outage)."""
    if readings is None:
        return None
    return {address: t.util_pct for address, t in readings.items() if t.util_pct is not None}


def is_idle(utilization: Utilization, address: ClusterAddress, workload) -> bool:
    """Whether ``workload``'s GPUs measure idle now (see the module docstring for the unmeasured cases)."""
    if utilization is None:
        return workload.open_idle
    value = utilization.get(address)
    return value is not None and of_units(value, workload.flavor) < settings.SLIPWAY_IDLE_UTIL_PCT


def of_units(value: float, flavor) -> float:
    """A utilization (percent of a physical GPU's time) as a percent of what the workload's units are.

    A time-sliced or MPS unit is ``1 / replicas`` of a GPU, so a pod busy with all of its share shows
    ``100 / replicas`` % of the GPU (the sandbox's per-pod DCGM figures do): measured against its unit,
    it is fully busy, not idle. A whole GPU or a MIG slice (whose engine-active metric is per slice) is
    measured as it is. On a real time-sliced GPU, DCGM reports the whole GPU's utilization for every pod
    on it (it cannot tell the pods apart), so there a pod is only ever idle when the whole GPU is
    (docs/money.md "Idle GPUs").
    """
    if flavor.replicated:
        return min(100.0, value / float(flavor.gpu_fraction))
    return value


def idle_window() -> timedelta:
    return timedelta(minutes=settings.SLIPWAY_IDLE_WINDOW_MINUTES)


def flagged_since(workload, now: datetime) -> datetime | None:
    """Since when ``workload``'s GPUs have been idle, once that lasted the idle window; else None."""
    since = workload.idle_since
    return since if since is not None and now - since >= idle_window() else None


@dataclass(frozen=True)
class IdleFigures:
    """A workload's idle GPU time to date and what it cost; ``since`` when idle for the window now."""

    gpu_hours: Decimal = ZERO
    cost: Decimal = ZERO
    since: datetime | None = None
    minutes: int = 0  #: how long the flagged idle stretch has lasted

    @property
    def flagged(self) -> bool:
        """Idle without a break for at least the window: the portal shows it with its cost."""
        return self.since is not None


def idle_context(workload) -> dict:
    """Template context of a detail page's idle figures (``workloads/_idle_*.html``): one query at most."""
    return {"idle": idle_figures([workload], timezone.now())[workload.ref],
            "idle_threshold": settings.SLIPWAY_IDLE_UTIL_PCT}


def idle_figures(workloads, now: datetime) -> dict[str, IdleFigures]:
    """Per ref: the idle GPU-hours and cost to ``now`` (ledger plus an idle open segment), in one query.

    Workloads never billed have no ledger rows and cost no query.
    """
    workloads = list(workloads)
    closed = ledger.idle_by_ref([w.ref for w in workloads if w.billed_until is not None])
    figures = {}
    for w in workloads:
        gpu_hours, cost = closed.get(w.ref, (ZERO, ZERO))
        if w.open_idle and w.open_units and w.billed_until is not None and now > w.billed_until:
            open_cost = ledger.interval_cost(w.unit_price(), w.open_units, w.billed_until, now)
            open_hours = ledger.interval_gpu_hours(w.flavor.gpu_fraction, w.open_units, w.billed_until, now)
            gpu_hours, cost = gpu_hours + open_hours, cost + open_cost
        since = flagged_since(w, now)
        minutes = int((now - since).total_seconds() // 60) if since is not None else 0
        figures[w.ref] = IdleFigures(gpu_hours, cost, since, minutes)
    return figures
