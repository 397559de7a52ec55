"""The queue's step of the reconcile cycle (steps 6–7 of :mod:`workloads.cycle.reconcile`), once for all clusters.

Admission, reclaim and budgets are global per team, so they run in one task of their own
(:func:`workloads.tasks.reconcile`) whichever clusters answer:

6. re-drives admitted work not placed yet (no cluster's cycle follows it), admits queued work
   that now fits and refreshes queued reasons; work still queued in a cohort may take back units
   others borrowed (:mod:`workloads.cycle.preemption`); reserved windows take back their units, the
   work of windows over goes back to its quota, and windows under way are billed (:mod:`workloads.cycle.windows`);
7. audits, once a month per team, a budget that crossed its alert threshold, and stops running
   work of teams whose budget is spent when their policy says so.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.utils import timezone

from billing.services import enforce_budgets
from quotas import admission
from quotas.models import QueuedRequest
from quotas.queue import queue_reasons
from teams.models import Team
from workloads.cycle import ReconcileReport, preemption, redrive_if_stuck, unplaced_q, windows
from workloads.models import ReasonCode
from workloads.registry import Reactions, kinds

logger = logging.getLogger(__name__)


def reconcile_queue(now: datetime | None = None, report: ReconcileReport | None = None) -> ReconcileReport:
    """Steps 6–7, once for all clusters: admission, reclaim and budgets are global per team."""
    report = report if report is not None else ReconcileReport()
    now = now or timezone.now()

    # 6. Re-drive admitted work not placed yet, then admit queued work that fits now (in every team
    #    that has a queue). Work of windows that ended is back on its quota first (workloads.cycle.windows).
    windows.close(now)
    _redrive_unplaced(now, report)
    team_ids = report.teams_to_admit | set(QueuedRequest.objects.values_list("team_id", flat=True).distinct())
    for team in Team.objects.filter(pk__in=team_ids):
        report.admitted += admission.admit_waiting(team)
        _refresh_queue_reasons(team)
    # 6b. Work still queued in a cohort may take back units others borrowed (workloads.cycle.preemption).
    #     A shrunk burst frees its units at once: admit again; a stopped run's come once it is gone.
    report.preempted += preemption.reclaim(now)
    # 6c. Reserved windows take their units back: from their lead on, and from lent work when the holder submits.
    report.preempted += windows.clear(now)
    windows.bill(now)
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
                if Reactions.of(kind).on_budget_spent(workload, now):
                    report.budget_stopped.append(workload.ref)

    if (report.transitions or report.redriven or report.vanished or report.admitted or report.orphans_deleted
            or report.kept_deleted or report.preempted or report.requeued or report.lost):
        logger.info("reconcile: %s", report)
    return report


def _redrive_unplaced(now: datetime, report: ReconcileReport) -> None:
    """Re-drive admitted work placed nowhere whose apply did not happen (its task lost, or no cluster
    could take it then): not left to a cluster's cycle, which does not run while that cluster is lost.
    Such work chosen as a reclaim's victim before it was applied queues again at once."""
    for kind in kinds():
        for workload in kind.model.objects.filter(unplaced_q(kind)).select_related("team", "flavor"):
            if workload.preempting_since is not None:
                # Preempted before its first apply: nothing of it runs anywhere, it queues again now.
                if preemption.follow(kind, None, workload, None, now):
                    report.requeued.append(workload.ref)
                    report.teams_to_admit.add(workload.team_id)
                continue
            redrive_if_stuck(kind, workload, now, report, report.teams_to_admit)


def backing_off_refs(team: Team, refs: list[str]) -> set[str]:
    """Those of ``refs`` whose queue entry waits out a backoff now (none asked: no query)."""
    if not refs:
        return set()
    return set(QueuedRequest.objects.filter(team=team, ref__in=refs, not_before__gt=timezone.now())
               .values_list("ref", flat=True))


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
        # Work backing off after its nodes could not be provisioned keeps the autoscaler's words and its retry
        # time (workloads.provisioning) until the backoff is over.
        backing_off = backing_off_refs(team, [kind.identity(pk).ref for pk, _r, code in queued
                                              if code == ReasonCode.PROVISIONING_FAILED])
        for pk, reason, _code in queued:
            ref = kind.identity(pk).ref
            fresh = None if ref in backing_off else reasons.get(ref)
            if fresh and ref in preempted:
                fresh = preemption.preempted_then(preempted[ref], fresh)
            if fresh and fresh[:500] != reason:
                kind.model.objects.filter(pk=pk, state=kind.lifecycle.queued).update(reason=fresh[:500])
