"""A training run's state from its observation: its Job's, PyTorchJob's or TrainJob's conditions and its pods
(pure, Django-free, on the pod reading of :mod:`cluster.status`).

A retried Job says which attempt it is on; a failed one, why its last attempt died when a pod says
so; a pod disrupted by the cluster (a spot node reclaimed) is told apart from a failure of the run's
own; an image that cannot be pulled fails the run once the pull limit has passed.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from cluster.backends.base import ObservedWorkload
from cluster.pods import attempt_words
from cluster.status import (
    SEVERITY_PROBLEM,
    Manifest,
    WorkloadStatus,
    as_int,
    conditions,
    disruption,
    first_ran_at,
    is_true,
    live_pods,
    parse_time,
    pods_reason,
    pull_given_up,
    running_units,
    stuck_waiting,
    trainer_progress,
    with_message,
)


class TrainingPhase:
    """Portal states of a training run as far as the cluster can tell."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


#: A Job's ``backoffLimit`` when its spec does not say (the API server's default).
DEFAULT_BACKOFF_LIMIT = 6


def _current_reason(pods: list[Manifest]) -> tuple[int, str]:
    """What live pods say; when they say nothing, why the last attempt ended (a retry is due)."""
    found = pods_reason(live_pods(pods))
    if found[0] < SEVERITY_PROBLEM:
        finished = pods_reason(pods)
        if finished[0] > found[0]:
            return finished
    return found


def _running_pods(pods: list[Manifest]) -> int:
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")


def _failure_reason(cond: Manifest, pods: list[Manifest]) -> str:
    """The controller's verdict, plus why the last attempt died when a pod says so."""
    verdict = with_message(cond.get("reason") or "Failed", cond.get("message", ""))
    severity, detail = pods_reason(pods)
    if severity >= SEVERITY_PROBLEM and detail and detail not in verdict:
        return f"{verdict} (last attempt: {detail})"
    return verdict


def _settled(job: Manifest, pods: list[Manifest], done: str, failed_at_completion: bool) -> WorkloadStatus | None:
    """What a training controller's object says once it has settled: succeeded (its ``done`` condition:
    a Job's ``Complete``, a PyTorchJob's ``Succeeded``), failed, or suspended; None while it runs or waits.

    Both end at ``completionTime`` when they succeed; a failed PyTorchJob sets it too, a failed Job
    does not (``failed_at_completion``), and either's condition says when otherwise.
    """
    status = job.get("status") or {}
    conds = conditions(job)
    started, units = first_ran_at(pods), running_units(pods)
    for name, phase in ((done, TrainingPhase.SUCCEEDED), ("Failed", TrainingPhase.FAILED)):
        if is_true(conds.get(name)):
            completed = status.get("completionTime") if phase == TrainingPhase.SUCCEEDED or failed_at_completion else None
            finished = parse_time(completed) or parse_time(conds[name].get("lastTransitionTime"))
            reason = _failure_reason(conds[name], pods) if phase == TrainingPhase.FAILED else ""
            return WorkloadStatus(phase, reason, started, finished, units)
    if is_true(conds.get("Suspended")):
        return WorkloadStatus(TrainingPhase.PENDING, "Suspended", started, None, units)
    return None


def _job_status(job: Manifest, pods: list[Manifest]) -> WorkloadStatus:
    settled = _settled(job, pods, done="Complete", failed_at_completion=False)
    if settled is not None:
        return settled
    started, units = first_ran_at(pods), running_units(pods)
    # A retried Job says which attempt it is on, unless a live pod has a problem to tell.
    retries = as_int((job.get("spec") or {}).get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
    severity, reason = pods_reason(live_pods(pods))
    if _running_pods(pods):
        return WorkloadStatus(
            TrainingPhase.RUNNING, reason if severity >= SEVERITY_PROBLEM else attempt_words(pods, retries), started,
            None, units
        )
    if severity < SEVERITY_PROBLEM:
        reason = attempt_words(pods, retries) or _current_reason(pods)[1]
    return WorkloadStatus(TrainingPhase.PENDING, reason, started, None, units)


def _pytorchjob_status(job: Manifest, pods: list[Manifest]) -> WorkloadStatus:
    settled = _settled(job, pods, done="Succeeded", failed_at_completion=True)
    if settled is not None:
        return settled
    conds = conditions(job)
    started, units = first_ran_at(pods), running_units(pods)
    severity, reason = pods_reason(live_pods(pods))
    if is_true(conds.get("Restarting")):
        restart = with_message("Restarting", conds["Restarting"].get("message", ""))
        return WorkloadStatus(
            TrainingPhase.RUNNING, reason if severity >= SEVERITY_PROBLEM else restart, started, None, units
        )
    # "Running" is set once every replica runs; with a gang scheduler nothing runs before.
    if is_true(conds.get("Running")) or _running_pods(pods):
        return WorkloadStatus(
            TrainingPhase.RUNNING, reason if severity >= SEVERITY_PROBLEM else "", started, None, units
        )
    return WorkloadStatus(TrainingPhase.PENDING, _current_reason(pods)[1], started, None, units)


def _trainjob_status(job: Manifest, pods: list[Manifest]) -> WorkloadStatus:
    """A Trainer v2 TrainJob: ``Complete`` or ``Failed`` once settled (neither carries a completion time: their
    condition says when), ``Suspended``; else running once a node's pod runs (its JobSet restarts the whole gang
    with new pods, so a restart shows as pending pods with their reasons, then running again), else pending with
    the pods' reason. Its ``trainerStatus``, when the trainer fills it in, rides along (:attr:`WorkloadStatus.trainer`).
    """
    settled = _settled(job, pods, done="Complete", failed_at_completion=False)
    if settled is not None:
        return dataclasses.replace(settled, trainer=trainer_progress(job))
    started, units = first_ran_at(pods), running_units(pods)
    severity, reason = pods_reason(live_pods(pods))
    if _running_pods(pods):
        status = WorkloadStatus(TrainingPhase.RUNNING, reason if severity >= SEVERITY_PROBLEM else "", started, None,
                                units)
    else:
        status = WorkloadStatus(TrainingPhase.PENDING, _current_reason(pods)[1], started, None, units)
    return dataclasses.replace(status, trainer=trainer_progress(job))


def training_status(obs: ObservedWorkload, now: datetime | None = None,
                    image_pull_limit: float | None = None) -> WorkloadStatus | None:
    """The state of a training run, or None when none of its Job, PyTorchJob or TrainJob exists.

    A run with a pod whose image could not be pulled for ``image_pull_limit`` seconds (at
    ``now``) has failed: it cannot make progress, and the kubelet would retry forever. Its
    status says so with what to check, and is ``abandoned`` (its objects are deleted).
    """
    # A TrainJob first: its JobSet's child Jobs are Jobs too, should a cluster's labels ever bring them along.
    trainjob = obs.first("TrainJob")
    job = obs.first("Job") if trainjob is None else None
    pytorchjob = obs.first("PyTorchJob") if trainjob is None and job is None else None
    if trainjob is not None:
        status = _trainjob_status(trainjob, obs.pods)
    elif job is not None:
        status = _job_status(job, obs.pods)
    elif pytorchjob is not None:
        status = _pytorchjob_status(pytorchjob, obs.pods)
    else:
        return None
    if status.state != TrainingPhase.SUCCEEDED:
        # Also when the Job failed for it: a spot node reclaimed is no failure of the run's own.
        disrupted = disruption(obs.pods)
        if disrupted:
            status = dataclasses.replace(status, disrupted=disrupted)
    if status.state in (TrainingPhase.SUCCEEDED, TrainingPhase.FAILED):
        return status
    waiting = stuck_waiting(obs.pods)
    gave_up = pull_given_up(waiting, now, image_pull_limit)
    if gave_up:
        return dataclasses.replace(status, state=TrainingPhase.FAILED, reason=gave_up, finished_at=now,
                                   waiting=waiting, abandoned=True)
    return dataclasses.replace(status, waiting=waiting)
