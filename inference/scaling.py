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

:func:`note_counts` keeps the replica samples the chart draws: one row whenever ready,
desired or the ceiling changed since the last observation, none for an endpoint that stays
as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction

from cluster.status import WorkloadStatus
from core.formatting import count_of
from inference import revisions
from inference.constants import HOLDING_STATES, ScalingDecision
from inference.models import InferenceEndpoint, ReplicaSample, ScalingEvent
from quotas import admission
from quotas.constants import AdmissionCode
from quotas.decide import Decision, ResourceRequest
from quotas.facts import units_of
from quotas.models import QueuedRequest
from quotas.queue import preview
from teams.services import lock_team
from workloads import lifecycle
from workloads.estimates.preview import borrow_words
from workloads.identity import WorkloadId
from workloads.models import ReasonCode
from workloads.services import enqueue_apply


def spare_units(endpoint: InferenceEndpoint) -> int:
    """Units of the endpoint's flavor the team has free now (for a rolling update's surge)."""
    in_use, limit = units_of(endpoint.team, endpoint.flavor_id)
    return max(limit - in_use, 0)


def capped_at(ceiling: int) -> str:
    """How a refused burst's reason begins: the ceiling it is capped at."""
    return f"capped at {ceiling} replica{'' if ceiling == 1 else 's'}"


#: Scaling decisions that refuse a burst: the endpoint's reason then says why (``burst_capped``).
CAPPED = (ScalingDecision.CAPPED_BY_QUOTA, ScalingDecision.CAPPED_BY_BUDGET)


def still_capped(endpoint: InferenceEndpoint, status: WorkloadStatus) -> bool:
    """Whether the endpoint's reason is a capped burst's, and the observation says it still is.

    The autoscaler still wants more than the ceiling, and the scaling log's latest decision is
    the refusal at this very ceiling: a refusal is re-decided every cycle but recorded once, so
    its words stay only while they hold (once demand falls or the ceiling moves they go).
    """
    if not status.scaling_limited or endpoint.reason_code != ReasonCode.BURST_CAPPED:
        return False
    ceiling = endpoint.ceiling
    last = endpoint.scaling_events.values_list("decision", "replica_ceiling").first()
    return last is not None and last[0] in CAPPED and last[1] == ceiling


def _queue_waits_for(endpoint: InferenceEndpoint) -> bool:
    return _queue_waits(endpoint.team_id, endpoint.flavor_id)


def _queue_waits(team_id: int, flavor_id: int) -> bool:
    return QueuedRequest.objects.filter(team_id=team_id, flavor_id=flavor_id).exists()


def _burst_held_back(team, flavor) -> str | None:
    """Why no burst is granted to the team's endpoints of ``flavor`` now, whatever the quota says:
    queued work of the team waits for the flavor (it comes first). None when none does.

    The budget's word on burst (none past the alert threshold) is :func:`quotas.decide.decide`'s,
    asked with a burst request like every other limit.
    """
    if _queue_waits(team.pk, flavor.pk):
        return f"queued work of the team waits for {flavor.name}"
    return None


@dataclass(frozen=True)
class BurstOutlook:
    """How far an endpoint would grow if its load asked now: ``replicas`` at most, and why not further."""

    replicas: int
    max_replicas: int
    words: str


def burst_outlook(team, flavor, gpus_per_replica: int, spot: bool, base: int, held: int,
                  max_replicas: int, ref: str | None = None) -> BurstOutlook:
    """The most replicas burst would be granted up to now, by the rules :func:`_grow` applies.

    ``held``: replicas whose units the endpoint holds already (its ceiling, ``ref``'s
    hold; 0 and None for one not created yet). Each step asks what :func:`_grow` would:
    for a live endpoint :func:`quotas.admission.preview_resize` of its hold — the very
    question :func:`quotas.admission.resize` decides —, for a draft :func:`quotas.queue.preview`;
    nothing is locked or written. Past the ceiling held, the words name it, so the page never
    shows a figure above its ceiling without saying that it is what the load could get.
    """
    low = max(base, held)
    if max_replicas <= base:
        return BurstOutlook(base, max_replicas, "no burst: the maximum is the minimum")
    held_back = _burst_held_back(team, flavor)
    if held_back is not None:
        return BurstOutlook(low, max_replicas, f"no burst now: {held_back}")
    high = max_replicas
    granted = None  # decide()'s word on the largest burst that fits (None: none above what is held)
    while low < high:  # decide() is monotone in the units asked: the largest that fits, by halves
        middle = (low + high + 1) // 2
        decision = _burst_preview(team, flavor, gpus_per_replica, spot, middle, held, ref)
        if decision.admitted:
            low, granted = middle, decision
        else:
            high = middle - 1
    # Burst on units its cohort lends is preemptible, and the first work reclaimed (docs/design.md "Sharing, preemption, clusters").
    borrowing = f" \u2014 it {borrow_words(granted, flavor.name)}" if granted is not None and granted.borrows else ""
    # The ceiling held now, when the load could get more than it: said, so no figure contradicts it.
    now_at = f"ceiling {held} now; " if ref is not None and held < low else ""
    if low >= max_replicas:
        return BurstOutlook(low, max_replicas,
                            f"{now_at}burst to all {count_of(max_replicas, 'replica')} would be granted now{borrowing}")
    refusal = _burst_preview(team, flavor, gpus_per_replica, spot, low + 1, held, ref)
    why = refusal.reason.words
    if refusal.reason.code == AdmissionCode.BUDGET_ALERT:
        return BurstOutlook(low, max_replicas, f"no burst now: {why}")  # none at all, whatever is held
    if refusal.reason.code in (AdmissionCode.WAITING_FOR_QUOTA, AdmissionCode.EXCEEDS_QUOTA):  # as _grow says it
        in_use, limit = units_of(team, flavor.pk)
        why = f"the team quota ({flavor.name} {in_use} of {limit} in use{'' if held else ' without this endpoint'})"
    if low <= base:
        return BurstOutlook(low, max_replicas, f"no burst now: {why}")
    return BurstOutlook(low, max_replicas, f"{now_at}burst up to {low} of {count_of(max_replicas, 'replica')} would be "
                                           f"granted now; not more: {why}{borrowing}")


def _burst_preview(team, flavor, gpus_per_replica: int, spot: bool, replicas: int, held: int,
                   ref: str | None) -> Decision:
    """What decide() says now about a ceiling of ``replicas`` (a dry run: nothing locked or written)."""
    if ref is not None:
        # The quota hold counts a live candidate's units too (inference.revisions): they stay beside the ceiling.
        extra = _candidate_units(ref, gpus_per_replica)
        return admission.preview_resize(team, ref, replicas * gpus_per_replica + extra, burst=True)
    return preview(team, ResourceRequest(flavor=flavor.name, units=(replicas - held) * gpus_per_replica,
                                         units_per_node=gpus_per_replica, spot=spot,
                                         description="burst preview", burst=True))


def _candidate_units(ref: str, gpus_per_replica: int) -> int:
    """Units a live candidate of the endpoint ``ref`` holds (0 for a draft or none)."""
    identity = WorkloadId.from_ref(ref)
    if identity is None:
        return 0
    return revisions.held_replicas(InferenceEndpoint(pk=identity.pk)) * gpus_per_replica


def follow(endpoint: InferenceEndpoint, status: WorkloadStatus, now: datetime) -> bool:
    """Grant, reclaim or release burst for one observation. True when units were given back.

    ``endpoint`` is the cycle's copy, read before the cluster was asked: it says which move to try; the
    move itself is decided on the row as it is under the team's lock (:meth:`InferenceEndpoint.relock`).
    """
    if endpoint.state not in HOLDING_STATES:
        return False
    base = endpoint.base_replicas
    ceiling = endpoint.ceiling
    if ceiling > base and _queue_waits_for(endpoint):
        return set_ceiling(endpoint, base, ScalingDecision.BURST_RECLAIMED, status, now,
                           f"queued work of the team needs {endpoint.flavor.name} units")
    if status.scaling_limited and ceiling < endpoint.max_replicas:
        _grow(endpoint, status, now)
        return False
    if ceiling > base and status.desired_replicas < ceiling:
        since = endpoint.demand_below_ceiling_since
        if since is None:
            # The clock starts on the row the cycle read: a move of the ceiling or the sizes since (a PATCH of the
            # sizes restarts it) is about a ceiling this observation did not see, and keeps its None.
            InferenceEndpoint.objects.filter(
                pk=endpoint.pk, demand_below_ceiling_since__isnull=True, replica_ceiling=endpoint.replica_ceiling,
                min_replicas=endpoint.min_replicas, max_replicas=endpoint.max_replicas,
            ).update(demand_below_ceiling_since=now)
            return False
        if now - since >= timedelta(seconds=endpoint.scale_down_delay_seconds):
            wanted = max(base, status.desired_replicas)
            return set_ceiling(endpoint, wanted, ScalingDecision.BURST_RELEASED, status, now,
                               f"demand stayed at {count_of(status.desired_replicas, 'replica')} for "
                               f"{endpoint.scale_down_delay_seconds} s", clock=since)
    elif endpoint.demand_below_ceiling_since is not None:
        InferenceEndpoint.objects.filter(
            pk=endpoint.pk, demand_below_ceiling_since=endpoint.demand_below_ceiling_since,
        ).update(demand_below_ceiling_since=None)
    return False


def _grow(endpoint: InferenceEndpoint, status: WorkloadStatus, now: datetime) -> None:
    """One more replica if the quota and the budget allow; else record (once) why not.

    Decided on the row under the team's lock: a maximum lowered since the cycle read it is not grown
    past, an endpoint ended since is left alone.
    """
    with transaction.atomic():
        lock_team(endpoint.team)
        if not endpoint.relock():
            return  # ended meanwhile: its hold went with it
        ceiling = endpoint.ceiling
        if ceiling >= endpoint.max_replicas:
            return  # its maximum was lowered (or another cycle grew it) meanwhile: nothing to grant
        held_back = _burst_held_back(endpoint.team, endpoint.flavor)
        if held_back is not None:
            _record_once(endpoint, ScalingDecision.CAPPED_BY_QUOTA, status, now, ceiling,
                         f"{capped_at(ceiling)}: {held_back}")
            return
        try:
            decision = admission.resize(endpoint.team, endpoint.ref, revisions.held_units(endpoint, ceiling + 1),
                                        burst=True)
        except LookupError:
            return  # its hold was released (its end): nothing to grant
        if not decision.admitted:
            if decision.reason.code == AdmissionCode.BUDGET_ALERT:
                _record_once(endpoint, ScalingDecision.CAPPED_BY_BUDGET, status, now, ceiling,
                             f"{capped_at(ceiling)} by the budget: {decision.reason.words}")
            elif decision.reason.code == AdmissionCode.BUDGET_EXHAUSTED:
                _record_once(endpoint, ScalingDecision.CAPPED_BY_BUDGET, status, now, ceiling,
                             f"{capped_at(ceiling)} by the budget ({decision.reason.words})")
            else:
                in_use, limit = units_of(endpoint.team, endpoint.flavor_id)
                _record_once(endpoint, ScalingDecision.CAPPED_BY_QUOTA, status, now, ceiling,
                             f"{capped_at(ceiling)} by the team quota "
                             f"({endpoint.flavor.name} {in_use} of {limit} in use)")
            return
        _move_ceiling(endpoint, ceiling, ceiling + 1, ScalingDecision.BURST_GRANTED, status, now,
                      f"burst replica {ceiling + 1} of at most {endpoint.max_replicas} granted")


def set_ceiling(endpoint: InferenceEndpoint, ceiling: int, decision: str, status: WorkloadStatus | None,
                now: datetime, reason: str, *, clock: datetime | None = None) -> bool:
    """Lower the ceiling to ``ceiling`` and shrink the hold with it. True when units were given back.

    Runs under the team's admission lock, on the row as it is then (:meth:`InferenceEndpoint.relock`):
    ``ceiling`` was worked out from the caller's copy, so it is never taken below the minimum now nor
    above the ceiling now (a minimum raised, a maximum lowered meanwhile stay what the user set), and an
    endpoint ended meanwhile has nothing to give back. ``clock``: the scale-down clock a burst release was
    judged on; the row must still hold it, its delay passed on the row's own delay — a PATCH since that
    restarted the clock or lengthened the delay keeps the burst (it was released on the stale copy's).
    """
    with transaction.atomic():
        lock_team(endpoint.team)
        if not endpoint.relock():
            return False
        if clock is not None and (endpoint.demand_below_ceiling_since != clock
                                  or now - clock < timedelta(seconds=endpoint.scale_down_delay_seconds)):
            return False
        current = endpoint.ceiling
        ceiling = min(max(ceiling, endpoint.base_replicas), current)
        if ceiling == current:
            return False
        try:
            shrunk = admission.resize(endpoint.team, endpoint.ref, revisions.held_units(endpoint, ceiling))
        except LookupError:
            return False  # its hold was released (its end): nothing left to give back
        if not shrunk.admitted or not _move_ceiling(endpoint, current, ceiling, decision, status, now, reason):
            return False
    return True


def _move_ceiling(endpoint: InferenceEndpoint, old: int, new: int, decision: str, status: WorkloadStatus | None,
                  now: datetime, reason: str) -> bool:
    """Write the ceiling ``new`` (the hold is resized already), conditional on the row the caller read
    under the lock (:meth:`InferenceEndpoint.relock`): its ceiling and sizes. False, and the resize undone
    with the caller's block, when the row moved all the same."""
    moved = InferenceEndpoint.objects.filter(
        pk=endpoint.pk, replica_ceiling=endpoint.replica_ceiling, min_replicas=endpoint.min_replicas,
        max_replicas=endpoint.max_replicas).update(replica_ceiling=new, demand_below_ceiling_since=None)
    if not moved:
        transaction.set_rollback(True)
        return False
    endpoint.replica_ceiling = new
    record(endpoint, decision, status, now, new, reason)
    if new < old:
        lifecycle.cap_billing(endpoint, revisions.held_units(endpoint), now)  # units above the grant are not billed
    if status is None:
        # Moved outside an observation (budget stop, staff): no cycle samples this move.
        sample(endpoint, endpoint.replicas, endpoint.desired_replicas, new, now)
    enqueue_apply(endpoint.identity)  # the ScaledObject's maxReplicaCount follows the ceiling
    return True


def record(endpoint: InferenceEndpoint, decision: str, status: WorkloadStatus | None, now: datetime, ceiling: int,
           reason: str) -> ScalingEvent:
    row = event(endpoint, decision, status, now, ceiling, reason)
    row.save(force_insert=True)
    return row


def event(endpoint: InferenceEndpoint, decision: str, status: WorkloadStatus | None, now: datetime, ceiling: int,
          reason: str) -> ScalingEvent:
    """The unsaved scaling event :func:`record` writes (a new endpoint's is written with its admission)."""
    return ScalingEvent(
        endpoint=endpoint, at=now, decision=decision, reason=reason[:500], replica_ceiling=ceiling,
        replicas=status.replicas if status else endpoint.replicas,
        desired_replicas=status.desired_replicas if status else endpoint.desired_replicas,
        metric_value=status.metric_value if status else None,
    )


def sample(endpoint: InferenceEndpoint, ready: int, desired: int, ceiling: int, now: datetime) -> ReplicaSample:
    """The replica counts from ``now`` on (the chart's data)."""
    row = replica_sample(endpoint, ready, desired, ceiling, now)
    row.save(force_insert=True)
    return row


def replica_sample(endpoint: InferenceEndpoint, ready: int, desired: int, ceiling: int, now: datetime) -> ReplicaSample:
    """The unsaved sample :func:`sample` writes (a new endpoint's first is written with its admission)."""
    return ReplicaSample(endpoint=endpoint, at=now, ready=ready, desired=desired, ceiling=ceiling)


def note_counts(endpoint: InferenceEndpoint, before: tuple[int, int, int], status: WorkloadStatus,
                now: datetime) -> None:
    """Sample the counts an observation shows when they differ from ``before`` (ready, desired, ceiling).

    ``before`` is what the endpoint's row said when the cycle read it; the ceiling is the one
    :func:`follow` left. An endpoint that stays as it is writes nothing.
    """
    seen = (status.replicas, status.desired_replicas, endpoint.replica_ceiling)
    if seen != before:
        sample(endpoint, *seen, now)


def _record_once(endpoint: InferenceEndpoint, decision: str, status: WorkloadStatus, now: datetime, ceiling: int,
                 reason: str) -> None:
    """Record a refusal unless it is what the log says already (it repeats every cycle while capped)."""
    last = endpoint.scaling_events.values_list("decision", "replica_ceiling").first()
    if last != (decision, ceiling):
        record(endpoint, decision, status, now, ceiling, reason)
    if endpoint.reason != reason:
        InferenceEndpoint.objects.filter(pk=endpoint.pk).update(reason=reason[:500], reason_code=ReasonCode.BURST_CAPPED)
