"""The Job controller (batch/v1): one pod at a time, retried with back-off up to the backoff
limit, ended by a succeeded pod, the limit, or ``activeDeadlineSeconds``. A ``podFailurePolicy``
rule ``Ignore`` on ``DisruptionTarget`` makes a disrupted pod (its node reclaimed) spend no
retry: it is replaced at once, without back-off, and not counted as failed.
"""

from __future__ import annotations

from datetime import timedelta

from sandbox.controllers.conditions import condition
from sandbox.controllers.kubelet import remove
from sandbox.controllers.quota import create_pods
from sandbox.names import name_suffix
from sandbox.timestamps import parse_rfc3339, rfc3339
from sandbox.world import ObjRow, World

JOB_BACKOFF_START, JOB_BACKOFF_CAP = 10, 360


def reconcile(world: World, job: ObjRow) -> None:
    pods = [p for p in world.pods_by_owner.get(job.pk, []) if p.active]
    if world.quiet(job, pods):
        return
    status = dict(job.status)
    memo = job.memo
    status.setdefault("startTime", rfc3339(world.now))
    memo.setdefault("start", rfc3339(world.now))
    ref = f"Job/{job.name}"
    ended = world.finished.get(job.pk, [])
    ignore = job.plan.get("ignore_disruption", False)
    counted = [p for p in ended if p.phase == "Failed" and not (ignore and p.disruption)]
    failed = int(status.get("failed", 0)) + len(counted)
    succeeded = int(status.get("succeeded", 0)) + sum(p.phase == "Succeeded" for p in ended)
    if failed:
        status["failed"] = failed
    if succeeded:
        status["succeeded"] = succeeded
    deadline = job.plan.get("deadline")
    started = parse_rfc3339(memo["start"])
    if succeeded:
        finish = max(p.finished_at for p in ended if p.phase == "Succeeded")
        status["completionTime"] = rfc3339(finish)
        status["conditions"] = [condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods",
                                          world.now)]
        world.event(job, ref, "Normal", "Completed", "Job completed")
        job.done = True
    elif deadline is not None and world.now >= started + timedelta(seconds=int(deadline)):
        for pod in pods:
            remove(world, pod, job)  # the Job controller deletes its active pods
        pods = []
        status["conditions"] = [condition("Failed", "DeadlineExceeded", "Job was active longer than specified deadline",
                                          world.now)]
        world.event(job, ref, "Warning", "DeadlineExceeded", "Job was active longer than specified deadline")
        job.done = True
    elif failed > int(job.plan.get("backoff", 6)):
        status["conditions"] = [condition("Failed", "BackoffLimitExceeded",
                                          "Job has reached the specified backoff limit", world.now)]
        world.event(job, ref, "Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        job.done = True
    elif not pods:
        if counted:
            # The Job controller's back-off before the next attempt: 10s, 20s, 40s … capped at 6 minutes.
            delay = min(JOB_BACKOFF_START * 2 ** (failed - 1), JOB_BACKOFF_CAP)
            memo["retry_at"] = (max(p.finished_at for p in ended) + timedelta(seconds=delay)).timestamp()
            world.dirty(job)
        seq = int(memo.get("seq", 0))
        name = f"{job.name[:57]}-{name_suffix(job.uid, seq)}"
        # The pod's index is its attempt (0-based): SLIPWAY_SIM_FAILED_ATTEMPTS reads it.
        if world.now.timestamp() >= memo.get("retry_at", 0) and create_pods(world, job, [(0, seq, name)], ref):
            memo["seq"] = seq + 1
            world.dirty(job)
    if job.done:
        status["completionTime"] = status.get("completionTime") or rfc3339(world.now)
        world.dirty(job)
    live = [p for p in world.pods_by_owner.get(job.pk, []) if p.active]
    status["active"] = len(live)
    status["ready"] = sum(p.phase == "Running" for p in live)
    if not status["active"]:
        status.pop("active")
    world.set_status(job, status)
