"""User actions on training runs: one function per action, shared by the portal and the API.

* :func:`submit_run` validates, admits against quota and budget (``quotas.admission.admit``)
  and records the run in one transaction; the cluster objects are created by a Celery task
  published after commit.
* :func:`cancel_run` ends a run, releases its quota and has its cluster objects deleted.
* :func:`rerun` submits a finished (or running) run's request again.

Read helpers (:func:`get_run_for_user`, :func:`run_manifests`, :func:`run_logs`,
:func:`run_events`) keep the views thin and the access rules in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from cluster.backends.base import ClusterEvent, WorkloadRef
from cluster.errors import ClusterError
from cluster.specs import TrainingSpec, VolumeSpec
from jobs import constants as c
from jobs.constants import PRIORITY_RANK, Reason, RunState
from jobs.models import TrainingRun
from jobs.reconcile import charge
from jobs.validation import RunRequest, parse_run_request, request_from_run
from portal.models import AuditEvent, Role, Team
from portal.permissions import get_for_user, require_team
from portal.queueing import publish_on_commit
from portal.services import audit
from quotas import admission
from quotas.constants import Reason as QuotaReason
from quotas.models import GpuFlavor


class RunConflict(Exception):
    """The run's state does not allow the action (the API answers 409)."""


# 1. Reading ---------------------------------------------------------------------------------


def get_run_for_user(user, pk, role: str = Role.VIEWER) -> TrainingRun:
    """The run ``pk`` if ``user`` may see it: 404 for outsiders, 403 when ``role`` is not met."""
    return get_for_user(TrainingRun.objects.select_related("team", "flavor", "created_by"), user, role, pk=pk)


def training_spec(run: TrainingRun) -> TrainingSpec:
    """The cluster layer's description of ``run`` (pure data for the manifest builders)."""
    return TrainingSpec(
        workload_id=run.workload_id,
        team=run.team.slug,
        namespace=run.team.namespace,
        name=run.name,
        image=run.image,
        command=tuple(run.command),
        flavor=run.flavor.to_spec(),
        args=tuple(run.args),
        env=tuple(sorted(run.env.items())),
        gpus_per_worker=run.gpus_per_worker,
        workers=run.workers,
        cpu=run.cpu,
        memory_gb=run.memory_gb,
        shm_gb=run.shm_gb,
        max_retries=run.max_retries,
        max_runtime_minutes=run.max_runtime_minutes,
        spot=run.spot,
        volumes=tuple(VolumeSpec(v["claim"], v["mount_path"], bool(v.get("read_only"))) for v in run.volumes),
    )


def run_manifests(run: TrainingRun) -> list[dict]:
    """The Kubernetes objects Slipway applies for ``run`` (pure: no cluster call)."""
    from cluster.manifests import build_training
    from portal.cluster import cluster_config

    return build_training(training_spec(run), cluster_config())


def run_logs(run: TrainingRun, tail: int = 200) -> list[str]:
    """Last log lines of the run's first pod; [] when it has no pod (yet) or the cluster is unreachable."""
    from portal.cluster import get_backend

    if run.state in (RunState.QUEUED, RunState.ADMITTED):
        return []
    try:
        return get_backend().logs(WorkloadRef(run.namespace, run.workload_id), tail=tail)
    except ClusterError:
        return []


def run_events(run: TrainingRun) -> list[ClusterEvent]:
    """Cluster events about the run's objects; [] when there are none or the cluster is unreachable."""
    from portal.cluster import get_backend

    if run.state in (RunState.QUEUED, RunState.ADMITTED):
        return []
    try:
        return get_backend().events(WorkloadRef(run.namespace, run.workload_id))
    except ClusterError:
        return []


# 2. Submitting ------------------------------------------------------------------------------


def _quota_request(request: RunRequest) -> admission.ResourceRequest:
    return admission.ResourceRequest(
        flavor=request.flavor,
        units=request.gpus_per_worker * request.workers,
        units_per_node=request.gpus_per_worker,
        priority=PRIORITY_RANK[c.Priority(request.priority)],
        spot=request.spot,
        description=f"run {request.name}",
    )


def _rejection_errors(request: RunRequest, decision: admission.Decision) -> dict[str, list[str]]:
    """Put an admission rejection on the field the user has to change."""
    if decision.reason in (QuotaReason.UNKNOWN_FLAVOR, QuotaReason.INACTIVE_FLAVOR, QuotaReason.NO_QUOTA_FOR_FLAVOR):
        field = "flavor"
    elif decision.reason == QuotaReason.EXCEEDS_LARGEST_NODE:
        field = "gpus_per_worker"
    elif decision.reason == QuotaReason.EXCEEDS_QUOTA:
        field = "workers" if request.workers > 1 else "gpus_per_worker"
    else:
        field = "non_field_errors"
    return {field: [decision.message]}


def _check_team_facts(team: Team, request: RunRequest) -> GpuFlavor:
    """Checks that need the database, with field errors: flavor, name free among active runs."""
    errors: dict[str, list[str]] = {}
    flavor = GpuFlavor.objects.filter(name=request.flavor).first()
    if flavor is None:
        errors["flavor"] = [f"Unknown flavor {request.flavor!r}."]
    elif not flavor.active:
        errors["flavor"] = [f"Flavor {flavor.name} is retired and cannot be requested any more."]
    if TrainingRun.objects.filter(team=team, name=request.name).active().exists():
        errors["name"] = [f"The team already has an active run named {request.name!r}."]
    if errors:
        raise ValidationError(errors)
    return flavor


def submit_run(user, team: Team, request: RunRequest | dict) -> TrainingRun:
    """Submit a training run for ``team``; returns it admitted or queued.

    Raises ``ValidationError`` (field errors; nothing written) for bad input or a request
    that can never fit, ``PermissionDenied`` below the member role, ``Http404`` for outsiders.
    """
    # 1. Access and input.
    require_team(user, team, Role.MEMBER)
    if not isinstance(request, RunRequest):
        request = parse_run_request(request)
    flavor = _check_team_facts(team, request)

    # 2. Record and admit in one transaction: a rejection rolls the row back.
    try:
        with transaction.atomic():
            run = TrainingRun.objects.create(team=team, created_by=user, flavor=flavor, **request.as_fields())
            decision = admission.admit(team, _quota_request(request), run.ref)
            if decision.rejected:
                raise ValidationError(_rejection_errors(request, decision))
            now = timezone.now()
            if decision.admitted:
                run.state, run.admitted_at, run.reason = RunState.ADMITTED, now, Reason.WAITING_FOR_WORKER
            else:
                run.state, run.reason = RunState.QUEUED, decision.message
            run.save(update_fields=["state", "admitted_at", "reason"])
            audit(AuditEvent.Action.RUN_SUBMITTED, actor=user, team=team, target=f"run {run.pk} ({run.name})",
                  flavor=flavor.name, units=run.total_units, outcome=decision.outcome)
    except IntegrityError:
        # Two submissions with one name raced past the check above; the constraint decided.
        raise ValidationError({"name": [f"The team already has an active run named {request.name!r}."]}) from None

    # 3. After commit: create the cluster objects (the reconciler re-drives if this is lost).
    if run.state == RunState.ADMITTED:
        enqueue_create(run.pk)
    return run


def enqueue_create(run_pk: int) -> None:
    from jobs.tasks import create_run_resources

    publish_on_commit(create_run_resources, run_pk)


@dataclass(frozen=True)
class Preview:
    """What submitting would do now: price and admission outcome (nothing is written)."""

    cost_per_hour: Decimal | None
    outcome: str  # "admit" | "queue" | "reject" | "invalid"
    message: str


def preview_run(team: Team, data: dict) -> Preview:
    """Cost per hour and whether a run would start now, queue (why) or be rejected (why)."""
    try:
        request = parse_run_request(data)
    except ValidationError as exc:
        first = next(iter(exc.message_dict.items()))
        return Preview(None, "invalid", f"{first[0]}: {first[1][0]}")
    flavor = GpuFlavor.objects.filter(name=request.flavor, active=True).first()
    cost = (flavor.price(request.spot) * request.gpus_per_worker * request.workers) if flavor else None
    decision = admission.preview(team, _quota_request(request))
    return Preview(cost, decision.outcome, decision.message)


# 3. Cancelling and running again ---------------------------------------------------------------


def cancel_run(user, run: TrainingRun) -> TrainingRun:
    """Cancel ``run``: it ends ``cancelled``, its quota is released, its cluster objects deleted.

    Raises ``RunConflict`` when the run has already finished.
    """
    require_team(user, run.team, Role.MEMBER)
    with transaction.atomic():
        # The team's admission lock first, in the order admit_waiting takes its locks: a queued
        # run may be being admitted right now (tests/jobs/test_concurrency.py).
        admission.lock_team(run.team)
        now = timezone.now()
        # Conditional on "not final": a reconcile finishing the run at the same moment wins
        # or loses cleanly, never both.
        updated = (
            TrainingRun.objects.filter(pk=run.pk).exclude(state__in=c.FINAL_STATES)
            .update(state=RunState.CANCELLED, finished_at=now, reason=Reason.CANCELLED_BY.format(user=user.username))
        )
        if not updated:
            run.refresh_from_db()
            raise RunConflict(f"The run already finished ({run.state}); there is nothing to cancel.")
        # The reconciler no longer looks at a final run: bill the stretch since its last cycle
        # here (our UPDATE holds the row, so a concurrent cycle cannot bill it too).
        run.refresh_from_db(fields=["billed_until", "billed_units"])
        cost = charge(run, run.billed_until, now, run.billed_units)
        if cost:
            TrainingRun.objects.filter(pk=run.pk).update(cost_to_date=F("cost_to_date") + cost, billed_until=now)
        admission.release(run.ref)
        admission.admit_waiting(run.team)
        audit(AuditEvent.Action.RUN_CANCELLED, actor=user, team=run.team, target=f"run {run.pk} ({run.name})")
    from jobs.tasks import delete_run_resources

    publish_on_commit(delete_run_resources, run.pk)
    run.refresh_from_db()
    return run


def rerun(user, run: TrainingRun) -> TrainingRun:
    """Submit ``run``'s request again. A still-active run's name gets a ``-N`` suffix."""
    require_team(user, run.team, Role.MEMBER)
    if not run.flavor.active:
        raise ValidationError({"flavor": [f"Flavor {run.flavor.name} is retired; submit a new run instead."]})
    request = request_from_run(run)
    name = request.name
    taken = set(TrainingRun.objects.filter(team=run.team).active().values_list("name", flat=True))
    suffix = 2
    while name in taken:
        stem = request.name[: c.NAME_MAX_LENGTH - len(str(suffix)) - 1].rstrip("-")
        name = f"{stem}-{suffix}"
        suffix += 1
    if name != request.name:
        request = parse_run_request({**request.as_fields(), "flavor": request.flavor, "name": name})
    return submit_run(user, run.team, request)


def ensure_can_submit(user, team: Team) -> None:
    """Raise PermissionDenied unless ``user`` may submit runs in ``team`` (for showing forms)."""
    membership = require_team(user, team, Role.VIEWER)
    if not membership.allows(Role.MEMBER):
        raise PermissionDenied("Viewers cannot submit runs.")
