"""Celery tasks of the inference app: folding the gateways' traffic windows (docs/serving.md "Traffic metrics")."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from inference import traffic
from workloads.tasks import single_flight

TRAFFIC_LOCK = "slipway:traffic-compact-lock"


@shared_task(ignore_result=True)
def compact_traffic() -> str:
    """Fold endpoints' 10 s traffic windows past ``SLIPWAY_TRAFFIC_RAW_MINUTES`` into minutes and prune past
    ``SLIPWAY_TRAFFIC_KEEP_DAYS`` (beat, every ``SLIPWAY_TELEMETRY_COMPACT_SECONDS``; :func:`inference.traffic.compact`).
    Single-flight, as the other beat tasks: a second fold would only wait on the first's row locks."""
    with single_flight(TRAFFIC_LOCK) as mine:
        if not mine:
            return "busy"
        folded, pruned = traffic.compact(timezone.now())
    return f"folded={folded} pruned={pruned}"
