"""Celery tasks of inference endpoints: the canary rule's beat task (the candidate's delete is
:mod:`inference.cleanup`'s)."""

from __future__ import annotations

from celery import shared_task

from inference import canary
from inference.cleanup import delete_candidate

__all__ = ["delete_candidate", "evaluate_canaries"]


@shared_task(ignore_result=True)
def evaluate_canaries() -> dict[str, str]:
    """Judge every live candidate against its stable revision and roll back or promote (inference.canary).

    Runs every ``SLIPWAY_CANARY_EVALUATE_SECONDS`` (beat); two at once make one move of each candidate."""
    return canary.evaluate_all()
