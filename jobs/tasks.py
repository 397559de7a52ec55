"""Celery tasks of training runs. Each takes a primary key and is safe to run twice.

Retries live only here (DESIGN.md §3): ``Transient`` cluster errors are retried with
exponential backoff; permanent ones (``Invalid`` …) fail the run with the API server's
message. When retries run out the run simply stays admitted and the reconciler re-drives
it after one period, up to ``MAX_APPLY_ATTEMPTS``.
"""

from __future__ import annotations

import logging
import uuid

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.db.models import F
from django.utils import timezone

from cluster.backends.base import WorkloadRef
from cluster.errors import ClusterError, Transient
from jobs.constants import Reason, RunState
from jobs.models import TrainingRun

logger = logging.getLogger(__name__)

RETRY = {
    "autoretry_for": (Transient,),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 5,
}


@shared_task(**RETRY)
def create_run_resources(run_pk: int) -> str:
    """Render the run's manifests and apply them (with its team's namespace objects)."""
    from cluster.manifests import build_team
    from jobs.reconcile import fail_run
    from jobs.services import run_manifests
    from portal.cluster import cluster_config, get_backend
    from quotas.tasks import team_spec

    # 1. Reload; return early when the run is gone or already past this step.
    run = TrainingRun.objects.select_related("team", "flavor").filter(pk=run_pk).first()
    if run is None or run.state != RunState.ADMITTED:
        return "skipped"
    TrainingRun.objects.filter(pk=run_pk).update(apply_attempts=F("apply_attempts") + 1, applied_at=timezone.now())

    # 2. Render (pure) and apply. The namespace objects are idempotent server-side applies,
    #    so a team's first run also creates its namespace and ResourceQuota.
    objects = build_team(team_spec(run.team), cluster_config()) + run_manifests(run)
    try:
        get_backend().apply(objects)
    except Transient:
        raise  # retried by Celery, then re-driven by the reconciler
    except ClusterError as exc:
        fail_run(run, Reason.CLUSTER_REJECTED.format(message=exc.message))
        return "failed"

    # 3. Conditional: a cancel that landed meanwhile stays cancelled (the reconciler then
    #    deletes the objects just applied).
    updated = TrainingRun.objects.filter(pk=run_pk, state=RunState.ADMITTED).update(
        state=RunState.PENDING, reason=Reason.SUBMITTED_TO_CLUSTER, applied_at=timezone.now()
    )
    if not updated and TrainingRun.objects.filter(pk=run_pk, state=RunState.FAILED).exists():
        # Failed while this apply was in flight (the reconciler gave up on a slow API server
        # and released the quota): what was just applied must not run unreserved and unbilled.
        # Failed runs' objects are otherwise kept for their logs, so nobody else deletes them.
        from portal.queueing import publish

        publish(delete_run_resources, run_pk)
        return "deleted"
    return "applied"


@shared_task(**RETRY)
def delete_run_resources(run_pk: int) -> int:
    """Delete the run's cluster objects (background propagation). Deleting twice is harmless."""
    from portal.cluster import get_backend

    run = TrainingRun.objects.select_related("team").filter(pk=run_pk).first()
    if run is None:
        return 0
    return get_backend().delete(WorkloadRef(run.namespace, run.workload_id))


RECONCILE_LOCK = "slipway:reconcile-lock"


@shared_task(ignore_result=True)
def reconcile() -> str:
    """The periodic reconcile cycle, single-flight across all workers.

    The lock is a cache key with an expiry (Redis in production), so a worker killed
    mid-cycle blocks the next cycles for at most the lock's lifetime.
    """
    from jobs.reconcile import reconcile as run_cycle

    token = uuid.uuid4().hex
    ttl = max(int(settings.CELERY_RECONCILE_INTERVAL * 6), 30)
    if not cache.add(RECONCILE_LOCK, token, timeout=ttl):
        return "busy"
    try:
        report = run_cycle()
    except ClusterError as exc:
        # Nothing was changed on a failed observation; the next cycle tries again.
        logger.warning("reconcile skipped: the cluster could not be observed (%s)", exc)
        return f"cluster unavailable: {exc}"
    finally:
        # Only release our own lock (it may have expired and been taken by another cycle).
        if cache.get(RECONCILE_LOCK) == token:
            cache.delete(RECONCILE_LOCK)
    return f"observed={report.observed} transitions={len(report.transitions)} admitted={len(report.admitted)}"
