"""What the two halves of a reconcile cycle share: the cluster's steps (:mod:`workloads.cycle.reconcile`)
and the queue's (:mod:`workloads.cycle.queue_step`), and what they hand to leftover cleanup
(:mod:`workloads.cycle.leftovers`) and to waiting reasons (:mod:`workloads.cycle.waiting_reasons`).

A module of its own so that those import it rather than each other: the cycle's report, one
workload's plan, which workloads a cluster's cycle follows (and which none does: work placed
nowhere yet), and the re-drive rule both halves apply to admitted work that has not reached a
cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q

from billing.segments import STEADY_FIELDS, BillingPlan
from cluster.backends.base import WorkloadTelemetry
from cluster.status import WorkloadStatus
from workloads import lifecycle
from workloads.constants import MAX_APPLY_ATTEMPTS, Message
from workloads.identity import WorkloadId
from workloads.models import ReasonCode
from workloads.registry import WorkloadKind


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
    #: Preempted work whose objects are gone, moved on as its kind says: queued again (the common case), a
    #: workspace paused, or work whose attempts used up its runtime limit failed (workloads.lifecycle.requeue).
    requeued: list[str] = field(default_factory=list)
    charged: int = 0  #: ledger intervals written
    budget_alerts: list[str] = field(default_factory=list)  #: teams whose budget alert was audited now
    budget_stopped: list[str] = field(default_factory=list)  #: work stopped by a spent budget's policy
    lost: list[str] = field(default_factory=list)  #: clusters found lost (silent too long) in this cycle
    withdrawn: list[str] = field(default_factory=list)  #: waited too long for capacity: placed elsewhere
    teams_to_admit: set[int] = field(default_factory=set)  #: teams whose freed units the queue step admits into
    #: This cycle's GPU readings of the workloads it followed (:mod:`workloads.telemetry.readings`; alerts read them).
    telemetry: dict[WorkloadId, WorkloadTelemetry] = field(default_factory=dict)


@dataclass
class Plan:
    """What one observation changes on a workload: its columns (``changes``), its hold's segment and
    the cost (``billing``), whether it ends."""

    kind: WorkloadKind
    workload: object
    status: WorkloadStatus
    changes: dict
    billing: BillingPlan
    final: bool = False

    @property
    def steady(self) -> bool:
        """Only billing moves (an hour rolled over): safe to write in a batch."""
        return (not self.changes and not self.final and bool(self.billing.changes)
                and set(self.billing.changes) <= STEADY_FIELDS)

    @property
    def writes(self) -> bool:
        """Whether it changes anything: a column of the workload's, or its hold's segment."""
        return bool(self.changes or self.billing.changes)


@dataclass(frozen=True)
class Home:
    """Which workloads a cluster's cycle follows: those placed on it, and — on the default
    cluster — those not placed yet (admitted work waiting for its first apply; rows from before
    clusters were data)."""

    cluster_id: int
    default: bool

    def q(self) -> Q:
        placed = Q(cluster_id=self.cluster_id)
        return placed | Q(cluster__isnull=True) if self.default else placed


def unplaced_q(kind: WorkloadKind) -> Q:
    """Work waiting for its attempt's first apply and not placed yet (see :func:`unplaced`)."""
    return Q(cluster__isnull=True, applied_at__isnull=True, state__in=kind.lifecycle.applyable)


def unplaced(kind: WorkloadKind, workload) -> bool:
    """Whether ``workload`` waits for its attempt's first apply, placed nowhere yet. Placement comes
    before the apply, so nothing of this attempt is on any cluster: no cluster's cycle follows it
    (objects of its name are an earlier attempt's, a requeue off a lost cluster), and the queue's
    step re-drives it, whichever clusters answer."""
    return (workload.cluster_id is None and workload.applied_at is None
            and workload.state in kind.lifecycle.applyable)


def redrive_if_stuck(kind: WorkloadKind, workload, now: datetime, report: ReconcileReport, teams: set[int]) -> None:
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
