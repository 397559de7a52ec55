"""Celery tasks of the jobs app: the demo's runs submitted a while after seeding, and the training
metrics read from runs' logs (:mod:`jobs.metrics`)."""

from __future__ import annotations

from celery import shared_task

from jobs import metrics
from jobs.demo import submit_due_demo_runs


@shared_task
def submit_later_demo_runs() -> list[str]:
    """Submit the demo runs now due (:func:`jobs.demo.submit_due_demo_runs`); beat runs it every few seconds.

    Outside a demo there are none: the task is one indexed query on an empty table.
    """
    return [run.ref for run in submit_due_demo_runs()]


@shared_task
def read_run_logs() -> dict[str, int]:
    """One cycle of the stdout metrics reader (beat, every ``SLIPWAY_RUN_METRICS_READ_SECONDS``). Safe to
    run twice or side by side: a line read twice writes the same point again (:mod:`jobs.metrics`)."""
    figures = metrics.read_run_logs()
    return {"runs": figures.runs, "lines": figures.lines, "points": figures.points}


@shared_task
def prune_run_metrics() -> int:
    """Delete the metric points past ``SLIPWAY_RUN_METRICS_KEEP_DAYS`` (beat, hourly)."""
    return metrics.prune()
