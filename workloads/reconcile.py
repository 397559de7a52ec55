"""The reconcile cycle: keep every workload, of every kind, in step with the cluster.

Run by Celery beat every ``SLIPWAY_RECONCILE_INTERVAL`` seconds (single-flight, see
:func:`workloads.tasks.reconcile`). One cycle:

1. advances a simulated cluster's clock (``backend.tick()``; a no-op on a real cluster);
2. snapshots the portal's workloads that live on the cluster, *then* observes the cluster once
   (a constant number of LIST calls for all kinds) — in that order, so a workload applied
   between the two is seen on the cluster rather than taken for vanished;
3. for each workload maps the observation to a state and a reason through its kind
   (registry; the reason is derived again each time, so words that no longer hold go), moves
   the state with a conditional update, bills its open segment when it closes
   (:mod:`workloads.billing`: units changed, ended, hour boundary) and releases quota when it
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
   observed, but set apart from the attempt the cycle follows);
6. re-drives admitted work not placed yet (step 4's rule, whichever clusters answer), admits
   queued work that now fits, and refreshes queued reasons;
7. audits, once a month per team, a budget that crossed its alert threshold, and stops running
   work of teams whose budget is spent when their policy says so.

Every write is conditional or unique-keyed, so a cycle replayed (or racing a user's action)
never double-counts cost or overwrites a newer state.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import lru_cache

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

import fleet.services as fleet
from cluster.backends.base import ClusterAddress, ObservedWorkload
from cluster.capacity import clusters_capacity_reason
from cluster.errors import ClusterError
from cluster.perf import gc_paused
from cluster.status import WorkloadStatus
from fleet.constants import Health
from fleet.models import Cluster
from quotas import admission
from quotas.models import GpuFlavor, QueuedRequest
from quotas.queue import queue_reasons
from quotas.services import enforce_budgets
from teams.models import Team
from workloads import billing, idle, lifecycle, placement, preemption
from workloads.billing import BILLING_FIELDS, BillingPlan
from workloads.constants import MAX_APPLY_ATTEMPTS, STEADY_BATCH, Message
from workloads.events import workload_moved
from workloads.identity import WorkloadId
from workloads.models import ReasonCode, Workload
from workloads.registry import WorkloadKind, kind_for, kinds, resource_kinds

logger = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    """What one cycle did (logged, and asserted on by tests). Workloads are named by their ref."""

    observed: int = 0
    transitions: list[tuple[str, str, str]] = field(default_factory=list)
    redriven: list[WorkloadId] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    orphans_deleted: list[str] = field(default_factory=list)
    kept_deleted: list[str] = field(default_factory=list)  #: what outlived the attempts of work now ended (its claim)
    admitted: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)  #: borrowed work reclaim took back now
    requeued: list[str] = field(default_factory=list)  #: preempted work whose objects are gone, queued again
    charged: int = 0  #: ledger intervals written
    budget_alerts: list[str] = field(default_factory=list)  #: teams whose budget alert was audited now
    budget_stopped: list[str] = field(default_factory=list)  #: work stopped by a spent budget's policy
    lost: list[str] = field(default_factory=list)  #: clusters found lost (silent too long) in this cycle
    withdrawn: list[str] = field(default_factory=list)  #: waited too long for capacity: placed elsewhere
    teams_to_admit: set[int] = field(default_factory=set)  #: teams whose freed units the queue step admits into


@dataclass
class _Plan:
    """What one observation changes on a workload: its columns, billing, whether it ends."""

    kind: WorkloadKind
    workload: object
    status: WorkloadStatus
    changes: dict
    billing: BillingPlan
    final: bool = False

    @property
    def steady(self) -> bool:
        """Only billing moves (an hour rolled over): safe to write in a batch."""
        return bool(self.changes) and not self.final and set(self.changes) <= BILLING_FIELDS


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
        kept = _set_apart_kept(observed)
        report.observed += len(observed)
        utilization = idle.measure(backend, list(observed.values())) if observed else {}
        now = now or timezone.now()
        teams_to_admit: set[int] = set()
        steady: list[_Plan] = []
        capacity = _Capacity(backend, cluster)
        for kind, workloads in snapshot:
            for workload in workloads:
                plan = _follow(kind, backend, workload, observed, utilization, observe_started, now, report,
                               teams_to_admit)
                if plan is None:
                    continue
                _explain_capacity(kind, plan, capacity)
                if plan.status.lacks_capacity and _withdraw(kind, backend, cluster, workload, now, report):
                    continue
                if plan.steady:
                    steady.append(plan)
                elif plan.changes and _apply(plan, report, now):
                    teams_to_admit.add(workload.team_id)
                    if plan.status.abandoned:
                        _delete_abandoned(backend, plan, report)
                if not plan.final and kind.after_observation(workload, plan.status, now):
                    teams_to_admit.add(workload.team_id)
        _apply_steady(steady, report)
        # 5. What is left on the cluster belongs to no workload the snapshot follows; what outlived
        #    the attempts of work that has ended for good (or lives on another cluster now) goes too.
        _delete_leftovers(backend, home, observed, report)
        _delete_kept(backend, home, kept, report)
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
    report.teams_to_admit |= teams_to_admit
    return report


def reconcile_queue(now: datetime | None = None, report: ReconcileReport | None = None) -> ReconcileReport:
    """Steps 6–7, once for all clusters: admission, reclaim and budgets are global per team."""
    report = report if report is not None else ReconcileReport()
    now = now or timezone.now()

    # 6. Re-drive admitted work not placed yet, then admit queued work that fits now (in every team
    #    that has a queue).
    _redrive_unplaced(now, report)
    team_ids = report.teams_to_admit | set(QueuedRequest.objects.values_list("team_id", flat=True).distinct())
    for team in Team.objects.filter(pk__in=team_ids):
        report.admitted += admission.admit_waiting(team)
        _refresh_queue_reasons(team)
    # 6b. Work still queued in a cohort may take back units others borrowed (workloads.preemption).
    #     A shrunk burst frees its units at once: admit again; a stopped run's come once it is gone.
    report.preempted += preemption.reclaim(now)
    if report.preempted:
        for team in Team.objects.filter(pk__in=QueuedRequest.objects.values("team_id")):
            report.admitted += admission.admit_waiting(team)

    # 7. Budgets whose month crossed the alert threshold get their audit event (once a month);
    #    where the budget is spent and the team's policy is "stop", running work is stopped.
    #    Every budgeted team's month is read once, for both (a fixed number of statements).
    budgets = enforce_budgets(now)
    report.budget_alerts = budgets.alerted
    for team in budgets.to_stop:
        for kind in kinds():
            for workload in kind.model.objects.holding_quota().filter(team=team).select_related("team", "flavor"):
                if kind.on_budget_spent(workload, now):
                    report.budget_stopped.append(workload.ref)

    if (report.transitions or report.redriven or report.vanished or report.admitted or report.orphans_deleted
            or report.kept_deleted or report.preempted or report.requeued or report.lost):
        logger.info("reconcile: %s", report)
    return report


@dataclass(frozen=True)
class _Home:
    """Which workloads a cluster's cycle follows: those placed on it, and — on the default
    cluster — those not placed yet (admitted work waiting for its first apply; rows from before
    clusters were data)."""

    cluster_id: int
    default: bool

    def q(self) -> Q:
        placed = Q(cluster_id=self.cluster_id)
        return placed | Q(cluster__isnull=True) if self.default else placed


def _home(cluster: Cluster) -> _Home:
    return _Home(cluster.pk, cluster.pk == fleet.default_cluster().pk)


def _unplaced_q(kind: WorkloadKind) -> Q:
    """Work waiting for its attempt's first apply and not placed yet (see :func:`_unplaced`)."""
    return Q(cluster__isnull=True, applied_at__isnull=True, state__in=kind.lifecycle.applyable)


def _unplaced(kind: WorkloadKind, workload) -> bool:
    """Whether ``workload`` waits for its attempt's first apply, placed nowhere yet. Placement comes
    before the apply, so nothing of this attempt is on any cluster: no cluster's cycle follows it
    (objects of its name are an earlier attempt's, a requeue off a lost cluster), and the queue's
    step re-drives it, whichever clusters answer."""
    return (workload.cluster_id is None and workload.applied_at is None
            and workload.state in kind.lifecycle.applyable)


def _redrive_unplaced(now: datetime, report: ReconcileReport) -> None:
    """Re-drive admitted work placed nowhere whose apply did not happen (its task lost, or no cluster
    could take it then): not left to a cluster's cycle, which does not run while that cluster is lost.
    Such work chosen as a reclaim's victim before it was applied queues again at once."""
    for kind in kinds():
        for workload in kind.model.objects.filter(_unplaced_q(kind)).select_related("team", "flavor"):
            if workload.preempting_since is not None:
                # Preempted before its first apply: nothing of it runs anywhere, it queues again now.
                if preemption.follow(kind, None, workload, None, now):
                    report.requeued.append(workload.ref)
                    report.teams_to_admit.add(workload.team_id)
                continue
            _redrive_if_stuck(kind, workload, now, report, report.teams_to_admit)


def observe_failed(cluster: Cluster, backend, exc: ClusterError, now: datetime, report: ReconcileReport) -> None:
    """``cluster`` did not answer: degraded, then lost. While lost, the work placed there says so,
    bills nothing after ``last_seen``, and checkpointing runs are queued again to resume elsewhere
    once it has been silent for ``SLIPWAY_LOST_REPLACE_AFTER_MINUTES`` (others wait for staff,
    who can end them: a partitioned cluster may still be running the first copy)."""
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
            if (kind.reports_checkpoints(workload) and cluster.silent_since is not None
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
    here deleted, applied again. Never after it started (it would lose its work), and not when
    no other cluster has room now (it keeps its place here)."""
    timeout = timedelta(seconds=settings.SLIPWAY_PLACEMENT_TIMEOUT_SECONDS)
    if (workload.started_at is not None or workload.placed_at is None or workload.placed_at > now - timeout
            or len(fleet.clusters()) < 2):
        return False
    best = placement.choose(kind, workload, now, previous=cluster.name).best
    if best is None or not best.fits or best.cluster == cluster.name:
        return False
    waited = int((now - workload.placed_at).total_seconds() // 60)
    reason = f"{best.reason} (withdrawn from {cluster.name} after {waited} min waiting for capacity)"
    moved = kind.model.objects.filter(pk=workload.pk, state=workload.state, cluster_id=cluster.pk,
                                      started_at__isnull=True).update(
        cluster=fleet.get(best.cluster), placement_reason=reason[:300], placed_at=now, state=kind.lifecycle.admitted,
        applied_at=None, apply_started_at=now, apply_attempts=0)
    if not moved:
        return False
    try:
        backend.delete(workload.address, kind.resources)
    except ClusterError as exc:  # deleted as a leftover once this cluster answers
        logger.warning("could not delete the withdrawn %s from %s: %s", workload.ref, cluster.name, exc)
    report.withdrawn.append(workload.ref)
    report.redriven.append(workload.identity)
    return True


def _stop_billing(workload, last_seen: datetime) -> None:
    """Close the open segment of work on a lost cluster at ``last_seen`` (once: conditional on the
    mark). What ran after that is not known to have run; when the cluster answers again, the next
    observation opens a new segment from then."""
    if not workload.open_units or workload.billed_until is None or workload.billed_until >= last_seen:
        return
    bill = billing.plan_billing(workload, 0, None, None, last_seen)
    if not bill.changes:
        return
    kind = kind_for(workload.identity.prefix)
    plan = _Plan(kind, workload, WorkloadStatus(state="", reason=""), bill.changes, bill)
    _apply(plan, ReconcileReport(), last_seen)


#: What a cycle reads of a workload row: the shared columns, not the kind's spec (command, env,
#: volumes … are JSON, and decoding them for thousands of rows every cycle was most of its time).
_CYCLE_FIELDS = tuple(f.name for f in Workload._meta.concrete_fields)


def _snapshot(kind: WorkloadKind, home: _Home) -> list:
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
    return workloads


def _follow(kind: WorkloadKind, backend, workload, observed: dict, utilization: idle.Utilization,
            observe_started: datetime, now: datetime, report: ReconcileReport, teams: set[int]) -> _Plan | None:
    """Steps 3–5 for one workload; returns its plan, or None when it was handled here."""
    if _unplaced(kind, workload):
        # Nothing of this attempt is on a cluster yet: objects of its name here are an earlier attempt's
        # (left on a cluster that was lost), deleted as leftovers; the queue's step re-drives it.
        return None
    obs = observed.pop((workload.namespace, workload.object_name), None)
    if workload.state == kind.lifecycle.ended:
        _finish_removal(kind, backend, workload, obs, report)
        return None
    status = kind.status(obs, workload, now) if obs is not None else None
    if status is not None and workload.preempting_since is None and kind.requeues_when_disrupted(workload, status):
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
        if workload.applied_at is None:
            _redrive_if_stuck(kind, workload, now, report, teams)
        elif workload.applied_at < observe_started - lifecycle.redrive_after() and lifecycle.fail(
                workload, Message.OBJECTS_VANISHED.format(noun=kind.noun), ReasonCode.OBJECTS_VANISHED, now):
            report.vanished.append(workload.ref)
            teams.add(workload.team_id)
        return None
    if not status.reason and not obs.pods:
        status = _explain_podless(kind, backend, workload, status, now)
    plan = _plan(kind, workload, status, now, report, idle.is_idle(utilization, obs.address, workload))
    if workload.applied_at is None:
        # Applied by a worker that died before saving: it is on the cluster all the same.
        plan.changes["applied_at"] = observe_started
    return plan


#: How old a cluster's recorded nodes may grow while nothing waits for capacity on it.
CAPACITY_REFRESH = timedelta(minutes=1)


@dataclass
class _Capacity:
    """The clusters' nodes, read once per cycle and only when something waits for capacity:
    this cluster's live, the others' as they last reported (:func:`fleet.services.recorded_nodes`:
    no call to a cluster that may be slow or gone)."""

    backend: object
    cluster: Cluster
    read: list | None = None

    def clusters(self) -> list[tuple[str, list]]:
        """``(name, nodes)``, this cluster first (the work waits here). Raises ClusterError."""
        if self.read is None:
            here = self.backend.capacity()
            others = [(c.name, fleet.recorded_nodes(c)) for c in fleet.clusters()
                      if c.pk != self.cluster.pk and c.placeable]
            self.read = [(self.cluster.name, here), *others]
        return self.read


def _explain_capacity(kind: WorkloadKind, plan: _Plan, capacity: _Capacity) -> None:
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
    words = clusters_capacity_reason(workload.flavor.to_spec(), per_node, clusters,
                                     workers=max(request.units // per_node, 1), spot=workload.spot)
    if words != plan.workload.reason:
        plan.changes.update(reason=words[:500], reason_code=ReasonCode.WAITING_FOR_CAPACITY)
    else:
        plan.changes.pop("reason", None)
        plan.changes.pop("reason_code", None)


def _finish_removal(kind: WorkloadKind, backend, workload, obs: ObservedWorkload | None,
                    report: ReconcileReport) -> None:
    """An ended workload whose objects are being deleted: delete what is left, or call it gone."""
    if obs is not None:
        try:
            backend.delete(obs.address, kind.resources)
            report.orphans_deleted.append(obs.object_name)
        except ClusterError as exc:
            logger.warning("could not delete %s: %s", workload.ref, exc)
        return
    if kind.model.objects.filter(pk=workload.pk, state=kind.lifecycle.ended).update(state=kind.lifecycle.gone):
        report.transitions.append((workload.ref, str(workload.state), str(kind.lifecycle.gone)))


def _explain_podless(kind: WorkloadKind, backend, workload, status: WorkloadStatus, now: datetime) -> WorkloadStatus:
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


def _refresh_queue_reasons(team: Team) -> None:
    """Keep queued workloads' reasons current ("6 of 8 in use" changes as work finishes)."""
    reasons = queue_reasons(team)
    if not reasons:
        return
    for kind in kinds():
        queued = list(kind.model.objects.filter(team=team, state=kind.lifecycle.queued)
                      .values_list("pk", "reason", "reason_code"))
        # Preempted work keeps saying who took its units back, before why it waits now.
        preempted = preemption.last_reasons([kind.identity(pk).ref for pk, _r, code in queued
                                             if code == ReasonCode.PREEMPTED])
        for pk, reason, _code in queued:
            ref = kind.identity(pk).ref
            fresh = reasons.get(ref)
            if fresh and ref in preempted:
                fresh = preemption.preempted_then(preempted[ref], fresh)
            if fresh and fresh[:500] != reason:
                kind.model.objects.filter(pk=pk, state=kind.lifecycle.queued).update(reason=fresh[:500])


def _redrive_if_stuck(kind: WorkloadKind, workload, now: datetime, report: ReconcileReport, teams: set[int]) -> None:
    """Admitted but not on the cluster after one period: mark it for another apply."""
    if workload.state not in kind.lifecycle.applyable:
        return
    last_try = workload.apply_started_at or workload.admitted_at or workload.created_at
    if last_try > now - lifecycle.redrive_after():
        return
    if workload.apply_attempts >= MAX_APPLY_ATTEMPTS:
        message = Message.CLUSTER_UNREACHABLE.format(attempts=workload.apply_attempts,
                                                     message="no cluster object appeared")
        if lifecycle.fail(workload, message, ReasonCode.CLUSTER_UNREACHABLE, now):
            teams.add(workload.team_id)
        return
    # Conditional on the snapshot's apply_started_at: two overlapping cycles re-drive once.
    updated = kind.model.objects.filter(pk=workload.pk, state=workload.state,
                                        apply_started_at=workload.apply_started_at).update(apply_started_at=now)
    if updated:
        report.redriven.append(workload.identity)


def _plan(kind: WorkloadKind, workload, status: WorkloadStatus, now: datetime, report: ReconcileReport,
          gpus_idle: bool) -> _Plan:
    """The column changes and billing of ``workload`` for ``status`` (pure: nothing is written).

    ``gpus_idle``: its GPUs measure idle now (:mod:`workloads.idle`).
    """
    new_state = kind.state_for(status, workload)
    final = new_state in kind.model.FINAL_STATES
    changes = kind.column_changes(workload, status)
    if new_state != workload.state:
        changes["state"] = new_state
        report.transitions.append((workload.ref, str(workload.state), str(new_state)))
    # The reason is derived again from every observation (the kind says how): words the
    # cluster gave once go away when the next observation no longer says them.
    reason = kind.observed_reason(workload, status, new_state)[:500]
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
    units = kind.billed_units(workload, status)
    gpus_idle = gpus_idle and units > 0 and not final
    bill = billing.plan_billing(workload, units, first_started_at, ended_at, now, gpus_idle)
    changes.update(bill.changes)
    if gpus_idle != (workload.idle_since is not None):
        changes["idle_since"] = now if gpus_idle else None
    return _Plan(kind, workload, status, changes, bill, final)


def _update_row(plan: _Plan) -> bool:
    """The workload row's change, conditional on the state and billing mark the cycle read.

    A concurrent user action or a replayed cycle makes it a no-op instead of a double move. It
    locks the workload row before the ledger rows are written: the order an end takes them in.
    """
    w = plan.workload
    return bool(plan.kind.model.objects.filter(pk=w.pk, state=w.state, billed_until=w.billed_until)
                .update(**plan.changes))


def _apply(plan: _Plan, report: ReconcileReport, now: datetime) -> bool:
    """Write one workload's plan in its own transaction. Returns True when it became final."""
    with transaction.atomic():
        if not _update_row(plan):
            transaction.set_rollback(True)
            return False
        _record_bills([plan], report)
        if plan.final:
            lifecycle.release_holdings(plan.workload.ref)  # the quota back, the secret values gone
        if "state" in plan.changes:
            # In the move's transaction: a receiver's row commits with it, once (workloads.events).
            workload_moved.send(sender=plan.kind.model, workload=plan.workload, state=plan.changes["state"],
                                reason=plan.changes.get("reason", plan.workload.reason), at=now)
    return plan.final


def _apply_steady(plans: list[_Plan], report: ReconcileReport) -> None:
    """Roll over segments that only crossed an hour: per batch one transaction and one ledger statement.

    Happens for every running workload once an hour; per workload one conditional UPDATE
    remains, the transaction and the ledger write are shared.
    """
    ops = connection.ops
    for first in range(0, len(plans), STEADY_BATCH):
        with transaction.atomic(), connection.cursor() as cursor:
            updated = []
            for plan in plans[first:first + STEADY_BATCH]:
                # _update_row's conditional UPDATE in plain SQL: compiling it with the ORM cost
                # more CPU than the database spent on it (~1 ms a row; bench/reconcile_db.py).
                w, changes = plan.workload, plan.changes
                before = w.billed_until
                cursor.execute(_steady_sql(plan.kind.model._meta.db_table, before is None), [
                    ops.adapt_datetimefield_value(changes.get("billed_until", before)),
                    changes.get("open_units", w.open_units),
                    ops.adapt_decimalfield_value(plan.billing.cost, 20, 10),
                    w.pk, w.state, *([] if before is None else [ops.adapt_datetimefield_value(before)]),
                ])
                if cursor.rowcount:
                    updated.append(plan)
            _record_bills(updated, report)


@lru_cache(maxsize=16)
def _steady_sql(table: str, never_billed: bool) -> str:
    """The conditional UPDATE of a steady workload: new billing mark and units, cost added."""
    q = connection.ops.quote_name
    mark = "billed_until IS NULL" if never_billed else "billed_until = %s"
    return (f"UPDATE {q(table)} SET billed_until = %s, open_units = %s,"  # noqa: S608 - only quoted model names are interpolated
            f" billed_cost = billed_cost + %s WHERE id = %s AND state = %s AND {mark}")


def _record_bills(plans: list[_Plan], report: ReconcileReport) -> None:
    """Add the plans' closed intervals to the ledger (one statement), after their rows were updated."""
    billed = [(plan.workload, plan.billing) for plan in plans if plan.billing.intervals]
    report.charged += sum(len(bill.intervals) for _w, bill in billed)
    for workload in billing.record(billed):
        # The ledger held some of these intervals already: the cost is what the ledger says.
        lifecycle.sync_billed_cost(workload)


def _delete_abandoned(backend, plan: _Plan, report: ReconcileReport) -> None:
    """Delete the objects of work failed because it could never run (its image cannot be pulled).

    Unlike work that ended on its own, its pods are alive: scheduled, holding their nodes' GPUs
    and the team namespace's quota, retrying the pull forever. Nothing is lost: they never ran.
    """
    w = plan.workload
    try:
        backend.delete(w.address, plan.kind.resources)
        report.orphans_deleted.append(w.object_name)
    except ClusterError as exc:
        logger.warning("could not delete the abandoned %s: %s", w.ref, exc)


def _set_apart_kept(observed: dict[tuple[str, str], ObservedWorkload]) -> dict[tuple[str, str], ClusterAddress]:
    """Take the objects that outlive attempts (a run's checkpoint claim) out of the observation.

    What the cycle follows is the attempt: a run between attempts has only its claim left, and
    is "not on the cluster" all the same (a preempted run is queued again once its Job is gone).
    Returns the addresses of the workloads that have such objects, for :func:`_delete_kept`.
    """
    kept_kinds = {(r.api_version, r.kind) for r in resource_kinds() if r.kept_across_attempts}
    found: dict[tuple[str, str], ClusterAddress] = {}
    for key, obs in list(observed.items()):
        attempt = [o for o in obs.objects if (o.get("apiVersion"), o.get("kind")) not in kept_kinds]
        if len(attempt) == len(obs.objects):
            continue
        found[key] = obs.address
        obs.objects[:] = attempt
        if not attempt and not obs.pods:
            del observed[key]
    return found


def _delete_kept(backend, home: _Home, kept: dict[tuple[str, str], ClusterAddress], report: ReconcileReport) -> None:
    """Delete what outlived the attempts of workloads that have ended for good (final, ended by a
    user, or gone from the database), however they ended: on their own, failed at an apply, cancelled
    while queued between attempts, with a delete that was lost — or that now live on another cluster
    (resumed there after this one was lost: a claim is one cluster's). Never between attempts: a
    workload queued again is not ended. One query per kind that has such objects.

    Their other objects are not touched (a failed run's Job stays for its logs; its env Secret goes
    with any delete, and ended work reads no secret). A failed delete is tried again next cycle.
    """
    candidates: dict[WorkloadKind, dict[int, ClusterAddress]] = {}
    for address in kept.values():
        identity = WorkloadId.from_cluster_name(address.object_name)
        kind = kind_for(identity.prefix) if identity else None
        if kind is not None and address.object_name not in report.orphans_deleted:  # deleted whole just now
            candidates.setdefault(kind, {})[identity.pk] = address
    for kind, addresses in candidates.items():
        ended = (*kind.model.FINAL_STATES, *kind.lifecycle.removed)
        here = Q(cluster__isnull=True) | Q(cluster_id=home.cluster_id)  # not placed elsewhere since
        live = kind.model.objects.filter(here).exclude(state__in=ended)
        live_now = set(live.filter(pk__in=addresses).values_list("pk", flat=True))
        resources = tuple(replace(r, deleted=r.kept_across_attempts) for r in kind.resources)
        for pk, address in addresses.items():
            if pk in live_now:
                continue
            try:
                if _delete_unless(live, pk, backend, address, resources):
                    report.kept_deleted.append(address.object_name)
            except ClusterError as exc:
                logger.warning("could not delete what %s/%s kept across attempts: %s", address.namespace,
                               address.object_name, exc)


def _delete_leftovers(backend, home: _Home, leftovers: dict[tuple[str, str], ObservedWorkload],
                      report: ReconcileReport) -> None:
    """Delete cluster objects of workloads that were ended, deleted, no longer exist, or now live on
    another cluster (withdrawn before they started, or resumed elsewhere after this one was lost).

    Objects of workloads that finished on their own are kept (their logs and events stay
    readable); an end whose delete task was lost is finished here.
    """
    candidates: dict[WorkloadKind, dict[int, ClusterAddress]] = {}
    for (namespace, name), _obs in leftovers.items():
        identity = WorkloadId.from_cluster_name(name)
        kind = kind_for(identity.prefix) if identity else None
        if kind is not None:
            candidates.setdefault(kind, {})[identity.pk] = ClusterAddress(namespace, name)
    for kind, addresses in candidates.items():
        # Work placed nowhere has no attempt on any cluster: waiting for its first apply, or queued
        # (again: off a lost cluster, or back from an apply no cluster could take) — objects of its
        # name are an earlier attempt's, and would clash with its next apply.
        followed = kind.model.objects.filter(home.q()).exclude(state__in=kind.lifecycle.removed).exclude(
            _unplaced_q(kind)).exclude(cluster__isnull=True, state=kind.lifecycle.queued)
        keep = set(followed.filter(pk__in=addresses).values_list("pk", flat=True))
        for pk, address in addresses.items():
            if pk in keep:
                continue
            try:
                if _delete_unless(followed, pk, backend, address, kind.resources):
                    report.orphans_deleted.append(address.object_name)
            except ClusterError as exc:
                logger.warning("could not delete leftover %s/%s: %s", address.namespace, address.object_name, exc)


def _delete_unless(keeps, pk: int, backend, address: ClusterAddress, resources) -> bool:
    """Delete workload ``pk``'s objects of ``resources`` at ``address`` unless ``pk`` is now among
    ``keeps``, holding the workload's row meanwhile; whether it deleted.

    The callers chose ``pk`` by one query a moment before, and a worker may since have placed the
    workload on this very cluster and applied its next attempt, whose objects have the old ones'
    names. Placement writes the row (a conditional update) before it applies, so with the row held
    a placement made since is seen here and its objects kept, and one made later waits for the
    delete to end before it applies. Taken only for what is deleted (rare), never for the cycle's rows.
    """
    with transaction.atomic():
        list(keeps.model.objects.select_for_update().filter(pk=pk).values_list("pk", flat=True))
        if keeps.filter(pk=pk).exists():
            return False
        backend.delete(address, resources)
        return True
