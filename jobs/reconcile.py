"""The reconcile cycle: keep training runs in step with what the cluster really does.

Run by Celery beat every ``SLIPWAY_RECONCILE_INTERVAL`` seconds (single-flight, see
:func:`jobs.tasks.reconcile`). One cycle:

1. advances a simulated cluster's clock (``backend.tick()``; a no-op on a real cluster);
2. snapshots the portal's active runs, *then* observes the cluster (constant LIST calls) —
   in that order, so a run applied between the two is seen on the cluster rather than
   taken for vanished;
3. for each run maps the observation to a state with :mod:`cluster.status`, moves the state
   with a conditional update, charges the usage ledger for the interval since the last
   cycle, and releases quota when the run is final. Runs that just keep running (most of
   them, most cycles) are billed in batches: one transaction and one ledger statement per
   batch instead of per run (bench/reconcile_db.py: 1.4 s instead of 5.6 s at 1,000);
4. re-drives runs admitted but absent from the cluster after one period (a lost enqueue or a
   worker killed mid-task), and fails them after too many attempts;
5. fails runs whose cluster objects vanished, and deletes cluster objects left behind by
   cancelled or deleted runs;
6. admits queued work that now fits.

Every write is conditional or unique-keyed, so a cycle replayed (or racing a cancel) never
double-counts cost or overwrites a newer state.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from cluster.backends.base import ObservedWorkload, WorkloadRef
from cluster.errors import ClusterError
from cluster.perf import gc_paused
from cluster.status import TrainingPhase, WorkloadStatus, training_status
from jobs import constants as c
from jobs.constants import Reason, RunState
from jobs.models import TrainingRun
from portal.models import Team
from portal.queueing import publish
from quotas import admission, ledger
from quotas.models import QueuedRequest

logger = logging.getLogger(__name__)

_PHASE_TO_STATE = {
    TrainingPhase.PENDING: RunState.PENDING,
    TrainingPhase.RUNNING: RunState.RUNNING,
    TrainingPhase.SUCCEEDED: RunState.SUCCEEDED,
    TrainingPhase.FAILED: RunState.FAILED,
}


@dataclass
class ReconcileReport:
    """What one cycle did (logged, and asserted on by tests)."""

    observed: int = 0
    transitions: list[tuple[int, str, str]] = field(default_factory=list)
    redriven: list[int] = field(default_factory=list)
    vanished: list[int] = field(default_factory=list)
    orphans_deleted: list[str] = field(default_factory=list)
    admitted: list[str] = field(default_factory=list)
    charged: int = 0


def redrive_after() -> timedelta:
    return timedelta(seconds=max(settings.CELERY_RECONCILE_INTERVAL, 1.0))


def reconcile(backend=None, now: datetime | None = None) -> ReconcileReport:
    """One reconcile cycle (see the module docstring). Safe to run twice."""
    from portal.cluster import get_backend

    backend = backend or get_backend()
    report = ReconcileReport()

    # 1. A simulated cluster advances here; a real one advances by itself.
    backend.tick()

    # 2. Snapshot first, then observe.
    runs = list(
        TrainingRun.objects.filter(state__in=c.HOLDING_STATES).select_related("team", "flavor", "created_by")
    )
    observe_started = now or timezone.now()
    # The observation can be large (tens of MB at 10,000 workloads) and is a tree of plain
    # dicts: keep the cyclic GC from walking it repeatedly (see cluster.perf).
    with gc_paused():
        observed = {(o.namespace, o.workload): o for o in backend.observe()}
        report.observed = len(observed)
        now = now or timezone.now()
        teams_to_admit = _follow_runs(backend, runs, observed, observe_started, now, report)
        # 5. What is left on the cluster belongs to no active run.
        _delete_orphans(backend, observed, report)
        del observed

    # 6. Admit queued work that fits now (in every team that has a queue).
    team_ids = teams_to_admit | set(QueuedRequest.objects.values_list("team_id", flat=True).distinct())
    for team in Team.objects.filter(pk__in=team_ids):
        report.admitted += admission.admit_waiting(team)
        _refresh_queue_reasons(team)

    if report.transitions or report.redriven or report.vanished or report.admitted or report.orphans_deleted:
        logger.info("reconcile: %s", report)
    return report


def _follow_runs(backend, runs: list[TrainingRun], observed: dict, observe_started: datetime, now: datetime,
                 report: ReconcileReport) -> set[int]:
    """Steps 3–5 for each active run; returns the teams whose quota changed."""
    teams_to_admit: set[int] = set()
    steady: list[_Plan] = []
    for run in runs:
        obs = observed.pop((run.namespace, run.workload_id), None)
        if run.state == RunState.ADMITTED and obs is None:
            _redrive_if_stuck(run, now, report, teams_to_admit)
            continue
        status = training_status(obs) if obs is not None else None
        if status is not None and not status.reason and not obs.pods:
            status = _explain_podless(backend, run, status, now)
        if status is None:
            applied_long_ago = run.applied_at is not None and run.applied_at < observe_started - redrive_after()
            if applied_long_ago and fail_run(run, Reason.OBJECTS_VANISHED, now):
                report.vanished.append(run.pk)
                teams_to_admit.add(run.team_id)
            continue
        plan = _plan(run, status, now, report)
        if plan.steady:
            steady.append(plan)  # most runs, most cycles: billed together below
        elif plan.changes and _apply(plan, report):
            teams_to_admit.add(run.team_id)
    _apply_steady(steady, report)
    return teams_to_admit


def _explain_podless(backend, run: TrainingRun, status: WorkloadStatus, now: datetime) -> WorkloadStatus:
    """Why a pending workload has no pods after a period, from its controller's warning events.

    With no pod there is no scheduler message to show; what the controller could not do is
    only in its events, e.g. the team namespace's ResourceQuota refused the pods (FailedCreate:
    "exceeded quota"). One events call per such run and cycle, only while it stays unexplained.
    """
    if status.state != TrainingPhase.PENDING or run.reason not in ("", Reason.SUBMITTED_TO_CLUSTER):
        return status  # not pending, or explained already
    applied = run.applied_at or run.admitted_at or run.created_at
    if applied > now - redrive_after():
        return status  # give the controller a period to create its pods
    try:
        warnings = [e for e in backend.events(WorkloadRef(run.namespace, run.workload_id)) if e.type == "Warning"]
    except ClusterError as exc:
        logger.warning("reconcile: no events for %s: %s", run.ref, exc)
        return status
    if not warnings:
        return status
    latest = warnings[-1]
    return dataclasses.replace(status, reason=f"{latest.reason}: {latest.message}" if latest.reason else latest.message)


def _refresh_queue_reasons(team: Team) -> None:
    """Keep queued runs' reasons current ("6 of 8 in use" changes as work finishes)."""
    reasons = admission.queue_reasons(team)
    if not reasons:
        return
    queued = TrainingRun.objects.filter(team=team, state=RunState.QUEUED).values_list("pk", "reason")
    for pk, reason in queued:
        fresh = reasons.get(f"{c.REF_PREFIX}:{pk}")
        if fresh and fresh != reason:
            TrainingRun.objects.filter(pk=pk, state=RunState.QUEUED).update(reason=fresh[:500])


def _redrive_if_stuck(run: TrainingRun, now: datetime, report: ReconcileReport, teams: set[int]) -> None:
    """Admitted but not on the cluster after one period: publish the create task again."""
    last_try = run.applied_at or run.admitted_at or run.created_at
    if last_try > now - redrive_after():
        return
    if run.apply_attempts >= c.MAX_APPLY_ATTEMPTS:
        message = Reason.CLUSTER_UNREACHABLE.format(attempts=run.apply_attempts, message="no cluster object appeared")
        if fail_run(run, message, now):
            teams.add(run.team_id)
        return
    # Conditional on the snapshot's applied_at: two overlapping cycles re-drive once.
    updated = TrainingRun.objects.filter(pk=run.pk, state=RunState.ADMITTED, applied_at=run.applied_at).update(
        applied_at=now
    )
    if updated:
        from jobs.tasks import create_run_resources

        publish(create_run_resources, run.pk)
        report.redriven.append(run.pk)


@dataclass
class _Plan:
    """What one observation changes on a run: its columns, the interval to bill, whether it ends."""

    run: TrainingRun
    changes: dict
    bill: ledger.Interval | None = None
    cost: Decimal = Decimal(0)
    final: bool = False

    @property
    def steady(self) -> bool:
        """Only billing moves (the run keeps running as it was): safe to write in a batch."""
        return bool(self.changes) and not self.final and set(self.changes) <= _BILLING_FIELDS


_BILLING_FIELDS = frozenset({"billed_until", "billed_units", "cost_to_date"})
#: Runs billed per transaction in the steady batch: bounds how long their rows stay locked.
STEADY_BATCH = 500


def _plan(run: TrainingRun, status: WorkloadStatus, now: datetime, report: ReconcileReport) -> _Plan:
    """The column changes and billing of ``run`` for ``status`` (pure: nothing is written)."""
    new_state = _PHASE_TO_STATE.get(status.state, run.state)
    plan = _Plan(run, {}, final=new_state in c.FINAL_STATES)
    changes = plan.changes
    if new_state != run.state:
        changes["state"] = new_state
        report.transitions.append((run.pk, str(run.state), str(new_state)))
    if status.reason != run.reason and (status.reason or new_state != run.state):
        changes["reason"] = status.reason[:500]
    if status.started_at and run.started_at is None:
        changes["started_at"] = status.started_at
    if plan.final:
        changes["finished_at"] = status.finished_at or now
    # Billing: what ran since the last cycle (billed_units, seen then), up to now or the end.
    # On the first sighting nothing was seen before, so what runs now has run since the start.
    start = run.billed_until or status.started_at or run.started_at
    end = min(changes.get("finished_at") or now, now)
    units = run.billed_units if run.billed_until is not None else status.running_units
    if start is not None and end > start:
        if units > 0:
            plan.bill = ledger.Interval(run.team_id, run.ref, run.flavor, run.created_by_id, start, end, units,
                                        run.spot)
            plan.cost = plan.bill.charge()[0]
            changes["cost_to_date"] = F("cost_to_date") + plan.cost
        changes["billed_until"] = end
    elif start is not None and run.billed_until is None:
        changes["billed_until"] = start
    running_units = 0 if plan.final else status.running_units
    if running_units != run.billed_units:
        changes["billed_units"] = running_units
    return plan


def _update_run(plan: _Plan) -> bool:
    """The run row's change, conditional on the state and billing mark the cycle read.

    A concurrent cancel or a replayed cycle makes it a no-op instead of a double move. It
    locks the run row before the ledger row is written: the order a cancel takes them in.
    """
    run = plan.run
    return bool(TrainingRun.objects.filter(pk=run.pk, state=run.state, billed_until=run.billed_until)
                .update(**plan.changes))


def _apply(plan: _Plan, report: ReconcileReport) -> bool:
    """Write one run's plan in its own transaction. Returns True when the run became final."""
    with transaction.atomic():
        if not _update_run(plan):
            transaction.set_rollback(True)
            return False
        _record_bills([plan], report)
        if plan.final:
            admission.release(plan.run.ref)  # give the quota back
    return plan.final


def _apply_steady(plans: list[_Plan], report: ReconcileReport) -> None:
    """Bill runs that only keep running: per batch one transaction and one ledger statement.

    Per run one conditional UPDATE remains; the transaction and the ledger write are shared,
    which at a thousand running runs is what keeps a cycle shorter than the interval.
    """
    ops = connection.ops
    for first in range(0, len(plans), STEADY_BATCH):
        with transaction.atomic(), connection.cursor() as cursor:
            updated = []
            for plan in plans[first:first + STEADY_BATCH]:
                # _update_run's conditional UPDATE in plain SQL: compiling it with the ORM cost
                # more CPU than the database spent on it (~1 ms a run; bench/reconcile_db.py).
                run, changes = plan.run, plan.changes
                before = run.billed_until
                cursor.execute(_steady_sql(connection.vendor, before is None), [
                    ops.adapt_datetimefield_value(changes.get("billed_until", before)),
                    changes.get("billed_units", run.billed_units),
                    ops.adapt_decimalfield_value(plan.cost, 20, 10),
                    run.pk, run.state, *([] if before is None else [ops.adapt_datetimefield_value(before)]),
                ])
                if cursor.rowcount:
                    updated.append(plan)
            _record_bills(updated, report)


@lru_cache(maxsize=8)
def _steady_sql(vendor: str, never_billed: bool) -> str:
    """The conditional UPDATE of a steady run: new billing mark and units, cost added."""
    q = connection.ops.quote_name
    mark = "billed_until IS NULL" if never_billed else "billed_until = %s"
    return (f"UPDATE {q(TrainingRun._meta.db_table)} SET billed_until = %s, billed_units = %s,"  # noqa: S608 - only quoted model names are interpolated
            f" cost_to_date = cost_to_date + %s WHERE id = %s AND state = %s AND {mark}")


def _record_bills(plans: list[_Plan], report: ReconcileReport) -> None:
    """Add the plans' intervals to the ledger (one statement), after their runs' rows were updated."""
    billed = [plan for plan in plans if plan.bill is not None]
    recorded = ledger.record_intervals([plan.bill for plan in billed])
    report.charged += len(recorded)
    for plan in billed:
        if plan.run.ref not in recorded:
            # The ledger held this interval already: the run's cost is what the ledger says.
            total = ledger.cost_by_ref([plan.run.ref])[plan.run.ref]
            TrainingRun.objects.filter(pk=plan.run.pk).update(cost_to_date=total)


def charge(run: TrainingRun, start: datetime | None, end: datetime, units: int) -> Decimal:
    """Record ``units`` of the run's flavor for ``[start, end)`` in the ledger; 0 for nothing or a replay."""
    if start is None or units <= 0 or end <= start:
        return Decimal(0)
    return ledger.record_usage(run.team, run.ref, run.flavor, run.created_by, start, end, units, run.spot)


def fail_run(run: TrainingRun, reason: str, now: datetime | None = None) -> bool:
    """Move a non-final run to ``failed`` with ``reason`` and release its quota. False if already final."""
    with transaction.atomic():
        updated = (
            TrainingRun.objects.filter(pk=run.pk)
            .exclude(state__in=c.FINAL_STATES)
            .update(state=RunState.FAILED, reason=reason[:500], finished_at=now or timezone.now(), billed_units=0)
        )
        if updated:
            admission.release(run.ref)
    return bool(updated)


def _delete_orphans(backend, leftovers: dict[tuple[str, str], ObservedWorkload], report: ReconcileReport) -> None:
    """Delete cluster objects of runs that were cancelled or no longer exist.

    Objects of succeeded or failed runs are kept (their logs and events stay readable);
    a cancel whose delete task was lost is finished here.
    """
    candidates = {}
    for (namespace, workload), _obs in leftovers.items():
        pk = TrainingRun.pk_from_ref(workload.replace("-", ":", 1))
        if pk is not None:
            candidates[pk] = WorkloadRef(namespace, workload)
    if not candidates:
        return
    keep = set(
        TrainingRun.objects.filter(pk__in=candidates)
        .exclude(state=RunState.CANCELLED)
        .values_list("pk", flat=True)
    )
    for pk, ref in candidates.items():
        if pk in keep:
            continue
        try:
            backend.delete(ref)
            report.orphans_deleted.append(ref.workload)
        except ClusterError as exc:
            logger.warning("could not delete leftover %s/%s: %s", ref.namespace, ref.workload, exc)
