"""The reconcile cycle: keep every workload, of every kind, in step with the cluster.

Run by Celery beat every ``SLIPWAY_RECONCILE_INTERVAL`` seconds (single-flight, see
:func:`workloads.tasks.reconcile`). One cycle:

1. advances a simulated cluster's clock (``backend.tick()``; a no-op on a real cluster);
2. snapshots the portal's workloads that live on the cluster, *then* observes the cluster once
   (a constant number of LIST calls for all kinds) — in that order, so a workload applied
   between the two is seen on the cluster rather than taken for vanished;
3. for each workload maps the observation to a state and a reason through its kind
   (registry; the reason is derived again each time, so words that no longer hold go; why work
   waits to start is put in words by :mod:`workloads.cycle.waiting_reasons`), moves
   the state with a conditional update, bills its open segment when it closes
   (:mod:`billing.segments`: units changed, ended, hour boundary) and releases quota when it
   is final (work that can never run — an image that cannot be pulled past
   ``SLIPWAY_IMAGE_PULL_TIMEOUT_SECONDS`` — fails here, and its objects are deleted). A workload
   that keeps running as it was writes nothing at all; at an hour boundary the segments that
   only roll over are written in batches;
4. marks for re-drive workloads placed on the cluster and admitted but absent from it after one
   period (a lost enqueue or a worker killed mid-task; the task publishes them after the cycle),
   and fails them after too many attempts;
5. fails workloads whose cluster objects vanished, and deletes cluster objects left behind by
   ended or deleted workloads, or by an earlier attempt of work placed elsewhere or not yet, and
   what outlived the attempts of work that has ended for good (a run's checkpoint claim: it is
   observed, but set apart from the attempt the cycle follows) — :mod:`workloads.cycle.leftovers`;
   and, every ``SLIPWAY_TRAINING_DISCOVERY_SECONDS``, asks the cluster its training API again
   (:func:`fleet.services.discover_training`);
6. re-drives admitted work not placed yet (step 4's rule, whichever clusters answer), admits
   queued work that now fits, and refreshes queued reasons;
7. audits, once a month per team, a budget that crossed its alert threshold, and stops running
   work of teams whose budget is spent when their policy says so.

This module runs steps 1–5 for one cluster (:func:`reconcile_cluster`) and the whole cycle in
one process (:func:`reconcile`); steps 6–7 are the queue's step (:mod:`workloads.cycle.queue_step`).
What the two halves share — the report, a workload's plan, the re-drive rule — is in
:mod:`workloads.cycle`.

Work of a kind without cluster objects (:attr:`workloads.registry.WorkloadKind.cluster_objects`: it only
holds units) goes through steps 3 and 5 with nothing observed: its kind's status says what it is now, its
plan is written and billed as any other's, and it has nothing that could vanish or be left over.

Every write is conditional or unique-keyed, so a cycle replayed (or racing a user's action)
never double-counts cost or overwrites a newer state.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import lru_cache

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

import fleet.services as fleet
from billing import pool_idle, segments
from billing.models import QuotaHold
from cluster.errors import ClusterError
from cluster.perf import gc_paused
from cluster.status import WorkloadStatus
from core.writes import Write, run_together
from fleet import pools
from fleet.constants import Health
from fleet.models import Cluster, GpuFlavor
from quotas import admission
from teams.models import Team
from workloads import idle, lifecycle, provisioning
from workloads.constants import STEADY_BATCH, Message
from workloads.cycle import Home, Plan, ReconcileReport, placement, preemption, redrive_if_stuck, unplaced
from workloads.cycle.leftovers import delete_abandoned, delete_kept, delete_leftovers, finish_removal, set_apart_kept
from workloads.cycle.queue_step import reconcile_queue
from workloads.cycle.waiting_reasons import CAPACITY_REFRESH, Capacity, explain_capacity, explain_podless
from workloads.events import workload_moved
from workloads.models import STOP_CODES, ReasonCode, Workload, attach_held_segments
from workloads.registry import Checkpoints, Reactions, WorkloadKind, kind_for, kinds, resource_kinds
from workloads.telemetry import alerts
from workloads.telemetry import readings as telemetry

logger = logging.getLogger(__name__)


def reconcile(backend=None, now: datetime | None = None) -> ReconcileReport:
    """One whole cycle in this process: every cluster in turn (steps 1–5), then steps 6–7.

    Celery runs the halves as separate tasks (:mod:`workloads.tasks`): one per cluster, in
    parallel, and one for the queue. ``backend`` is the one cluster's backend when a caller built
    it (tests, benchmarks); None: each cluster's own. A cluster that cannot be observed is
    recorded as such (:func:`observe_failed`); the others and the queue go on.
    """
    report = ReconcileReport()
    clusters = fleet.clusters()
    if backend is not None and len(clusters) > 1:
        raise ValueError("a backend was given, but there are several clusters: each has its own")
    for cluster in clusters:
        cycle_backend = backend if backend is not None else fleet.backend(cluster)
        try:
            reconcile_cluster(cluster, cycle_backend, now, report)
        except ClusterError as exc:
            observe_failed(cluster, cycle_backend, exc, now or timezone.now(), report)
    reconcile_queue(now, report)
    return report


def reconcile_cluster(cluster: Cluster, backend, now: datetime | None = None,
                      report: ReconcileReport | None = None) -> ReconcileReport:
    """Steps 1–5 for the workloads placed on ``cluster``. Raises ClusterError when it cannot be observed."""
    report = report if report is not None else ReconcileReport()

    # 1. A simulated cluster advances here; a real one advances by itself.
    backend.tick()

    # 2. Snapshot first, then observe.
    home = _home(cluster)
    snapshot = [(kind, _snapshot(kind, home)) for kind in kinds()]
    observe_started = now or timezone.now()
    # The observation can be large (tens of MB at 10,000 workloads) and is a tree of plain
    # dicts: keep the cyclic GC from walking it repeatedly (see cluster.perf).
    with gc_paused():
        observed = {(o.namespace, o.object_name): o for o in backend.observe(resource_kinds())}
        fleet.answered(cluster, observe_started)
        kept = set_apart_kept(observed)
        report.observed += len(observed)
        readings = telemetry.measure(backend, list(observed.values()))
        utilization = idle.utilization(readings)
        now = now or timezone.now()
        # The readings of the workloads this cycle follows: kept (storage), then handed on (alerts).
        followed = telemetry.of_workloads(readings, (w for _kind, workloads in snapshot for w in workloads))
        telemetry.record(cluster, followed, now)
        report.telemetry.update(followed)
        # Alerts on what was just read: one episode per workload and alert kind, one message each.
        alerts.observe(cluster, followed, now)
        teams_to_admit: set[int] = set()
        steady: list[Plan] = []
        capacity = Capacity(backend, cluster)
        for kind, workloads in snapshot:
            for workload in workloads:
                plan = _follow(kind, backend, workload, observed, utilization, observe_started, now, report,
                               teams_to_admit, capacity)
                if plan is None:
                    continue
                explain_capacity(kind, plan, capacity)
                if plan.status.lacks_capacity and _withdraw(kind, backend, cluster, workload, now, report):
                    continue
                if plan.steady:
                    steady.append(plan)
                elif plan.writes and _apply(plan, report, now):
                    teams_to_admit.add(workload.team_id)
                    if plan.status.abandoned:
                        delete_abandoned(backend, plan, report)
                if not plan.final and Reactions.of(kind).after_observation(workload, plan.status, now):
                    teams_to_admit.add(workload.team_id)
        _apply_steady(steady, report)
        # 5. What is left on the cluster belongs to no workload the snapshot follows; what outlived
        #    the attempts of work that has ended for good (or lives on another cluster now) goes too.
        delete_leftovers(backend, home, observed, report)
        delete_kept(backend, home, kept, report)
        del observed
    # What its nodes offer, kept for the clusters API, placement and other clusters' waiting reasons:
    # read with the waiting work's reasons, else once every CAPACITY_REFRESH.
    if capacity.read is None and (cluster.nodes_read_at is None or cluster.nodes_read_at < now - CAPACITY_REFRESH):
        try:
            capacity.clusters()
        except ClusterError as exc:
            logger.warning("reconcile: could not read the capacity of %s: %s", cluster.name, exc)
    if capacity.read:
        fleet.record_nodes(cluster, capacity.read[0][1], now)
        pool_idle.record_readings(cluster, capacity.read[0][1], now)  # idle pool capacity (staff's money)
    # Its training API, asked again every SLIPWAY_TRAINING_DISCOVERY_SECONDS of a cluster that answers
    # (a failure keeps what it had and never fails the cycle: fleet.services.discover_training).
    if fleet.training_due(cluster, now):
        fleet.discover_training(cluster, backend, now)
        # The same period reads the autoscaler's own pool limits (Karpenter NodePools) of its elastic pools.
        pools.discover_limits(cluster, backend)
    report.teams_to_admit |= teams_to_admit
    return report


def _home(cluster: Cluster) -> Home:
    return Home(cluster.pk, cluster.pk == fleet.default_cluster().pk)


def observe_failed(cluster: Cluster, backend, exc: ClusterError, now: datetime, report: ReconcileReport) -> None:
    """``cluster`` did not answer: degraded, then lost. While lost, the work placed there says so,
    bills nothing after ``last_seen``, and checkpointing runs are queued again to resume elsewhere
    once it has been silent for ``SLIPWAY_LOST_REPLACE_AFTER_MINUTES`` (others wait for staff,
    who can end them: a partitioned cluster may still be running the first copy).

    Work its owner is stopping (a sweep's pruner, its sweep stopped: :data:`workloads.models.STOP_CODES`) is
    neither queued again nor given the lost cluster's reason: its owner asked for it to end, and a run queued
    again would run, and bill, a second time. Its stop completes at once (:func:`workloads.lifecycle.finish_stop`):
    it ends pruned or cancelled, its quota released, billed up to ``last_seen`` (what is known to have run:
    :func:`_stop_billing` closed its segment there, so the end bills nothing more); what the cluster still holds
    of it is deleted as leftovers once it answers. Its reason kept, a cluster lost for a moment cannot turn the
    stop into a preemption either (:func:`workloads.cycle.preemption.follow` reads the code)."""
    logger.warning("reconcile: cluster %s could not be observed (%s)", cluster.name, exc)
    if fleet.unanswered(cluster, str(exc), now) != Health.LOST:
        return
    report.lost.append(cluster.name)
    since = timezone.localtime(cluster.silent_since or now)
    reason = Message.CLUSTER_LOST.format(cluster=cluster.name, since=f"{since:%H:%M}")
    replace_before = now - timedelta(minutes=settings.SLIPWAY_LOST_REPLACE_AFTER_MINUTES)
    for kind in kinds():
        for workload in kind.model.objects.holding_quota().filter(cluster=cluster).select_related("team", "flavor"):
            _stop_billing(workload, cluster.last_seen or now)
            if workload.preempting_since is not None and workload.reason_code in STOP_CODES:
                if lifecycle.finish_stop(kind, workload, now, after=f"ended while cluster {cluster.name} was lost"):
                    report.teams_to_admit.add(workload.team_id)
                continue
            if (Checkpoints.of(kind).reports_checkpoints(workload) and cluster.silent_since is not None
                    and cluster.silent_since <= replace_before
                    and lifecycle.requeue(kind, workload, now, reason=f"{reason}: queued again to resume elsewhere",
                                          code=ReasonCode.CLUSTER_LOST, place_again=True)):
                report.requeued.append(workload.ref)
                report.teams_to_admit.add(workload.team_id)
            elif workload.reason != reason:
                kind.model.objects.filter(pk=workload.pk, state=workload.state).update(
                    reason=reason, reason_code=ReasonCode.CLUSTER_LOST)


def _withdraw(kind: WorkloadKind, backend, cluster: Cluster, workload, now: datetime, report: ReconcileReport) -> bool:
    """Work that has waited for capacity on ``cluster`` past ``SLIPWAY_PLACEMENT_TIMEOUT_SECONDS`` and
    never started goes where it fits now, if another cluster has room: placed there, its objects
    here deleted, applied again. Never after it started (it would lose its work), nor when it goes on from a
    checkpoint kept here (a sweep's continued trial: it would lose the work it continues), and not when
    no other cluster has room now (it keeps its place here). The wait counts from its placement here
    (``placed_at``, stamped by its apply: never its wait in the queue before). Only its attempt's objects are
    deleted: what outlives attempts (a checkpoint claim) is the cleanup's, which keeps it while work resumes
    from it (:func:`workloads.cycle.leftovers.delete_kept`)."""
    timeout = timedelta(seconds=settings.SLIPWAY_PLACEMENT_TIMEOUT_SECONDS)
    if (workload.started_at is not None or workload.placed_at is None or workload.placed_at > now - timeout
            or Checkpoints.of(kind).checkpoint_on_its_cluster(workload) or len(fleet.clusters()) < 2):
        return False
    best = placement.choose(kind, workload, now, previous=cluster.name).best
    if best is None or not best.fits or best.cluster == cluster.name:
        return False
    waited = int((now - workload.placed_at).total_seconds() // 60)
    reason = f"{best.reason} (withdrawn from {cluster.name} after {waited} min waiting for capacity)"
    target = fleet.get(best.cluster)
    moved = kind.model.objects.filter(pk=workload.pk, state=workload.state, cluster_id=cluster.pk,
                                      started_at__isnull=True).update(
        cluster=target, placement_reason=reason[:300], placed_at=now, state=kind.lifecycle.admitted,
        applied_at=None, apply_started_at=now, apply_attempts=0)
    if not moved:
        return False
    admission.placed(workload.ref, target.pk)
    try:
        backend.delete(workload.address, kind.attempt_resources)
    except ClusterError as exc:  # deleted as a leftover once this cluster answers
        logger.warning("could not delete the withdrawn %s from %s: %s", workload.ref, cluster.name, exc)
    report.withdrawn.append(workload.ref)
    report.redriven.append(workload.identity)
    return True


def _stop_billing(workload, last_seen: datetime) -> None:
    """Close the open segment of work on a lost cluster at ``last_seen`` (once: conditional on the
    mark). What ran after that is not known to have run; when the cluster answers again, the next
    observation opens a new segment from then. A segment that opened at the last sighting itself
    (its units changed then, or the hour rolled over) is closed too, with nothing to bill: left
    open, it would run on until the work is requeued or ended."""
    if not workload.open_units or workload.billed_until is None:
        return
    bill = segments.plan_billing(workload, 0, None, None, last_seen)
    if not bill.changes:
        return
    kind = kind_for(workload.identity.prefix)
    plan = Plan(kind, workload, WorkloadStatus(state="", reason=""), {}, bill)
    _apply(plan, ReconcileReport(), last_seen)


#: What a cycle reads of a workload row: the shared columns, not the kind's spec (command, env,
#: volumes … are JSON, and decoding them for thousands of rows every cycle was most of its time).
_CYCLE_FIELDS = tuple(f.name for f in Workload._meta.concrete_fields)


def _snapshot(kind: WorkloadKind, home: Home) -> list:
    """The kind's workloads to follow, with their team and flavor (two small queries, not joins).

    Those holding quota, and those ended but not final yet (their objects are being deleted).
    """
    lc = kind.lifecycle
    states = (*kind.model.HOLDING_STATES, *((lc.ended,) if lc.gone else ()))
    workloads = list(kind.model.objects.filter(home.q(), state__in=states)
                     .only(*_CYCLE_FIELDS, *kind.observed_fields).order_by())
    teams = Team.objects.in_bulk({w.team_id for w in workloads})
    flavors = GpuFlavor.objects.in_bulk({w.flavor_id for w in workloads})
    for workload in workloads:
        workload.team, workload.flavor = teams[workload.team_id], flavors[workload.flavor_id]
    attach_held_segments(workloads)  # their holds: the open segments billing moves
    return workloads


def _follow(kind: WorkloadKind, backend, workload, observed: dict, utilization: idle.Utilization,
            observe_started: datetime, now: datetime, report: ReconcileReport, teams: set[int],
            capacity: Capacity) -> Plan | None:
    """Steps 3–5 for one workload; returns its plan, or None when it was handled here."""
    if unplaced(kind, workload):
        # Nothing of this attempt is on a cluster yet: objects of its name here are an earlier attempt's
        # (left on a cluster that was lost), deleted as leftovers; the queue's step re-drives it.
        return None
    obs = observed.pop((workload.namespace, workload.object_name), None) if kind.cluster_objects else None
    if workload.state == kind.lifecycle.ended:
        finish_removal(kind, backend, workload, obs, report)
        return None
    if provisioning.waiting(workload) and workload.applied_at is None:
        # Its nodes are being asked for on an elastic pool (docs/pools.md): the request's conditions decide.
        outcome = provisioning.follow(kind, backend, workload, obs, now, capacity.here)
        if outcome == provisioning.PROVISIONED_NOW:
            report.redriven.append(workload.identity)  # its apply starts it now, on its new nodes
        elif outcome == provisioning.MISSING:
            redrive_if_stuck(kind, workload, now, report, teams)  # the apply creates the request again
        elif outcome in provisioning.GAVE_BACK:
            teams.add(workload.team_id)
        return None
    if kind.cluster_objects:
        status = kind.status(obs, workload, now) if obs is not None else None
    else:
        # Nothing of it is on a cluster to observe: its kind says what it is now (a window the clock opens).
        status = kind.status(None, workload, now)
    if status is not None and workload.preempting_since is None and Reactions.of(kind).requeues_when_disrupted(workload, status):
        # Its spot node was reclaimed: it goes the way of a preemption (stop, then queue again).
        if preemption.interrupt(kind, backend, workload, status, now):
            report.preempted.append(workload.ref)
        return None
    if workload.preempting_since is not None and (
            status is None or kind.state_for(status, workload) not in kind.model.FINAL_STATES):
        # Being preempted: its quota stays held until its pods are gone, then it queues again.
        # (Work that ends on its own during the grace ends as it would have: the normal path.)
        if preemption.follow(kind, backend, workload, obs, now):
            report.requeued.append(workload.ref)
            teams.add(workload.team_id)
        return None
    if status is None:
        if not kind.cluster_objects:
            return None  # its kind has nothing to say now; work without objects never vanishes
        if workload.applied_at is None:
            redrive_if_stuck(kind, workload, now, report, teams)
        elif workload.applied_at < observe_started - lifecycle.redrive_after() and lifecycle.fail(
                workload, Message.OBJECTS_VANISHED.format(noun=kind.noun), ReasonCode.OBJECTS_VANISHED, now):
            report.vanished.append(workload.ref)
            teams.add(workload.team_id)
        return None
    if obs is None:
        # Work without cluster objects: no pods to explain, no GPUs measured (unmeasured is not idle).
        plan = _plan(kind, workload, status, now, report, False)
    else:
        if not status.reason and not obs.pods:
            status = explain_podless(kind, backend, workload, status, now)
        plan = _plan(kind, workload, status, now, report, idle.is_idle(utilization, obs.address, workload))
    if workload.applied_at is None:
        # Applied by a worker that died before saving: it is on the cluster all the same (work without
        # objects: placed by one that died before saving, and nothing else was to be applied).
        plan.changes["applied_at"] = observe_started
    return plan


def _plan(kind: WorkloadKind, workload, status: WorkloadStatus, now: datetime, report: ReconcileReport,
          gpus_idle: bool) -> Plan:
    """The column changes and billing of ``workload`` for ``status`` (pure: nothing is written).

    ``gpus_idle``: its GPUs measure idle now (:mod:`workloads.idle`).
    """
    new_state = kind.state_for(status, workload)
    final = new_state in kind.model.FINAL_STATES
    changes = Reactions.of(kind).column_changes(workload, status)
    if new_state != workload.state:
        changes["state"] = new_state
        report.transitions.append((workload.ref, str(workload.state), str(new_state)))
    # The reason is derived again from every observation (the kind says how): words the
    # cluster gave once go away when the next observation no longer says them.
    reason = Reactions.of(kind).observed_reason(workload, status, new_state)[:500]
    if reason != workload.reason:
        # Only the cluster's words (or none) are new: a kind's own reasons are the ones it keeps.
        changes.update(reason=reason, reason_code=ReasonCode.CLUSTER if reason else ReasonCode.NONE)
    if status.started_at and workload.started_at is None:
        changes["started_at"] = status.started_at
    if status.started_at and workload.attempt_started_at is None:
        changes["attempt_started_at"] = status.started_at  # this attempt's pods (cleared when it is queued again)
    ended_at = None
    if final:
        ended_at = changes["finished_at"] = status.finished_at or now
    # Seen started for the first time: what runs now has run since then (it ran before we looked).
    first_started_at = status.started_at if workload.started_at is None else None
    units = Reactions.of(kind).billed_units(workload, status)
    gpus_idle = gpus_idle and units > 0 and not final
    bill = segments.plan_billing(workload, units, first_started_at, ended_at, now, gpus_idle,
                                attempt_started_at=workload.attempt_started_at or status.started_at)
    if gpus_idle != (workload.idle_since is not None):
        changes["idle_since"] = now if gpus_idle else None
    return Plan(kind, workload, status, changes, bill, final)


def _update_row(plan: Plan) -> bool:
    """The workload's change and its hold's segment move, each conditional on what the cycle read:
    the workload's state, the segment's mark.

    A concurrent user action or a replayed cycle makes it a no-op instead of a double move (the
    caller rolls back what the first half wrote). It locks the workload row, then the hold, before
    the ledger rows are written: the order an end takes them in.
    """
    w = plan.workload
    # The workload's row first, always (a plan with no column of its own rewrites its state): the
    # order an end takes the two rows in, so neither waits for the other's second lock.
    changes = {**plan.changes, **segments.cost_change(plan.billing)} or {"state": w.state}
    if not plan.kind.model.objects.filter(pk=w.pk, state=w.state).update(**changes):
        return False
    return segments.move_segment(plan.billing)


def _apply(plan: Plan, report: ReconcileReport, now: datetime) -> bool:
    """Write one workload's plan in its own transaction. Returns True when it became final."""
    with transaction.atomic():
        if not _update_row(plan):
            transaction.set_rollback(True)
            return False
        segments.applied(plan.workload, plan.billing)
        _record_bills([plan], report)
        if plan.final:
            lifecycle.release_holdings(plan.workload.ref)  # the quota back, the secret values gone
        if "state" in plan.changes:
            # In the move's transaction: a receiver's row commits with it, once (workloads.events).
            workload_moved.send(sender=plan.kind.model, workload=plan.workload, state=plan.changes["state"],
                                reason=plan.changes.get("reason", plan.workload.reason), at=now)
    return plan.final


def _apply_steady(plans: list[Plan], report: ReconcileReport) -> None:
    """Roll over segments that only crossed an hour: per batch one transaction and one ledger statement.

    Happens for every running workload once an hour; per workload its cost (conditional on the
    state the cycle read) and its hold's new mark (conditional on the mark read) remain, two UPDATEs
    in one round trip on PostgreSQL; the transaction and the ledger write are shared. Should one
    match and not the other (a user's end between the read and the write), the workload's cost is
    set to the ledger's afterwards.
    """
    ops = connection.ops
    for first in range(0, len(plans), STEADY_BATCH):
        with transaction.atomic():
            updated, resync = [], []
            for plan in plans[first:first + STEADY_BATCH]:
                # _update_row's UPDATEs in plain SQL: compiling them with the ORM cost more CPU
                # than the database spent on them (~1 ms a row; bench/reconcile_db.py). The
                # workload's row first: the order every writer takes the two rows in.
                w, hold, changes = plan.workload, plan.billing.hold, plan.billing.changes
                before = hold.billed_until
                costed, moved = run_together([
                    Write(_steady_cost_sql(),
                          (ops.adapt_decimalfield_value(plan.billing.cost, 20, 10), w.uid, w.state)),
                    Write(_steady_hold_sql(before is None), (
                        ops.adapt_datetimefield_value(changes.get("billed_until", before)),
                        changes.get("open_units", hold.open_units),
                        ops.adapt_decimalfield_value(changes.get("charged_price", hold.charged_price), 12, 4),
                        hold.pk, *(() if before is None else (ops.adapt_datetimefield_value(before),)))),
                ])
                if moved:
                    segments.applied(w, plan.billing)
                    updated.append(plan)
                if moved != costed:
                    resync.append(w)
            _record_bills(updated, report)
            for workload in resync:
                lifecycle.sync_billed_cost(workload)


@lru_cache(maxsize=16)
def _steady_hold_sql(never_billed: bool) -> str:
    """The conditional UPDATE of a steady workload's hold: its new billing mark, units and charged rate."""
    q = connection.ops.quote_name
    mark = "billed_until IS NULL" if never_billed else "billed_until = %s"
    return (f"UPDATE {q(QuotaHold._meta.db_table)} SET billed_until = %s, open_units = %s, charged_price = %s"  # noqa: S608 - only quoted model names are interpolated
            f" WHERE id = %s AND {mark}")


@lru_cache(maxsize=1)
def _steady_cost_sql() -> str:
    """The cost a steady workload's roll-over adds, if it is still in the state read (its row of the one table)."""
    q = connection.ops.quote_name
    return (f"UPDATE {q(Workload._meta.db_table)} SET billed_cost = billed_cost + %s"  # noqa: S608 - only quoted model names are interpolated
            " WHERE uid = %s AND state = %s")


def _record_bills(plans: list[Plan], report: ReconcileReport) -> None:
    """Add the plans' closed intervals to the ledger (one statement), after their rows were updated."""
    billed = [(plan.workload, plan.billing) for plan in plans if plan.billing.intervals]
    report.charged += sum(len(bill.intervals) for _w, bill in billed)
    for workload in segments.record(billed):
        # The ledger held some of these intervals already: the cost is what the ledger says.
        lifecycle.sync_billed_cost(workload)
