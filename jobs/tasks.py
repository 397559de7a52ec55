"""Task names of earlier releases, kept routable for one release so queued messages still run.

The work itself is done by :mod:`workloads.tasks` for every kind; remove these once no
message of the old names can be queued (one release after 0.2).
"""

from __future__ import annotations

from celery import shared_task

from jobs.constants import REF_PREFIX
from workloads import tasks


@shared_task(name="jobs.tasks.create_run_resources")
def create_run_resources(run_pk: int) -> str:
    return tasks.apply_workload(REF_PREFIX, run_pk)


@shared_task(name="jobs.tasks.delete_run_resources")
def delete_run_resources(run_pk: int) -> int:
    return tasks.delete_workload(REF_PREFIX, run_pk)


@shared_task(name="jobs.tasks.reconcile", ignore_result=True)
def reconcile() -> str:
    return tasks.reconcile()
