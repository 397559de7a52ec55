"""Training runs as a workload kind: what the shared machinery needs to know about them.

Registered from :class:`jobs.apps.JobsConfig` ``ready()``.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

import core.backend
from cluster.backends.base import ObservedWorkload, ResourceKind
from cluster.pools import PROVISIONING_RESOURCES
from cluster.specs import VolumeSpec
from cluster.status import WorkloadStatus
from cluster.training import runtime_for
from jobs import checkpoints, metrics, services, trials
from jobs.checkpoint_contract import provided_claim_name
from jobs.constants import AUDIT_ACTIONS, RunResourceKind, RunState
from jobs.demo import later_demo_run_line, seed_demo_history, seed_demo_runs
from jobs.manifests import build_training
from jobs.models import LaterDemoRun, TrainingRun
from jobs.specs import CheckpointSpec, TrainingSpec
from jobs.status import TrainingPhase, training_status
from quotas.decide import ResourceRequest
from teams.models import Role
from workloads import secrets
from workloads import services as workloads
from workloads.constants import Message
from workloads.models import ReasonCode
from workloads.registry import (
    Announces,
    Api,
    Checkpoints,
    DashboardPanel,
    Demo,
    Estimates,
    KindEvent,
    Lifecycle,
    NavItem,
    Pages,
    Reactions,
    Trials,
    WorkloadKind,
    kind_of,
)

#: Runs the dashboard lists, newest first.
RECENT_RUNS = 5

_PHASE_TO_STATE = {
    TrainingPhase.PENDING: RunState.PENDING,
    TrainingPhase.RUNNING: RunState.RUNNING,
    TrainingPhase.SUCCEEDED: RunState.SUCCEEDED,
    TrainingPhase.FAILED: RunState.FAILED,
}


def checkpoint_spec(run: TrainingRun) -> CheckpointSpec | None:
    """The contract as ``run``'s current attempt sees it (None without one)."""
    if run.checkpoint is None:
        return None
    volume = run.checkpoint.get("volume")
    return CheckpointSpec(
        claim=volume or run.checkpoint_claim or provided_claim_name(run.object_name), provided=not volume,
        grace_seconds=int(run.checkpoint["grace_seconds"]), attempt=run.attempt, resume_from=run.last_checkpoint_path,
        # As recorded at submission: the claim each attempt applies again keeps its size and class.
        storage=run.checkpoint_storage, storage_class=run.checkpoint_storage_class or None,
        report_url=_report_url(run),
    )


def _report_url(run: TrainingRun) -> str:
    """Where ``run``'s pods POST a checkpoint, under the portal's address for pods ("" when not configured)."""
    base = settings.SLIPWAY_POD_API_URL.rstrip("/")
    return f"{base}{reverse('run-checkpoints', args=[run.pk])}" if base else ""


def training_spec(run: TrainingRun) -> TrainingSpec:
    """The cluster layer's description of ``run`` (pure data for the manifest builders)."""
    return TrainingSpec(
        object_name=run.object_name,
        team=run.team.slug,
        namespace=run.team.namespace,
        name=run.name,
        image=run.image,
        command=tuple(run.command),
        flavor=run.flavor.to_spec(),
        args=tuple(run.args),
        env=tuple(sorted(run.pod_env().items())),
        secret_env=secrets.names(run),
        gpus_per_worker=run.gpus_per_worker,
        workers=run.workers,
        cpu=run.cpu,
        memory_gb=run.memory_gb,
        shm_gb=run.shm_gb,
        max_retries=run.max_retries,
        active_deadline_seconds=_deadline_seconds(run),
        spot=run.spot,
        volumes=tuple(VolumeSpec(v["claim"], v["mount_path"], bool(v.get("read_only"))) for v in run.volumes),
        checkpoint=checkpoint_spec(run),
        framework=run.framework,
        training_api=run.training_api,
        runtime=run.training_runtime,
    )


def _deadline_seconds(run: TrainingRun) -> int | None:
    """The current attempt's ``activeDeadlineSeconds``: what its runtime limit leaves it, in seconds; None without a
    limit. At least 1, never 0 (no deadline at all): a run whose attempts ran its whole limit fails when it would
    be queued again (workloads.lifecycle.requeue), but a run in flight when limits began to count attempts may
    have had more counted by the migration than its limit."""
    left = kind_of(run).runtime_left(run)
    return max(int(left.total_seconds()), 1) if left is not None else None


def recent_runs(team) -> dict:
    """The dashboard's "Recent runs" card: the team's newest runs."""
    return {"recent": list(TrainingRun.objects.filter(team=team).for_list()[:RECENT_RUNS])}


class TrainingKind(WorkloadKind, Reactions, Checkpoints, Pages, Demo, Estimates, Api, Trials, Announces):
    model = TrainingRun
    noun = "run"
    audit_actions = AUDIT_ACTIONS
    lifecycle = Lifecycle(
        queued=RunState.QUEUED,
        admitted=RunState.ADMITTED,
        applied=RunState.PENDING,
        failed=RunState.FAILED,
        ended=RunState.CANCELLED,
        applyable=(RunState.ADMITTED,),
        removed=(RunState.CANCELLED,),
        pruned=RunState.PRUNED,
        resumes="resumes",
    )
    # A single-node run is a Job, a distributed one a PyTorchJob (Kubeflow's v1 training operator) or a TrainJob
    # (Kubeflow Trainer v2), as its cluster has (docs/training.md).
    # A run with the checkpoint contract may have its checkpoint claim (kept across attempts), observed so
    # that the cycle deletes it once the run has ended, however it ended (workloads.cycle.leftovers.delete_kept).
    # A run on an atomic pool first asks for its nodes with a ProvisioningRequest and its PodTemplates (docs/pools.md):
    # observed, so the cycle reads the request's conditions, and deleted with the run (the request first).
    resources = (ResourceKind("batch", "v1", "Job", "jobs", observed=True, deleted=True),
                 ResourceKind("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", observed=True, deleted=True),
                 ResourceKind("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs", observed=True, deleted=True),
                 ResourceKind("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", observed=True,
                              deleted=True, kept_across_attempts=True),
                 *PROVISIONING_RESOURCES)
    # preemption_grace reads the checkpoint every cycle; the price of a run's unit-hour, when an hour turns,
    # reads its shape (TrainingRun.placement_shape); a drain, what it was applied as (TrainingRun.resource_kind)
    # — deferred, they would be a query each per run.
    observed_fields = ("checkpoint", "gpus_per_worker", "workers", "applied_training_api")
    committed_units = ("gpus_per_worker", "workers")  # TrainingRun.total_units
    runtime_limit = "max_runtime_minutes"
    job_fields = ("name", "flavor_id", "image")
    end_verb, ended_word, conflict_error = "Cancel", "cancelled", services.RunConflict
    nav = NavItem("Runs", "jobs:run-list", 10)
    new_on_flavor = "jobs:run-new"
    compare_page = ("jobs:run-compare", "runs")  # a sweep's trials compared (jobs.metric_views.run_compare)
    events = (KindEvent(RunState.SUCCEEDED, "run_succeeded", "Run succeeded", "succeeded"),
              KindEvent(RunState.FAILED, "run_failed", "Run failed", "failed"))
    dashboard = DashboardPanel("jobs/_dashboard_stat.html", "jobs/_dashboard_recent.html", recent_runs,
                               new=("New run", "jobs:run-new"))
    state_template = "jobs/run_list.html#state-poll"

    def get_for_user(self, user, pk, role: str = Role.VIEWER, staff_reads: bool = False) -> TrainingRun:
        return services.get_run_for_user(user, pk, role, staff_reads)

    def end_url(self, run: TrainingRun) -> str:
        return reverse("jobs:run-cancel", args=[run.pk])

    def end(self, user, run: TrainingRun) -> TrainingRun:
        return services.cancel_run(user, run)

    def submit(self, user, team, fields: dict) -> TrainingRun:
        return services.submit_run(user, team, fields)

    def preview(self, team, fields: dict):
        # Bad input (or a flavor that does not take the run) is a 400 here, not an "invalid" preview as the form shows.
        return services.preview_run(team, fields, strict=True)

    def trial_fields(self, fields: dict, name: str, params: dict) -> dict:
        return trials.trial_fields(fields, name, params)

    def objective(self, workloads: list, metric: str, after: dict[int, int]):
        return trials.objective(workloads, metric, after)

    def continuation_refusal(self, workload) -> str:
        run = TrainingRun.objects.select_related("cluster").get(workload_id=workload.uid)
        return checkpoints.resume_refusal(run, timezone.now())

    def submit_continuation(self, user, team, fields: dict, workload) -> TrainingRun:
        previous = TrainingRun.objects.select_related("cluster").get(workload_id=workload.uid)
        return services.submit_run(user, team, fields, resumes=previous)

    def seed_demo(self, slugs):
        lines = []
        if runs := seed_demo_runs(slugs):
            lines.append(f"Submitted {len(runs)} demo training runs; they progress on their own.")
        for later in LaterDemoRun.objects.filter(submitted_at__isnull=True).select_related("team"):
            # make run counts it from when the portal answers instead, and prints that time (manage.py demo_clock).
            lines.append(f"{later_demo_run_line(later)} (the worker and beat must run).")
        return lines

    def seed_demo_history(self, slugs):
        history = seed_demo_history(slugs)
        return [f"Recorded {len(history)} finished demo runs of the past two weeks (usage history)."] if history else []

    def resource_request(self, run: TrainingRun) -> ResourceRequest:
        units, per_node = run.placement_shape  # the one shape rule: placement and the price read it too
        return ResourceRequest(flavor=run.flavor.name, units=units, units_per_node=per_node,
                               priority=run.priority, spot=run.spot, description=f"run {run.name}",
                               estimated_cost=run.estimated_total_cost, cost_per_hour=run.estimated_cost_per_hour,
                               training_framework=run.training_framework, for_reservation=run.for_reservation)

    def fix_applied(self, run: TrainingRun, cluster) -> None:
        """Its training API, fixed at its attempt's first apply try to the one ``cluster`` has now
        (:attr:`TrainingRun.applied_training_api`, and the runtime a TrainJob names: :attr:`~TrainingRun.applied_runtime`):
        a PyTorchJob stays one when staff move the cluster to Trainer v2,
        for its status, a drain, its manifest and its delete. Later tries of the same attempt keep it (the first may
        have reached the cluster); a try of an attempt started afresh (``apply_attempts`` reset to 0, so 1 now)
        takes the cluster's API anew — a requeued run's next attempt runs on what its cluster has then."""
        first = Q(apply_attempts__lte=1) | Q(applied_training_api="")
        TrainingRun.objects.filter(first, pk=run.pk, cluster_id=cluster.pk, applied_at__isnull=True).update(
            applied_training_api=cluster.effective_training_api,
            applied_runtime=runtime_for(cluster.runtimes, run.framework))  # a TrainJob's runtimeRef is immutable
        run.refresh_from_db(fields=["applied_training_api", "applied_runtime", "apply_attempts", "applied_at"])

    def manifests(self, run: TrainingRun) -> list[dict]:
        return build_training(training_spec(run), core.backend.cluster_config())

    def status(self, observed: ObservedWorkload, run: TrainingRun, now: datetime) -> WorkloadStatus | None:
        return training_status(observed, now, settings.SLIPWAY_IMAGE_PULL_TIMEOUT_SECONDS)

    def preemption_grace(self, run: TrainingRun) -> int:
        """The contract's grace (what its pods' terminationGracePeriodSeconds says), else the platform's."""
        if run.checkpoint is not None:
            return int(run.checkpoint["grace_seconds"])
        return super().preemption_grace(run)

    def last_checkpoint_at(self, run: TrainingRun) -> datetime | None:
        return run.last_checkpoint_at

    def last_checkpoint(self, run: TrainingRun) -> dict | None:
        return run.last_checkpoint

    def refresh_checkpoint(self, run: TrainingRun) -> None:
        services.checkpoint_from_log(run)

    def progress_ends(self, runs: list[TrainingRun], now: datetime) -> dict[str, datetime]:
        """Running runs whose fresh progress gives an ETA (:func:`jobs.progress.eta`): expected to end then.
        A stale one (no report for a while), or one that reported its last step, says nothing of when."""
        running = {run.pk: run for run in runs if run.state == RunState.RUNNING}
        return {running[pk].ref: eta.at for pk, eta in metrics.etas(running.values(), now).items()
                if eta.at is not None and not eta.stale and not eta.done}

    def reports_checkpoints(self, run: TrainingRun) -> bool:
        """A run with the contract reports (one that has not yet loses all since its start); a run
        without it is silent, ranked by the median of those that report (quotas.reclaim)."""
        return run.has_checkpoint_contract

    def on_budget_spent(self, run: TrainingRun, now: datetime) -> bool:
        """Stop the run (ended like a cancel, its objects deleted): the budget policy says stop."""
        return workloads.end_by_user(run, Message.STOPPED_BY_BUDGET, ReasonCode.STOPPED_BY_BUDGET)

    def requeues_when_disrupted(self, run: TrainingRun, status: WorkloadStatus) -> bool:
        """A spot run whose node the provider reclaimed waits for capacity again, not failed, and
        spends no retry. An on-demand run's disruption (a drain) is its Job's or PyTorchJob's own to retry; a
        TrainJob's fails its whole set at once (Slipway's runtimes: deploy/training-runtimes/), so it goes back to
        the queue too, to resume from its checkpoint where there is room (docs/training.md). A TrainJob as the
        run was applied (:attr:`TrainingRun.resource_kind`), not as its cluster would apply it now."""
        return bool(status.disrupted) and (run.spot or run.resource_kind == RunResourceKind.TRAINJOB)

    def column_changes(self, run: TrainingRun, status: WorkloadStatus) -> dict:
        """The trainer's status of a TrainJob (Trainer v2), stored when it says something new: the progress readers
        weigh it against the run's own reports (:func:`jobs.progress.pick`)."""
        if status.trainer is None:
            return {}
        found = {"at": status.trainer.at.isoformat(), "percent": status.trainer.percent,
                 "remaining_seconds": status.trainer.remaining_seconds,
                 "metrics": [list(pair) for pair in status.trainer.metrics]}
        return {"trainer_status": found} if found != run.trainer_status else {}

    def state_for(self, status: WorkloadStatus, run: TrainingRun) -> str:
        return _PHASE_TO_STATE.get(status.state, run.state)
