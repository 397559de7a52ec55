"""State moves every kind shares, below the tasks and the services that use them.

:func:`fail` and :func:`end` are called by the apply task, the reconcile cycle and the user
services alike; they only write the database and never publish tasks (the callers do), which
keeps ``tasks`` → ``lifecycle`` ← ``services`` free of import cycles.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

import fleet.services as fleet
from billing import ledger, segments
from billing.models import PreemptionEvent
from core.formatting import format_duration
from quotas import admission
from quotas.queue import queue_reason
from teams.services import lock_team
from workloads import attempts, secrets
from workloads.cycle.placement import KEPT_PLACEMENT
from workloads.events import workload_moved
from workloads.models import STOP_CODES, ReasonCode, ran_between, ran_in_all
from workloads.registry import Checkpoints, kind_of


def redrive_after() -> timedelta:
    """How long an apply may take before the reconciler re-drives it (one reconcile period)."""
    return timedelta(seconds=max(settings.CELERY_RECONCILE_INTERVAL, 1.0))


def _close_billing(workload, ended_at: datetime) -> None:
    """Bill the open segment up to ``ended_at`` (the caller holds the workload's row lock), before its hold is released."""
    # The hold as it is now: a cycle may have moved it since the caller read the workload. Cycles
    # move it holding the workload's row (the caller's lock now), so the mark read here stays.
    workload.forget_segment()
    plan = segments.plan_billing(workload, 0, None, ended_at, ended_at)
    if not plan.changes or not segments.move_segment(plan):
        return
    type(workload).objects.filter(pk=workload.pk).update(**segments.cost_change(plan), idle_since=None)
    segments.applied(workload, plan)
    if segments.record([(workload, plan)]):
        sync_billed_cost(workload)  # the ledger held part of it already


def cap_billing(workload, units: int, now: datetime) -> bool:
    """Bill no more than ``units`` from ``now`` on: close an open segment running more, open the next at ``units``.

    For a grant that shrank under running work (an endpoint's lowered ceiling): the cluster may
    take a moment to stop what is above it, and that moment is not the team's. Conditional on
    the billing mark read here, so a reconcile cycle closing the same segment wins or loses
    cleanly. True when the segment was capped.
    """
    with transaction.atomic():
        # The workload's row first, as a cycle and an end take it, then its hold as it is now.
        type(workload).objects.select_for_update().filter(pk=workload.pk).values_list("pk").first()
        workload.forget_segment()
        if workload.billed_until is None or workload.open_units <= units:
            return False
        plan = segments.plan_billing(workload, units, None, None, now, workload.open_idle)
        if not segments.move_segment(plan):
            return False
        if plan.cost:
            type(workload).objects.filter(pk=workload.pk).update(**segments.cost_change(plan))
        segments.applied(workload, plan)
        if segments.record([(workload, plan)]):
            sync_billed_cost(workload)
    return True


def release_holdings(ref: str) -> None:
    """Give back what a workload holds only while it lives: its quota and its secret values.

    Every move to a final or ended state calls this (here and in the reconcile cycle). The
    secret values are read only to (re)create the workload's Kubernetes Secret, which work that
    has ended never needs again, so the database keeps them no longer than that; the names stay,
    for the masked display and for "Run again", which asks for the values anew.
    """
    admission.release(ref)
    secrets.forget_values(ref)


def sync_billed_cost(workload) -> None:
    """Set ``billed_cost`` to the ledger's total (after the ledger held an interval already)."""
    total = ledger.cost_by_ref([workload.ref])[workload.ref]
    type(workload).objects.filter(pk=workload.pk).update(billed_cost=total)


def fail(workload, reason: str, code: ReasonCode, now: datetime | None = None) -> bool:
    """Move a non-final workload to its kind's failed state and release its quota. False if already final."""
    kind = kind_of(workload)
    now = now or timezone.now()
    with transaction.atomic():
        updated = (type(workload).objects.filter(pk=workload.pk).exclude(state__in=workload.FINAL_STATES)
                   .update(state=kind.lifecycle.failed, reason=reason[:500], reason_code=code, finished_at=now))
        if updated:
            _close_billing(workload, now)
            release_holdings(workload.ref)
            workload_moved.send(sender=type(workload), workload=workload, state=kind.lifecycle.failed,
                                reason=reason[:500], at=now)
    return bool(updated)


def end(workload, reason: str, code: ReasonCode = ReasonCode.ENDED_BY_USER) -> bool:
    """The user's end (cancel, delete): move to the kind's ended state, bill to now, release quota.

    Takes the team's admission lock first — the order admission takes its locks in, since a
    queued workload may be being admitted right now — then moves the state conditionally on
    "not final and not ended already", so a reconcile finishing it at the same moment wins or
    loses cleanly, never both. Then admits queued work the freed units let in. False when
    there was nothing to end. Runs in the caller's transaction when there is one.
    """
    kind = kind_of(workload)
    lifecycle = kind.lifecycle
    with transaction.atomic():
        lock_team(workload.team)
        now = timezone.now()
        updated = (type(workload).objects.filter(pk=workload.pk)
                   .exclude(state__in=(*workload.FINAL_STATES, *lifecycle.removed))
                   .update(state=lifecycle.ended, finished_at=now, reason=reason[:500], reason_code=code))
        if not updated:
            return False
        # The reconciler no longer bills an ended workload: close its segment here (our UPDATE
        # holds the row, so a concurrent cycle cannot close it too).
        _close_billing(workload, now)
        release_holdings(workload.ref)
        admission.admit_waiting(workload.team)
    return True


def stop(workload, reason: str, prune: bool, now: datetime) -> bool:
    """Stop work on its owner's behalf through the checkpoint contract (docs/sweeps.md "Pruning"): a sweep's
    pruner (``prune``: it ends in its kind's ``Lifecycle.pruned`` state, a final state of its own) or its sweep
    stopped (it ends as a user's end does, in ``Lifecycle.ended``).

    Work holding quota gets the notice as a preemption gives it — ``preempting_since`` (which keeps its hold
    until its pods are gone, and has the reconcile cycle give the notice and the graceful delete again when
    they were lost: :func:`workloads.cycle.preemption.follow`), its reason saying which stop (:data:`STOP_CODES`),
    its pods the contract's grace to save a checkpoint — and then :func:`finish_stop` ends it. No team took
    anything: no preemption is logged or counted. Queued work has no pods: a stop ends it at once (:func:`end`);
    a prune leaves it be (nothing it reported can be judged). Only the database is written here: the caller
    has the notice given after commit (:func:`workloads.services.stop_with_notice`). False when nothing moved.
    """
    kind = kind_of(workload)
    if workload.state == kind.lifecycle.queued:
        return False if prune else end(workload, reason, ReasonCode.ENDED_BY_USER)
    seconds = Checkpoints.of(kind).preemption_grace(workload)
    code = ReasonCode.PRUNING if prune else ReasonCode.STOPPING
    return bool(type(workload).objects.filter(
        pk=workload.pk, state__in=workload.HOLDING_STATES, preempting_since__isnull=True,
    ).update(preempting_since=now, reason_code=code,
             reason=f"{reason}; its pods save a checkpoint and stop within {seconds} s"[:500]))


def finish_stop(kind, workload, now: datetime, after: str = "") -> bool:
    """A stopped workload's objects are gone (:func:`stop`): it ends — pruned, or as a user's end — its
    segment billed to now (the grace was its owner's time), its quota released and the team's queue admitted.
    Under the team's admission lock, conditional on the same stop still being under way. False when
    nothing moved (a replay, or it ended on its own meanwhile).

    Also where a stop ends when its cluster is lost (:func:`workloads.cycle.reconcile.observe_failed`, ``after``
    saying so in its reason): its segment was closed at the cluster's last sighting already, so nothing after
    that is billed here."""
    lc = kind.lifecycle
    pruned = workload.reason_code == ReasonCode.PRUNING
    state = lc.pruned if pruned and lc.pruned else lc.ended
    reason = workload.reason.partition("; its pods save")[0]
    if after:
        reason = f"{reason} ({after})"
    with transaction.atomic():
        admission.lock_admission(workload.team)
        updated = type(workload).objects.filter(
            pk=workload.pk, state__in=workload.HOLDING_STATES, preempting_since=workload.preempting_since,
            reason_code__in=STOP_CODES,
        ).update(state=state, finished_at=now, preempting_since=None, reason=reason[:500],
                 reason_code=ReasonCode.PRUNED if pruned else ReasonCode.ENDED_BY_USER)
        if not updated:
            return False
        _close_billing(workload, now)
        release_holdings(workload.ref)
        workload_moved.send(sender=type(workload), workload=workload, state=state, reason=reason[:500], at=now)
        admission.admit_waiting(workload.team)
    return True


def requeue(kind, workload, now: datetime, reason: str | None = None,
            code: ReasonCode = ReasonCode.PREEMPTED, place_again: bool | None = None) -> bool:
    """A preempted workload whose objects are gone goes back to ``queued`` at its old place.

    Under the team's admission lock (the order admission takes), conditional on it still being
    preempted: its open segment is billed to ``now`` (the grace was the team's time), its
    hold becomes a queue entry dated from its first submission, and what the apply needs
    starts afresh, as its next ``attempt`` — its ``preemptions`` were counted when it was chosen, no retry is spent. Its
    reason is the preemption's ("preempted: team … reclaimed …") unless ``reason`` says another
    (a run taken off a lost cluster). The next attempt stays on its cluster when its kind keeps
    objects across attempts (a run's checkpoint claim is one cluster's: runs come back where they
    were), and its placement reason says so (the earlier one's figures are that attempt's); else
    it is placed afresh; ``place_again`` says so explicitly (a lost cluster: placed afresh). What
    the ending attempt was — where and why it ran, its times, its checkpoint — is kept
    (:func:`workloads.attempts.close`), beside the logs saved while its pods stopped, and its time is added to
    what its earlier attempts ran (``earlier_run_seconds``). Work whose attempts have used up its runtime limit
    does not queue again: it fails there (:func:`_out_of_time`). False when there was nothing to do.
    """
    ran = ran_between(workload.attempt_started, now) or timedelta(0)
    left = kind.runtime_left(workload)
    if left is not None and ran >= left:
        return _out_of_time(kind, workload, now, code)
    earlier = workload.earlier_run_seconds + int(ran.total_seconds())
    lc = kind.lifecycle
    if place_again is None:
        place_again = not any(r.kept_across_attempts for r in kind.resources)
    if place_again:
        placement = {"cluster": None, "placement_reason": "", "placed_at": None}
    elif workload.cluster_id is not None:
        # Its placed_at is stamped when it is placed there again, after its wait in the queue (place_workload).
        placement = {"placement_reason": KEPT_PLACEMENT.format(
            cluster=fleet.placed_on(workload.cluster_id).name, attempt=workload.attempt, noun=kind.noun)[:300],
            "placed_at": None}
    else:
        placement = {}
    with transaction.atomic():
        admission.lock_admission(workload.team)
        event = None if reason else PreemptionEvent.objects.filter(ref=workload.ref).values_list("reason", "cause").first()
        event_reason = reason or (event[0] if event else "preempted")
        updated = type(workload).objects.filter(
            pk=workload.pk, state__in=workload.HOLDING_STATES, preempting_since=workload.preempting_since,
        ).update(state=lc.queued, reason=event_reason[:500], reason_code=code, preempting_since=None,
                 admitted_at=None, applied_at=None, apply_started_at=None, apply_attempts=0, attempt=F("attempt") + 1,
                 attempt_started_at=None, provisioning_since=None, provisioning_failures=0,
                 earlier_run_seconds=earlier, **placement)
        if not updated:
            return False
        # What it commits when admitted again is what this attempt left: the count as written (the row matched the
        # snapshot's preemption, and only a requeue, which ends that, moves the count).
        workload.earlier_run_seconds = earlier
        # The snapshot the update matched (same preemption) is the attempt that ends here.
        attempts.close(workload, Checkpoints.of(kind).last_checkpoint(workload), now, event_reason, code, event[1] if event else "")
        # Queued again, it shows a quote again until its next hold's segment opens (its rate then is
        # that moment's): the hold it gives back here is no longer its money (Workload.segment).
        _close_billing(workload, now)
        admission.requeue(workload.team, workload.ref, kind.admission_request(workload), workload.created_at)
    return True


def _out_of_time(kind, workload, now: datetime, code: ReasonCode) -> bool:
    """A preempted workload whose attempts have run its whole runtime limit fails where :func:`requeue` would queue
    it again, as Kueue deactivates a workload past its ``maximumExecutionTimeSeconds``: another attempt would
    have no time to run. Its current attempt stays its last: nothing to close. Its segment
    is billed to ``now`` (the grace was its owner's time), its quota released. Under the team's admission lock,
    conditional on the same preemption; the caller admits the team's queue. False when nothing moved."""
    limit = timedelta(minutes=getattr(workload, kind.runtime_limit))
    total = ran_in_all(workload.earlier_run_seconds, workload.attempt_started, now)
    cause = "its cluster was lost" if code == ReasonCode.CLUSTER_LOST else "it was preempted"
    ran_words = (f"it ran {format_duration(total)} until {cause}" if workload.attempt == 1 else
                 f"its {workload.attempt} attempts ran {format_duration(total)} in all, the last until {cause}")
    words = f"Its runtime limit ({format_duration(limit)}) is used up: {ran_words}; not queued again"
    with transaction.atomic():
        admission.lock_admission(workload.team)
        updated = type(workload).objects.filter(
            pk=workload.pk, state__in=workload.HOLDING_STATES, preempting_since=workload.preempting_since,
        ).update(state=kind.lifecycle.failed, reason=words[:500], reason_code=ReasonCode.RUNTIME_LIMIT,
                 preempting_since=None, finished_at=now)
        if not updated:
            return False
        _close_billing(workload, now)
        release_holdings(workload.ref)
        workload_moved.send(sender=type(workload), workload=workload, state=kind.lifecycle.failed,
                            reason=words[:500], at=now)
    return True


def wait_for_cluster(kind, workload) -> bool:
    """Admitted work that no cluster can take now goes back to waiting in its team's queue (issue 34).

    For the apply task, when every cluster that offers the work's flavor is draining, degraded
    or lost (:func:`cluster.placement.no_usable_cluster`): rather than retried until it fails,
    the workload gives its hold back and queues at its old place (:func:`back_to_queue`), with the
    reason admission gives it — which then keeps it queued until a cluster can take it, and admits it as
    any queued work. Only while placed nowhere: work that reached a cluster is never taken back this way
    (a drain finishes what runs; a lost cluster's work follows the loss rules). False when nothing moved.
    """
    return back_to_queue(kind, workload, ReasonCode.QUEUED, only_if={"cluster__isnull": True})


def back_to_queue(kind, workload, code: ReasonCode, reason: str = "", not_before: datetime | None = None,
                  only_if: dict | None = None, **changes) -> bool:
    """Admitted work that never started gives its hold back and queues again at its old place (dated from its
    submission): the one move of :func:`wait_for_cluster` and of a failed provisioning (docs/pools.md), which
    also clears its placement (``changes``) and waits out a backoff (``not_before``).

    Under the team's admission lock, conditional on it being admitted and never applied (and on ``only_if``).
    Nothing ran, so no attempt is spent and nothing was billed. Its reason is ``reason``, else the words
    admission gives it now. False when nothing moved.
    """
    lc = kind.lifecycle
    model = type(workload)
    with transaction.atomic():
        admission.lock_admission(workload.team)
        updated = model.objects.filter(pk=workload.pk, state=lc.admitted, applied_at__isnull=True,
                                       **(only_if or {})).update(
            state=lc.queued, reason_code=code, admitted_at=None, apply_started_at=None, apply_attempts=0, **changes)
        if not updated or not admission.requeue(workload.team, workload.ref, kind.admission_request(workload),
                                                workload.created_at, not_before):
            transaction.set_rollback(True)
            return False
        # The words admission gives it now, so the run says what its queue entry is decided by.
        reason = reason or queue_reason(workload.team, workload.ref)
        model.objects.filter(pk=workload.pk, state=lc.queued).update(reason=reason[:500])
    return True
