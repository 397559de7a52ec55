"""Celery tasks of the jobs app: the demo's runs that are submitted a while after seeding."""

from __future__ import annotations

from celery import shared_task

from jobs.demo import submit_due_demo_runs


@shared_task
def submit_later_demo_runs() -> list[str]:
    """Submit the demo runs now due (:func:`jobs.demo.submit_due_demo_runs`); beat runs it every few seconds.

    Outside a demo there are none: the task is one indexed query on an empty table.
    """
    return [run.ref for run in submit_due_demo_runs()]
