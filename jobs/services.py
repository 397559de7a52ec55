"""User actions on training runs: one function per action, shared by the portal and the API.

* :func:`submit_run` validates, records the run and admits it against quota and budget
  (:func:`workloads.services.admit_new`) in one transaction; the cluster objects are created
  by a Celery task published after commit.
* :func:`cancel_run` ends a run, releases its quota and has its cluster objects deleted.
* "Run again" is not an action of its own: the portal opens the New run form prefilled with
  the run's request under a fresh name (:func:`name_for_run_again`), the user edits it and
  submits it through :func:`submit_run` like any other run.

Reading (manifest, logs, events) goes through :mod:`workloads.services`, shared by every kind.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

import fleet.services as fleet
from billing.pricing import quote
from cluster.training import DEFAULT_FRAMEWORK
from fleet.models import GpuFlavor
from jobs import checkpoints
from jobs.checkpoint_contract import RUN_TOKEN_ENV
from jobs.constants import AUDIT_CANCELLED, AUDIT_SUBMITTED
from jobs.models import TrainingRun
from jobs.validation import RunRequest, parse_run_request
from quotas import policy
from quotas.decide import ResourceRequest
from teams.models import Role, Team
from teams.permissions import VIEWERS_CANNOT_SUBMIT, check_may_end, get_for_user, require_team
from teams.services import audit, audit_write
from workloads import secrets
from workloads import services as workloads
from workloads.constants import NAME_MAX_LENGTH, Message
from workloads.estimates.preview import Preview, preview_request

#: A copy's counter at the end of a run name ("first-try-2"), see :func:`name_for_run_again`.
COPY_SUFFIX = re.compile(r"(?P<stem>.+)-(?P<number>[0-9]+)")


class RunConflict(Exception):
    """The run's state does not allow the action (the API answers 409)."""


# 1. Reading ---------------------------------------------------------------------------------


def get_run_for_user(user, pk, role: str = Role.VIEWER, staff_reads: bool = False) -> TrainingRun:
    """The run ``pk`` if ``user`` may see it: 404 for outsiders, 403 when ``role`` is not met.

    ``staff_reads``: a read-only page or API read, which platform staff may make in any team.
    """
    return get_for_user(TrainingRun.objects.select_related("team", "flavor", "created_by", "cluster"), user, role,
                        staff_reads=staff_reads, pk=pk)


def get_run_by_id(pk: int) -> TrainingRun:
    """The run ``pk`` without an access check: for a caller holding that run's own token only."""
    return TrainingRun.objects.select_related("team", "flavor", "created_by").get(pk=pk)


# 2. Submitting ------------------------------------------------------------------------------


def _quota_request(request: RunRequest) -> ResourceRequest:
    """What a not yet recorded run would ask of the quota (for the preview)."""
    return ResourceRequest(
        flavor=request.flavor,
        units=request.gpus_per_worker * request.workers,
        units_per_node=request.gpus_per_worker,
        priority=request.priority,
        spot=request.spot,
        description=f"run {request.name}",
        training_framework=request.framework if request.workers > 1 else "",
        for_reservation=request.for_reservation,
    )


def _reservation_errors(team: Team, request: RunRequest, flavor: GpuFlavor | None) -> dict[str, list[str]]:
    """Its ``for_reservation`` (:func:`workloads.services.reservation_errors`): submission and the preview alike."""
    return workloads.reservation_errors(team, flavor, request.for_reservation,
                                        request.gpus_per_worker * request.workers, request.spot)


def _shape(request: RunRequest) -> policy.Shape:
    """What a run asks of its flavor: training, ``workers`` pods as one job, ``gpus_per_worker`` units each."""
    return policy.Shape(training=True, workers=request.workers, units_per_pod=request.gpus_per_worker,
                        shm_gb=request.shm_gb)


def _flavor_errors(request: RunRequest, flavor: GpuFlavor) -> dict[str, list[str]]:
    """What ``flavor`` refuses of the run (:func:`quotas.policy.refusals`) as field errors: submission and
    the preview (the form's panel, the API's dry run) ask it alike."""
    return policy.refusals(flavor, _shape(request)).errors(units_field="gpus_per_worker")


def _training_errors(request: RunRequest) -> dict[str, list[str]]:
    """Several workers are distributed training of the run's framework (a PyTorchJob or a TrainJob): a field error
    when no cluster its selector leaves it takes that (:func:`fleet.services.distributed_training_refusal`, naming
    those that do), since it could never be placed — on ``framework`` when it names one other than the default
    (the clusters lack that framework), else on ``workers``. Submission and the preview ask it alike."""
    if request.workers < 2:
        return {}
    words = fleet.distributed_training_refusal(dict(request.cluster_selector), request.framework)
    if not words:
        return {}
    field = "workers" if request.framework == DEFAULT_FRAMEWORK else "framework"
    return {field: [f"{words} A run of {request.workers} workers is distributed training; one worker needs "
                    "no training API."]}


def _check_team_facts(team: Team, request: RunRequest) -> GpuFlavor:
    """Checks that need the database, with field errors: flavor (and what it takes), name free among active runs,
    a cluster that takes it."""
    flavor, errors = workloads.check_flavor_and_name(
        TrainingRun, team, request.flavor, request.name, f"The team already has an active run named {request.name!r}.",
        dict(request.cluster_selector))
    if flavor is not None:
        errors.update(_flavor_errors(request, flavor))
    for field, words in _training_errors(request).items():
        errors.setdefault(field, words)  # a flavor that takes no distributed run says so first
    if "flavor" not in errors:
        errors.update(_reservation_errors(team, request, flavor))
    if errors:
        raise ValidationError(errors)
    return flavor


def submit_run(user, team: Team | str, request: RunRequest | dict, *, resumes: TrainingRun | None = None) -> TrainingRun:
    """Submit a training run for ``team`` (a Team or its slug); returns it admitted or queued.

    ``resumes``: a pruned run this one goes on from (a sweep's continued trial): on its cluster, with its
    checkpoint claim, from its last checkpoint (:func:`jobs.checkpoints.resumed_fields`; the caller checked
    :func:`jobs.checkpoints.resume_refusal`).

    Raises ``ValidationError`` (field errors; nothing written) for bad input or a request
    that can never fit, ``PermissionDenied`` below the member role, ``Http404`` for outsiders.
    """
    # 1. Access and input (the access check loads the team when given its slug).
    team = require_team(user, team, Role.MEMBER).team
    if not isinstance(request, RunRequest):
        request = parse_run_request(request)
    flavor = _check_team_facts(team, request)
    if resumes is not None and request.checkpoint is None:
        raise ValidationError({"checkpoint": [f"It goes on from run {resumes.pk}'s checkpoint: it needs the "
                                              "checkpoint contract."]})
    claim = checkpoints.resumed_fields(resumes) if resumes is not None else checkpoint_claim(request)

    # 2. Record and admit in one transaction: a rejection rolls the row back. Admitted, the
    #    cluster objects are created after commit (the reconciler re-drives if that is lost).
    # With the checkpoint contract: the run token, hashed on the row, sealed for the run's Secret.
    token, token_hash = checkpoints.new_run_token() if request.checkpoint is not None else ("", "")
    try:
        with transaction.atomic():
            run = TrainingRun.objects.create(team=team, created_by=user, flavor=flavor, run_token_hash=token_hash,
                                             **request.as_fields(), **claim)
            secrets.store(run, request.secret_env, ((RUN_TOKEN_ENV, token),) if token else ())
            # The audit row is written with the admission (one round trip under the team's lock).
            decision = workloads.admit_new(run, lambda decided, _now: [audit_write(
                AUDIT_SUBMITTED, actor=user, team=team, target=f"run {run.pk} ({run.name})",
                flavor=flavor.name, units=run.total_units, outcome=decided.outcome)])
            if decision.rejected:
                raise ValidationError(workloads.rejection_errors(
                    decision, "gpus_per_worker", "workers" if request.workers > 1 else "gpus_per_worker"))
    except IntegrityError:
        # Two submissions with one name raced past the check above; the constraint decided.
        raise ValidationError({"name": [f"The team already has an active run named {request.name!r}."]}) from None
    return run


def checkpoint_claim(request: RunRequest) -> dict[str, str]:
    """The size and class of the checkpoint claim Slipway will provide the run, as the settings say now
    ({} without one). Recorded on the run: every attempt applies its claim with these, whatever
    the settings say by then (:attr:`jobs.models.TrainingRun.checkpoint_storage`)."""
    if request.checkpoint is None or request.checkpoint.volume:
        return {}
    return {"checkpoint_storage": settings.SLIPWAY_CHECKPOINT_STORAGE,
            "checkpoint_storage_class": settings.SLIPWAY_CHECKPOINT_STORAGE_CLASS}


def preview_run(team: Team, data: dict, *, strict: bool = False) -> Preview:
    """The preview of submitting ``data`` (docs/glossary.md "preview"): price, budget share, start now / queue
    (position, estimate) / refuse, and the flavor advice it contradicts (``warnings``).

    Bad input, or a flavor that does not take the run, is an "invalid" preview naming the first field (the
    form's panel); ``strict`` (the API's dry run) raises the ``ValidationError`` instead, a 400 as submitting is.
    """
    try:
        request = parse_run_request(data)
        flavor = GpuFlavor.objects.usable().filter(name=request.flavor).first()
        errors = {**_training_errors(request), **(_flavor_errors(request, flavor) if flavor is not None else {}),
                  **_reservation_errors(team, request, flavor)}
        if errors:
            raise ValidationError(errors)
    except ValidationError as exc:
        if strict:
            raise
        first = next(iter(exc.message_dict.items()))
        return Preview("invalid", f"{first[0]}: {first[1][0]}")
    quota_request = _quota_request(request)
    price = None
    if flavor is not None:
        # Priced as the run's own request will be (jobs.kind): the one price (billing.pricing) of its
        # shape, per hour, and in all with a limit.
        price = quote(flavor, request.spot, units=quota_request.units, units_per_node=quota_request.units_per_node,
                      selector=dict(request.cluster_selector), training_framework=request.framework if request.workers > 1 else "")
        rate = price.per_hour(quota_request.units)
        total = rate * request.max_runtime_minutes / 60 if request.max_runtime_minutes else None
        quota_request = dataclasses.replace(quota_request, cost_per_hour=rate, estimated_cost=total)
    duration = timedelta(minutes=request.max_runtime_minutes) if request.max_runtime_minutes else None
    result = preview_request(team, quota_request, flavor, duration, price)
    if flavor is None:
        return result
    return dataclasses.replace(result, warnings=policy.warnings(flavor, _shape(request), request.gpu_memory_gb))


# 3. Reporting a checkpoint (jobs.checkpoints) ------------------------------------------------


def report_checkpoint(run: TrainingRun, data) -> TrainingRun:
    """Record ``run``'s checkpoint ``{"step", "path"}``: its next attempt resumes from it (SLIPWAY_RESUME_FROM).

    The caller proved the right to (the run's token, or a member's credentials of its team).
    The newest report wins (:mod:`jobs.checkpoints`). Raises ``ValidationError`` for bad input,
    ``RunConflict`` when the run has no contract or has ended.
    """
    step, path = checkpoints.parse_report(data)
    if run.checkpoint is None:
        raise RunConflict("The run has no checkpoint contract: submit it with \"checkpoint\" to report checkpoints.")
    now = timezone.now()
    updated = (TrainingRun.objects.filter(pk=run.pk).exclude(state__in=TrainingRun.FINAL_STATES)
               .update(last_checkpoint_at=now, last_checkpoint_step=step, last_checkpoint_path=path))
    run.refresh_from_db()
    if not updated:
        raise RunConflict(f"The run already finished ({run.state}); its checkpoints are no longer recorded.")
    return run


def checkpoint_from_log(run: TrainingRun) -> bool:
    """Record the last ``SLIPWAY_CHECKPOINT`` line of the run's log as a report, when it is not the
    one recorded already. True when it recorded one.

    Read only when the run is about to be preempted or interrupted (its spot node reclaimed), and while its
    pods stop (workloads.cycle.preemption), never every cycle: one
    log read of its main pod (a Job's newest attempt, a PyTorchJob's Master), its last 200 lines.
    """
    if run.checkpoint is None:
        return False
    found = checkpoints.last_in_log(workloads.logs(run).lines)
    if found is None or found[:2] == (run.last_checkpoint_step, run.last_checkpoint_path):
        return False
    step, path, written = found
    now = timezone.now()
    # When the line says when it was written, that is when the checkpoint was taken (never later than now).
    at = min(written, now) if written is not None else now
    updated = (TrainingRun.objects.filter(pk=run.pk).exclude(state__in=TrainingRun.FINAL_STATES)
               .update(last_checkpoint_at=at, last_checkpoint_step=step, last_checkpoint_path=path))
    run.refresh_from_db(fields=["last_checkpoint_at", "last_checkpoint_step", "last_checkpoint_path"])
    return bool(updated)


# 4. Cancelling and running again ---------------------------------------------------------------


def cancel_run(user, run: TrainingRun) -> TrainingRun:
    """Cancel ``run``: it ends ``cancelled``, its quota is released, its cluster objects deleted.

    Who may is :func:`teams.permissions.may_end` (team admins any run, members their own and
    — as the team's setting says — their teammates', staff any team's). Raises
    ``RunConflict`` when the run has already finished.
    """
    check_may_end(user, run)
    with transaction.atomic():
        if not workloads.end_by_user(run, Message.CANCELLED_BY.format(user=user.username)):
            run.refresh_from_db()
            raise RunConflict(f"The run already finished ({run.state}); there is nothing to cancel.")
        audit(AUDIT_CANCELLED, actor=user, team=run.team, target=f"run {run.pk} ({run.name})")
    run.refresh_from_db()
    return run


def name_for_run_again(run: TrainingRun) -> str:
    """A fresh name for a copy of ``run``: ``first-try`` → ``first-try-2``, ``first-try-2`` → ``first-try-3``.

    A trailing ``-N`` counts copies only when the team has (or had) a run named without it, so
    ``sweep-lr-1e-4`` becomes ``sweep-lr-1e-4-2``, not ``sweep-lr-1e-5``. Names the team's active
    runs hold are skipped (a finished run's name is free, but a copy named like it reads as the
    same run in lists and logs).
    """
    runs = TrainingRun.objects.filter(team=run.team)
    taken = set(runs.unfinished().values_list("name", flat=True)) | {run.name}
    stem, suffix = run.name, 2
    match = COPY_SUFFIX.fullmatch(run.name)
    if match and runs.filter(name=match["stem"]).exists():
        stem, suffix = match["stem"], int(match["number"]) + 1
    while True:
        name = f"{stem[: NAME_MAX_LENGTH - len(str(suffix)) - 1].rstrip('-')}-{suffix}"
        if name not in taken:
            return name
        suffix += 1


def ensure_can_submit(user, team: Team) -> None:
    """Raise PermissionDenied unless ``user`` may submit runs in ``team`` (for showing forms)."""
    membership = require_team(user, team, Role.VIEWER)
    if not membership.allows(Role.MEMBER):
        raise PermissionDenied(VIEWERS_CANNOT_SUBMIT)
