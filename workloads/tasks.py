"""Celery tasks of every workload kind. Each takes the kind's prefix and a primary key and is safe to run twice.

Retries live only here (docs/design.md "The Kubernetes layer"): ``Transient`` cluster errors are retried with
exponential backoff; permanent ones (``Invalid`` …) fail the workload with the API server's
message. When retries run out the workload simply stays admitted and the reconciler re-drives
it after one period, up to ``MAX_APPLY_ATTEMPTS``. Work that no cluster takes because every one
offering its flavor is draining, degraded or lost is neither retried nor failed: it goes back to
its team's queue (:func:`workloads.lifecycle.wait_for_cluster`).
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import contextmanager

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.db.models import F
from django.utils import timezone

import core.backend
import fleet.services as fleet
from cluster.errors import ClusterError, Transient
from cluster.manifests import build_team
from core import metrics, queueing
from quotas.facts import ClusterWaits
from quotas.tasks import team_spec
from workloads import lifecycle, provisioning, secrets
from workloads.constants import Message
from workloads.cycle import ReconcileReport, placement, preemption
from workloads.cycle.queue_step import reconcile_queue
from workloads.cycle.reconcile import observe_failed
from workloads.cycle.reconcile import reconcile_cluster as cycle_cluster
from workloads.models import STOP_CODES, ReasonCode
from workloads.registry import kind_for
from workloads.telemetry import readings as telemetry

logger = logging.getLogger(__name__)

RETRY = {
    "autoretry_for": (Transient,),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 5,
}


@shared_task(**RETRY)
def apply_workload(prefix: str, pk: int) -> str:
    """Render the workload's manifests and apply them (with its team's namespace objects).

    Work of a kind without cluster objects (:attr:`workloads.registry.WorkloadKind.cluster_objects`) is
    placed and nothing else: no cluster is called, and it moves on as applied — there was nothing to send.
    """
    # 1. Reload; return early when it is gone or in no state to be applied.
    kind = kind_for(prefix)
    if kind is None:
        return "unknown kind"
    lc = kind.lifecycle
    workload = kind.model.objects.select_related("team", "flavor", "created_by").filter(pk=pk).first()
    if workload is None or workload.state not in lc.applyable:
        return "skipped"
    kind.model.objects.filter(pk=pk).update(apply_attempts=F("apply_attempts") + 1, apply_started_at=timezone.now())

    # 2. Render (pure) and apply. The namespace objects are idempotent server-side applies,
    #    so a team's first workload also creates its namespace and ResourceQuota.
    cluster = placement.place_workload(kind, workload, timezone.now())
    if cluster is None:
        # Every cluster that offers its flavor takes no new work (drained, degraded, lost): back to
        # the queue, which admits it again once one can — never retried into a failure.
        if ClusterWaits()(workload.flavor, workload.spot) and lifecycle.wait_for_cluster(kind, workload):
            return "queued"
        # Unfit just now for another reason (a selector no cluster matches, distributed training on clusters whose
        # training API takes none …): placement's reasons, each cluster's, on the workload where its queue and
        # pages show them; retried, then re-driven.
        why = placement.choose(kind, workload, timezone.now()).reason
        kind.model.objects.filter(pk=pk, state=lc.admitted, cluster__isnull=True).update(
            reason=why[:500], reason_code=ReasonCode.NO_CLUSTER)
        raise Transient(f"no cluster can take {workload.ref} now: {why}")
    if kind.cluster_objects:
        kind.fix_applied(workload, cluster)  # before anything of the attempt is rendered for the cluster
        # An atomic elastic pool without ready nodes for it: its nodes are asked for first (workloads.provisioning).
        pool = provisioning.pool_to_grow(kind, workload, cluster) if workload.provisioning_since is None else None
        if pool is not None or provisioning.waiting(workload):
            return "provisioning" if provisioning.ask(kind, workload, cluster, timezone.now()) else "failed"
        if not _apply_objects(kind, workload, cluster, provisioning.objects(kind, workload)):
            return "failed"
        submitted = {"reason": Message.SUBMITTED_TO_CLUSTER, "reason_code": ReasonCode.SUBMITTED}
    else:
        # Placed is all its apply is. No words of its own: the next cycle gives its kind's.
        submitted = {"reason": "", "reason_code": ReasonCode.NONE}

    # 3. Conditional: an end that landed meanwhile stays ended (its delete task, or the
    #    reconciler, removes the objects just applied).
    now = timezone.now()
    updated = kind.model.objects.filter(pk=pk, state=lc.admitted).update(state=lc.applied, applied_at=now, **submitted)
    if not updated:
        updated = kind.model.objects.filter(pk=pk, state__in=lc.applyable).update(applied_at=now)
    if not updated and kind.cluster_objects and kind.model.objects.filter(pk=pk, state=lc.failed).exists():
        # Failed while this apply was in flight (the reconciler gave up on a slow API server
        # and released the quota): what was just applied must not run unreserved and unbilled.
        # Failed workloads' objects are otherwise kept for their logs, so nobody else deletes them.
        queueing.publish(delete_workload, prefix, pk)
        return "deleted"
    return "applied"


def _apply_objects(kind, workload, cluster, objects: list[dict]) -> bool:
    """Apply ``workload``'s ``objects`` on ``cluster`` (step 2 of :func:`apply_workload`): False when the
    cluster refused them for good (the workload failed here). Transient errors raise, to be retried."""
    team_objects = build_team(team_spec(workload.team), core.backend.cluster_config())
    secret = secrets.env_secret(workload)
    backend = fleet.backend(cluster)
    try:
        if secret is None:
            backend.apply(team_objects + objects, kind.resources)
        else:
            # The Secret lives in the team's namespace, and the pods need it when they start:
            # namespace first, then the Secret, then what runs.
            backend.apply(team_objects)
            backend.apply_secret(secret)
            backend.apply(objects, kind.resources)
    except Transient:
        raise  # retried by Celery, then re-driven by the reconciler
    except ClusterError as exc:
        lifecycle.fail(workload, Message.CLUSTER_REJECTED.format(noun=kind.noun, message=exc.message),
                       ReasonCode.CLUSTER_REJECTED)
        return False
    return True


@shared_task(**RETRY)
def delete_workload(prefix: str, pk: int) -> int:
    """Delete the workload's cluster objects (background propagation). Deleting twice is harmless."""
    kind = kind_for(prefix)
    workload = kind.model.objects.select_related("team").filter(pk=pk).first() if kind else None
    if workload is None:
        return 0
    # An ended workload whose kind has a "gone" state is moved there by the reconciler once
    # nothing of it is observed any more (deletion propagates in the background).
    return fleet.backend_at(workload.cluster_id).delete(workload.address, kind.resources)


@shared_task(ignore_result=True)
def give_stop_notice(prefix: str, pk: int) -> bool:
    """A stop's notice and graceful delete (:func:`workloads.cycle.preemption.give_stop_notice`), for work still
    being stopped; lost, the reconcile cycle gives them again (:func:`workloads.cycle.preemption.follow`)."""
    kind = kind_for(prefix)
    workload = (kind.model.objects.select_related("team", "flavor").filter(
        pk=pk, preempting_since__isnull=False, reason_code__in=STOP_CODES).first() if kind else None)
    if workload is None or workload.cluster_id is None:
        return False
    preemption.give_stop_notice(workload, timezone.now())
    return True


RECONCILE_LOCK = "slipway:reconcile-lock"


@shared_task(ignore_result=True)
def reconcile() -> str:
    """The periodic cycle (beat): one :func:`reconcile_cluster` task per cluster, in parallel on
    however many workers run, then the queue's step here (admission, reclaim, budgets: global per team;
    :func:`workloads.cycle.queue_step.reconcile_queue`).

    The clusters' tasks go to the ``reconcile`` queue, as this one does, and expire after two periods, as
    this one's beat message does. On the ``default`` queue and without an expiry they piled up whenever the
    worker took longer over a tick's tasks than the period (a slow boot, the e2e worker's 0.5-s period; a
    large fleet's 5 s): every beat task behind them on that queue — the canary rule's, the stdout reader's,
    both expiring after two of their own periods — expired before a worker reached it, and a bad canary was
    never rolled back.

    Each part is single-flight across all workers by its own lock, so a slow or dead cluster
    delays no other cluster and not the queue. Admitted work not placed on a cluster yet is
    re-driven by the queue's step, and published here.
    """
    # A cluster's cycle is due once a period: a message older than the next period's is superseded by it and
    # expires, so cycles slower than the period leave no backlog for the worker to work through first.
    expires = settings.CELERY_RECONCILE_INTERVAL * 2
    for cluster in fleet.clusters():
        queueing.publish(reconcile_cluster.s(cluster.name).set(expires=expires))
    with _single_flight(RECONCILE_LOCK) as mine:
        if not mine:
            return "busy"
        report = reconcile_queue()
    for identity in report.redriven:
        queueing.publish(apply_workload, identity.prefix, identity.pk)
    return f"admitted={len(report.admitted)} preempted={len(report.preempted)}"


@shared_task(ignore_result=True)
def reconcile_cluster(name: str) -> str:
    """Steps 1–5 of the cycle for one cluster (:func:`workloads.cycle.reconcile.reconcile_cluster`).

    A cluster that does not answer is recorded (degraded, then lost: :func:`workloads.cycle.reconcile.observe_failed`)
    and tried again next cycle. The cycle's time and whether it observed the cluster go to
    ``/metrics`` (:func:`core.metrics.record_reconcile`). Workloads the cycle marked for re-drive
    are published after it, when its writes are committed.
    """
    cluster = fleet.get(name)
    if cluster is None:
        return "unknown cluster"
    with _single_flight(f"{RECONCILE_LOCK}:{name}") as mine:
        if not mine:
            return "busy"
        backend = fleet.backend(cluster)
        report = ReconcileReport()
        started = time.perf_counter()
        try:
            cycle_cluster(cluster, backend, report=report)
        except ClusterError as exc:
            observe_failed(cluster, backend, exc, timezone.now(), report)
            metrics.record_reconcile(name, time.perf_counter() - started, observed=False)
            return f"cluster {name} unavailable: {exc}"
        metrics.record_reconcile(name, time.perf_counter() - started, observed=True)
    for identity in report.redriven:
        queueing.publish(apply_workload, identity.prefix, identity.pk)
    return f"observed={report.observed} transitions={len(report.transitions)}"


@contextmanager
def _single_flight(key: str):
    """Hold the cache lock ``key`` for the block; yields False (and runs nothing of its own) when another holds it.

    The lock is a cache key with an expiry (Redis in production), so a worker killed mid-cycle
    blocks the next cycles for at most the lock's lifetime.
    """
    token = uuid.uuid4().hex
    ttl = max(int(settings.CELERY_RECONCILE_INTERVAL * 6), settings.SLIPWAY_RECONCILE_LOCK_SECONDS)
    if not cache.add(key, token, timeout=ttl):
        yield False
        return
    try:
        yield True
    finally:
        # Only release our own lock (it may have expired and been taken by another cycle).
        if cache.get(key) == token:
            cache.delete(key)


#: The public name of the lock other apps' beat tasks hold (an endpoint's traffic compaction, say).
single_flight = _single_flight

TELEMETRY_LOCK = "slipway:telemetry-compact-lock"


@shared_task(ignore_result=True)
def compact_telemetry() -> str:
    """Fold GPU telemetry's minutes past the raw window into day rows and prune past retention (beat,
    every ``SLIPWAY_TELEMETRY_COMPACT_SECONDS``; :func:`workloads.telemetry.readings.compact`). Single-flight:
    two folds of one day would each write it from what it held before."""
    with _single_flight(TELEMETRY_LOCK) as mine:
        if not mine:
            return "busy"
        folded, pruned = telemetry.compact(timezone.now())
    return f"folded={folded} pruned={pruned}"
