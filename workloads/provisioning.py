"""A workload's nodes asked for all at once on an atomic elastic pool (docs/pools.md): the portal's side.

Admitted work placed on a cluster whose pool of its flavor is elastic and ``atomic``, and whose ready nodes
cannot hold it now, does not start there at once: its apply (:func:`workloads.tasks.apply_workload`) creates a
``ProvisioningRequest`` for its pods (pod sets from its own pod templates, :mod:`cluster.manifests.provisioning`)
and stops there, the workload admitted with ``reason_code`` ``provisioning`` and words that name the pool. The
reconcile cycle reads the request's conditions each cycle (:func:`follow`):

* ``Provisioned``: its nodes are up. The pool's history gets the time it took (start estimates read it), and
  the workload is applied — its pods carry the annotations that consume the booked capacity;
* ``Failed`` or ``BookingExpired``: the request is deleted, the workload gives its quota back and queues again
  at its old place, not admitted before a backoff (Kueue's defaults: :data:`cluster.pools.MAX_TRIES` tries, 60 s
  doubling, 30 min at most; the first wait and the cap are settings, as Kueue's ``retryStrategy`` makes them),
  placed afresh; after the last try it fails with the autoscaler's words.

Nothing is billed meanwhile: billing follows running pods, and none runs before its nodes are all up (a gang
whose provisioning failed bills 0 GPU-minutes). A request is only ever created for admitted work, so no node is
asked for work that quota or budget would not admit. Runs only: an endpoint's or a workspace's pods on an
elastic pool are added node by node by the autoscaler as they come (the ``any`` behaviour), as its kind declares
no provisioning objects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Value
from django.db.models.functions import Coalesce

import core.backend
import fleet.services as fleet
from cluster.backends.base import NodeCapacity
from cluster.capacity import serves
from cluster.errors import ClusterError, Transient
from cluster.manifests import build_team
from cluster.manifests.provisioning import build_provisioning, consuming, pod_sets
from cluster.pools import (
    ATOMIC,
    BOOKING_EXPIRED,
    FAILED,
    MAX_TRIES,
    PROVISIONED,
    PROVISIONING_REQUEST,
    PROVISIONING_RESOURCES,
    backoff_seconds,
    nodes_needed,
    provisioning_state,
)
from core.formatting import format_when
from fleet import pools
from fleet.models import Cluster, NodePool
from quotas.tasks import team_spec
from workloads import lifecycle
from workloads.estimates.provisioning import waiting_words
from workloads.models import ReasonCode
from workloads.registry import Checkpoints

logger = logging.getLogger(__name__)

# What one cycle's look at a waiting workload found (:func:`follow`).
PROVISIONED_NOW = "provisioned"  #: its nodes are up: the caller re-drives its apply
MISSING = "missing"  #: no request on the cluster: the caller re-drives the apply, which creates it
WAITING = "waiting"
REQUEUED = "requeued"
FAILED_FOR_GOOD = "failed"
GAVE_BACK = (REQUEUED, FAILED_FOR_GOOD)  #: its quota was given back: the team's queue may admit


def request_name(workload) -> str:
    """The ProvisioningRequest of the workload's current try: one per attempt and try (a request's pod sets are
    immutable, so a new try is a new request)."""
    return f"{workload.object_name}-nodes-{workload.attempt}-{workload.provisioning_failures + 1}"


def asks_nodes(kind) -> bool:
    """Whether the kind's work is provisioned atomically on an atomic pool (it declares the request's objects)."""
    return PROVISIONING_REQUEST in kind.resources


def pool_to_grow(kind, workload, cluster: Cluster) -> NodePool | None:
    """The atomic pool whose new nodes ``workload`` waits for before it starts on ``cluster``; None when it starts
    now: its kind asks no nodes, the pool is fixed or ``any``, the work is spot (pools are on-demand nodes), or
    the pool's ready nodes hold its workers now (read from the cluster, which the apply calls anyway; as last
    recorded when it does not answer)."""
    if not asks_nodes(kind) or workload.spot:
        return None
    pool = pools.pool_for(cluster, workload.flavor_id)
    if pool is None or pool.mode != ATOMIC:
        return None
    request = kind.admission_request(workload)
    workers = request.units // max(request.units_per_node, 1)
    spec = workload.flavor.to_spec()
    try:
        nodes = fleet.backend(cluster).capacity()
    except ClusterError:
        nodes = fleet.recorded_nodes(cluster)
    ready = [n.free for n in nodes if not n.provisioning and serves(n, spec, False)]
    return pool if nodes_needed(ready, request.units_per_node, workers) else None


def waiting(workload) -> bool:
    """Whether ``workload`` waits for its ProvisioningRequest (created, not Provisioned yet)."""
    return workload.provisioning_since is not None and workload.reason_code == ReasonCode.PROVISIONING


def objects(kind, workload) -> list[dict]:
    """What the workload's apply sends now: while it waits for its nodes, its ProvisioningRequest and PodTemplates;
    once they are up, its own objects, whose pods consume the booking. Pure (no cluster call)."""
    own = kind.manifests(workload)
    if workload.provisioning_since is None:
        return own
    return _request(workload, own) if waiting(workload) else consuming(own, request_name(workload))


def shown(kind, workload) -> list[dict]:
    """What ``GET …/manifest/`` shows: the workload's objects and, while a request exists, the request and its
    PodTemplates first. Pure."""
    own = kind.manifests(workload)
    if workload.provisioning_since is None:
        return own
    return [*_request(workload, own), *consuming(own, request_name(workload))]


def _request(workload, own: list[dict]) -> list[dict]:
    """The PodTemplates and ProvisioningRequest of the workload's current try, for its pods in ``own``."""
    labels = (own[0].get("metadata") or {}).get("labels") or {}
    return build_provisioning(request_name(workload), workload.namespace, labels, pod_sets(own))


def words(kind, workload, cluster: Cluster, now: datetime, nodes: list[NodeCapacity] | None = None) -> str:
    """The reason of work waiting for its pool (:func:`workloads.estimates.provisioning.waiting_words`, the one rule
    of those words) from the cluster's ``nodes`` (default: as last recorded); while the pool is gone, that its
    nodes are asked for."""
    request = kind.admission_request(workload)
    per_node = max(request.units_per_node, 1)
    pool = pools.pool_for(cluster, workload.flavor_id)
    if pool is None:
        return f"waiting for its nodes on {cluster.name} (a ProvisioningRequest)"
    nodes = fleet.recorded_nodes(cluster) if nodes is None else nodes
    return waiting_words(pool, nodes, request.units // per_node, per_node, workload.provisioning_since, now)


def ask(kind, workload, cluster: Cluster, now: datetime) -> bool:
    """Create (or, re-driven, re-apply: server-side apply is idempotent) the workload's ProvisioningRequest on
    ``cluster`` and mark it waiting. False when the cluster refused it for good (the workload failed here);
    transient errors raise, for the apply task's retries."""
    backend = fleet.backend(cluster)
    team_objects = build_team(team_spec(workload.team), core.backend.cluster_config())
    model = type(workload)
    # The code and its words in one write: a reader between two writes saw "provisioning" beside "admitted; waiting
    # for a worker…" while the apply below ran (seconds, on a slow boot, 2026-11-29).
    workload.refresh_from_db(fields=["provisioning_since"])
    workload.provisioning_since = workload.provisioning_since or now
    model.objects.filter(pk=workload.pk, state=kind.lifecycle.admitted, applied_at__isnull=True).update(
        provisioning_since=Coalesce("provisioning_since", Value(now)), reason_code=ReasonCode.PROVISIONING,
        reason=words(kind, workload, cluster, now)[:500])
    workload.refresh_from_db(fields=["provisioning_since", "reason_code", "reason"])
    try:
        backend.apply(team_objects + objects(kind, workload), kind.resources)
    except Transient:
        raise  # retried by the apply task, then re-driven
    except ClusterError as exc:
        lifecycle.fail(workload, f"the cluster refused the request for its nodes: {exc.message}",
                       ReasonCode.CLUSTER_REJECTED, now)
        return False
    # Waiting is no apply attempt: the re-drive re-applies the request, never gives up on a slow pool.
    model.objects.filter(pk=workload.pk, state=kind.lifecycle.admitted, reason_code=ReasonCode.PROVISIONING).update(
        apply_attempts=0)
    return True


def follow(kind, backend, workload, observed, now: datetime, nodes: Callable[[], list[NodeCapacity]]) -> str:
    """One cycle's look at a workload waiting for its nodes (``observed``: its objects as the cluster has them, or
    None; ``nodes``: reads the cluster's nodes now, for its words — once a cycle, whatever waits). Returns what happened: one of :data:`PROVISIONED_NOW`, :data:`MISSING`, :data:`WAITING`, :data:`REQUEUED`,
    :data:`FAILED_FOR_GOOD`."""
    name = request_name(workload)
    request = next((o for o in (observed.objects if observed is not None else [])
                    if o.get("kind") == PROVISIONING_REQUEST.kind and o.get("metadata", {}).get("name") == name), None)
    if request is None:
        return MISSING
    cluster = fleet.placed_on(workload.cluster_id)
    pool = pools.pool_for(cluster, workload.flavor_id)
    state = provisioning_state(request)
    model = type(workload)
    mine = model.objects.filter(pk=workload.pk, state=kind.lifecycle.admitted, reason_code=ReasonCode.PROVISIONING,
                                provisioning_since=workload.provisioning_since)
    if state.state == PROVISIONED:
        if not mine.update(reason_code=ReasonCode.WAITING_FOR_WORKER, apply_started_at=now,
                           reason=f"its nodes are up on {cluster.name}; starting"):
            return WAITING
        if pool is not None:
            pools.record_provisioning_time(pool.pk, (now - workload.provisioning_since).total_seconds())
        return PROVISIONED_NOW
    if state.state in (FAILED, BOOKING_EXPIRED):
        return give_back(kind, backend, workload, cluster, state.message or state.state, now)
    try:
        mine.update(reason=words(kind, workload, cluster, now, nodes())[:500])
    except ClusterError as exc:  # the words wait for the next cycle; nothing else depends on them
        logger.warning("no nodes to tell %s's progress by: %s", workload.ref, exc)
    return WAITING


def resource_of(manifest: dict):
    """The declared resource kind of one of the request's objects (the request, or a PodTemplate)."""
    return next(r for r in PROVISIONING_RESOURCES if r.kind == manifest["kind"])


def give_back(kind, backend, workload, cluster: Cluster, why: str, now: datetime) -> str:
    """Its nodes will not come: delete the request, and queue the workload again after a backoff, placed afresh —
    or, after the last try, fail it with the autoscaler's words.

    Work that goes on from a checkpoint kept on this cluster (a next attempt of a checkpointing run, a sweep's
    continued trial: :meth:`workloads.registry.Checkpoints.checkpoint_on_its_cluster`) is queued again on this
    cluster instead, as a preempted run is (docs/pools.md): placed afresh, it would start elsewhere without its
    checkpoint, and the cleanup would delete the claim holding it there."""
    try:
        backend.delete_objects(workload.namespace, [(resource_of(o), o["metadata"]["name"])
                                                    for o in _request(workload, kind.manifests(workload))])
    except ClusterError as exc:  # the cycle's leftovers step deletes it later
        logger.warning("could not delete the provisioning request of %s: %s", workload.ref, exc)
    tries = workload.provisioning_failures + 1
    where = f"pool {workload.flavor.name} on {cluster.name}"
    if tries >= MAX_TRIES:
        lifecycle.fail(workload, f"its nodes could not be provisioned in {tries} tries ({where}): {why}"[:500],
                       ReasonCode.PROVISIONING_FAILED, now)
        return FAILED_FOR_GOOD
    retry_at = now + timedelta(seconds=backoff_seconds(tries, settings.SLIPWAY_PROVISIONING_BACKOFF_SECONDS,
                                                       settings.SLIPWAY_PROVISIONING_BACKOFF_MAX_SECONDS))
    reason = (f"its nodes could not be provisioned ({where}: {why}); it tries again after {format_when(retry_at)} "
              f"(try {tries + 1} of {MAX_TRIES})")
    # Placed again when admitted again: afresh, or on this cluster stamped anew (its wait counts from then).
    placement = ({} if Checkpoints.of(kind).checkpoint_on_its_cluster(workload)
                 else {"cluster": None, "placement_reason": ""})
    moved = lifecycle.back_to_queue(kind, workload, ReasonCode.PROVISIONING_FAILED, reason, retry_at,
                                    only_if={"provisioning_since": workload.provisioning_since},
                                    provisioning_since=None, provisioning_failures=tries, placed_at=None, **placement)
    return REQUEUED if moved else WAITING
