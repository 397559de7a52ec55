"""Why work on a cluster has not started, in words a team can act on (step 3 of :mod:`workloads.cycle.reconcile`).

- Work the scheduler cannot place ("Insufficient nvidia.com/gpu"): the team's flavor and the
  largest free block, on this cluster and the others (:func:`explain_capacity`), from the
  clusters' nodes read at most once a cycle (:class:`Capacity`; the cycle records what it read of
  its own cluster, and reads it anyway once every :data:`CAPACITY_REFRESH`).
- Work whose controller created no pods: its latest warning event, e.g. the team namespace's
  ResourceQuota refused them (:func:`explain_podless`).

Why queued work waits (quota, budget) is admission's to say: :func:`quotas.queue.queue_reasons`.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

import fleet.services as fleet
from cluster.capacity import clusters_capacity_reason
from cluster.errors import ClusterError
from cluster.status import WorkloadStatus
from fleet import pools
from fleet.models import Cluster
from workloads import lifecycle
from workloads.cycle import Plan
from workloads.estimates.provisioning import waiting_words
from workloads.models import ReasonCode
from workloads.registry import WorkloadKind

logger = logging.getLogger(__name__)


#: How old a cluster's recorded nodes may grow while nothing waits for capacity on it.
CAPACITY_REFRESH = timedelta(minutes=1)


@dataclass
class Capacity:
    """The clusters' nodes, read once per cycle and only when something waits for capacity:
    this cluster's live, the others' as they last reported (:func:`fleet.services.recorded_nodes`:
    no call to a cluster that may be slow or gone)."""

    backend: object
    cluster: Cluster
    read: list | None = None

    def clusters(self) -> list[tuple[str, list]]:
        """``(name, nodes)``, this cluster first (the work waits here). Raises ClusterError."""
        if self.read is None:
            here = pools.with_headroom(self.cluster, self.backend.capacity())
            others = [(c.name, fleet.recorded_nodes(c)) for c in fleet.clusters()
                      if c.pk != self.cluster.pk and c.placeable]
            self.read = [(self.cluster.name, here), *others]
        return self.read

    def here(self) -> list:
        """This cluster's nodes now (with what its pools may still add). Raises ClusterError."""
        return self.clusters()[0][1]


def explain_capacity(kind: WorkloadKind, plan: Plan, capacity: Capacity) -> None:
    """Put the scheduler's "Insufficient …" into words about the team's flavor and the largest free block
    (with several clusters, each cluster's, this one first)."""
    if not plan.status.lacks_capacity:
        return
    try:
        clusters = capacity.clusters()
    except ClusterError as exc:
        logger.warning("reconcile: no capacity to explain waiting work: %s", exc)
        return
    workload = plan.workload
    request = kind.resource_request(workload)
    per_node = max(request.units_per_node, 1)
    workers = max(request.units // per_node, 1)
    code, words = ReasonCode.WAITING_FOR_CAPACITY, ""
    pool = None if workload.spot else pools.pool_for(capacity.cluster, workload.flavor_id)
    if pool is not None:
        # Its pool may still grow (docs/pools.md): it waits for the pool's new nodes, not for others' work.
        here = clusters[0][1]
        if pools.can_grow(pool, here):
            code, words = ReasonCode.PROVISIONING, waiting_words(pool, here, workers, per_node, None, timezone.now())
    if not words:
        words = clusters_capacity_reason(workload.flavor.to_spec(), per_node, clusters, workers=workers,
                                         spot=workload.spot)
    if words != plan.workload.reason:
        plan.changes.update(reason=words[:500], reason_code=code)
    else:
        plan.changes.pop("reason", None)
        plan.changes.pop("reason_code", None)


def explain_podless(kind: WorkloadKind, backend, workload, status: WorkloadStatus, now: datetime) -> WorkloadStatus:
    """Why a workload waiting to start has no pods after a period, from its controller's warning events.

    With no pod there is no scheduler message to show; what the controller could not do is
    only in its events, e.g. the team namespace's ResourceQuota refused the pods (FailedCreate:
    "exceeded quota"). One events call per such workload and cycle, only while it stays unexplained.
    """
    waiting = kind.state_for(status, workload) == kind.lifecycle.applied
    if not waiting:
        return status
    if workload.reason_code not in (ReasonCode.NONE, ReasonCode.SUBMITTED):
        # Explained already, and still waiting without pods: the explanation holds (no events call).
        return dataclasses.replace(status, reason=workload.reason)
    applied = workload.applied_at or workload.apply_started_at or workload.admitted_at or workload.created_at
    if applied > now - lifecycle.redrive_after():
        return status  # give the controller a period to create its pods
    try:
        warnings = [e for e in backend.events(workload.address) if e.type == "Warning"]
    except ClusterError as exc:
        logger.warning("reconcile: no events for %s: %s", workload.ref, exc)
        return status
    if not warnings:
        return status
    latest = warnings[-1]
    return dataclasses.replace(status, reason=f"{latest.reason}: {latest.message}" if latest.reason else latest.message)
