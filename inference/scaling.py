"""Burst replicas: grown while an endpoint needs them, reclaimed when others do.

Every reconcile cycle calls :func:`follow` for each endpoint it observed. The endpoint's
**replica ceiling** (the ScaledObject's ``maxReplicaCount``) starts at its guaranteed base and
moves one decision at a time, each under the team's admission lock and through
:func:`quotas.admission.resize` — the same ``decide()`` rules as any admission:

1. queued work of the team waits for the endpoint's flavor → the burst is reclaimed first
   (the ceiling falls back to the base, the units are released, the queue is admitted);
2. the autoscaler wants more than the ceiling (the HPA's ``ScalingLimited``) → grow by one
   replica if the quota and the budget allow, else record why it is capped;
3. the autoscaler has wanted less than the ceiling for ``scale_down_delay_seconds`` → the
   ceiling comes down to what it wants (never below the base) and the units are released.

Each decision is a :class:`~inference.models.ScalingEvent`; a refusal that repeats every
cycle is recorded once. A changed ceiling is re-applied to the cluster by the apply task.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from cluster.status import WorkloadStatus
from inference.constants import HOLDING_STATES, Decision
from inference.models import InferenceEndpoint, ScalingEvent
from quotas import admission
from quotas.constants import Reason as QuotaReason
from quotas.models import QueuedRequest
from quotas.services import budget_summary
from workloads.services import enqueue_apply


def spare_units(endpoint: InferenceEndpoint) -> int:
    """Units of the endpoint's flavor the team has free now (for a rolling update's surge)."""
    in_use, limit = admission.units_of(endpoint.team, endpoint.flavor_id)
    return max(limit - in_use, 0)


def _queue_waits_for(endpoint: InferenceEndpoint) -> bool:
    return QueuedRequest.objects.filter(team_id=endpoint.team_id, flavor_id=endpoint.flavor_id).exists()


def follow(endpoint: InferenceEndpoint, status: WorkloadStatus, now: datetime) -> bool:
    """Grant, reclaim or release burst for one observation. True when units were given back."""
    if endpoint.state not in HOLDING_STATES:
        return False
    base = endpoint.base_replicas
    ceiling = endpoint.replica_ceiling or base
    if ceiling > base and _queue_waits_for(endpoint):
        return set_ceiling(endpoint, base, Decision.BURST_RECLAIMED, status, now,
                           f"queued work of the team needs {endpoint.flavor.name} units")
    if status.scaling_limited and ceiling < endpoint.max_replicas:
        _grow(endpoint, ceiling, status, now)
        return False
    if ceiling > base and status.desired_replicas < ceiling:
        since = endpoint.demand_below_ceiling_since
        if since is None:
            InferenceEndpoint.objects.filter(pk=endpoint.pk).update(demand_below_ceiling_since=now)
            return False
        if now - since >= timedelta(seconds=endpoint.scale_down_delay_seconds):
            wanted = max(base, status.desired_replicas)
            return set_ceiling(endpoint, wanted, Decision.BURST_RELEASED, status, now,
                               f"demand stayed at {status.desired_replicas} replicas for "
                               f"{endpoint.scale_down_delay_seconds} s")
    elif endpoint.demand_below_ceiling_since is not None:
        InferenceEndpoint.objects.filter(pk=endpoint.pk).update(demand_below_ceiling_since=None)
    return False


def _grow(endpoint: InferenceEndpoint, ceiling: int, status: WorkloadStatus, now: datetime) -> None:
    """One more replica if the quota and the budget allow; else record (once) why not."""
    if _queue_waits_for(endpoint):
        _record_once(endpoint, Decision.CAPPED_BY_QUOTA, status, now, ceiling,
                     f"capped at {ceiling} replicas: queued work of the team waits for {endpoint.flavor.name}")
        return
    budget = budget_summary(endpoint.team)
    if budget["alert"]:
        _record_once(endpoint, Decision.CAPPED_BY_BUDGET, status, now, ceiling,
                     f"capped at {ceiling} replicas by the budget: the month's spend passed "
                     f"{budget['alert_threshold_pct']}% of it")
        return
    with transaction.atomic():
        admission.lock_team(endpoint.team)
        decision = admission.resize(endpoint.team, endpoint.ref, (ceiling + 1) * endpoint.gpus_per_replica)
        if not decision.admitted:
            if decision.reason == QuotaReason.BUDGET_EXHAUSTED:
                _record_once(endpoint, Decision.CAPPED_BY_BUDGET, status, now, ceiling,
                             f"capped at {ceiling} replicas by the budget ({decision.message})")
            else:
                in_use, limit = admission.units_of(endpoint.team, endpoint.flavor_id)
                _record_once(endpoint, Decision.CAPPED_BY_QUOTA, status, now, ceiling,
                             f"capped at {ceiling} replicas by the team quota "
                             f"({endpoint.flavor.name} {in_use} of {limit} in use)")
            return
        _move_ceiling(endpoint, ceiling, ceiling + 1, Decision.BURST_GRANTED, status, now,
                      f"burst replica {ceiling + 1} of at most {endpoint.max_replicas} granted")


def set_ceiling(endpoint: InferenceEndpoint, ceiling: int, decision: str, status: WorkloadStatus | None,
                now: datetime, reason: str) -> bool:
    """Lower (or raise, when it fits) the ceiling to ``ceiling`` and resize the reservation with it.

    Returns True when units were given back. Runs under the team's admission lock.
    """
    with transaction.atomic():
        admission.lock_team(endpoint.team)
        current = InferenceEndpoint.objects.filter(pk=endpoint.pk).values_list("replica_ceiling", flat=True).first()
        if current is None:
            return False
        current = current or endpoint.base_replicas
        if ceiling == current:
            return False
        if not admission.resize(endpoint.team, endpoint.ref, ceiling * endpoint.gpus_per_replica).admitted:
            return False
        _move_ceiling(endpoint, current, ceiling, decision, status, now, reason)
    return ceiling < current


def _move_ceiling(endpoint: InferenceEndpoint, old: int, new: int, decision: str, status: WorkloadStatus | None,
                  now: datetime, reason: str) -> None:
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(replica_ceiling=new, demand_below_ceiling_since=None)
    endpoint.replica_ceiling = new
    record(endpoint, decision, status, now, new, reason)
    enqueue_apply(endpoint.identity)  # the ScaledObject's maxReplicaCount follows the ceiling


def record(endpoint: InferenceEndpoint, decision: str, status: WorkloadStatus | None, now: datetime, ceiling: int,
           reason: str) -> ScalingEvent:
    return ScalingEvent.objects.create(
        endpoint=endpoint, at=now, decision=decision, reason=reason[:500], replica_ceiling=ceiling,
        replicas=status.replicas if status else endpoint.replicas,
        desired_replicas=status.desired_replicas if status else endpoint.desired_replicas,
        metric_value=status.metric_value if status else None,
    )


def _record_once(endpoint: InferenceEndpoint, decision: str, status: WorkloadStatus, now: datetime, ceiling: int,
                 reason: str) -> None:
    """Record a refusal unless it is what the log says already (it repeats every cycle while capped)."""
    last = endpoint.scaling_events.values_list("decision", "replica_ceiling").first()
    if last != (decision, ceiling):
        record(endpoint, decision, status, now, ceiling, reason)
    if endpoint.reason != reason:
        InferenceEndpoint.objects.filter(pk=endpoint.pk).update(reason=reason[:500])
