"""Celery tasks of inference endpoints: folding the gateways' traffic windows (docs/serving.md "Traffic
metrics") and the canary rule's beat task (the candidate's delete is :mod:`inference.cleanup`'s)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from inference import canary, traffic
from inference.cleanup import delete_candidate
from workloads.tasks import single_flight

__all__ = ["compact_traffic", "delete_candidate", "evaluate_canaries"]

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


@shared_task(ignore_result=True)
def evaluate_canaries() -> dict[str, str]:
    """Judge every live candidate against its stable revision and roll back or promote (inference.canary).

    Runs every ``SLIPWAY_CANARY_EVALUATE_SECONDS`` (beat); two at once make one move of each candidate."""
    return canary.evaluate_all()
