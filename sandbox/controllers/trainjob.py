"""Kubeflow Trainer v2's TrainJob controller, with the JobSet and Job controllers under it, as one: the
JobSet's replicated jobs (:mod:`sandbox.trainer`, built at admission into the plan) run their pods as one
gang, a failed node restarts the whole set with new pods (the runtime's ``failurePolicy.maxRestarts``),
and the TrainJob ends ``Complete`` when every trainer pod succeeded (an MPI runtime: its launcher, the
JobSet's ``successPolicy``), ``Failed`` when the restarts are spent or ``activeDeadlineSeconds`` passed.

Its status has the CRD's shape: ``conditions`` (``Created``, ``Suspended``, ``Complete``, ``Failed``, with
the reasons and messages upstream's TrainJob and JobSet controllers write), ``jobsStatus`` (per replicated
job, how many of its Jobs are active, ready, succeeded, failed, suspended: one Job each here, as every
runtime of Slipway's has ``replicas: 1``). ``trainerStatus`` (rank 0's progress) is read from its pod's
simulated run when the TrainJob is observed (:func:`sandbox.pods.trainer_status`), as upstream's is the last
report the trainer made.

Pods are named as JobSet's indexed Jobs name theirs, ``<trainjob>-<replicated job>-0-<index>-<suffix>``
(a restart makes new ones with new suffixes; the old ones go with their Jobs).
"""

from __future__ import annotations

from datetime import timedelta

from sandbox.controllers.conditions import condition, has_condition, set_condition
from sandbox.controllers.kubelet import kill, remove
from sandbox.controllers.quota import create_pods
from sandbox.names import name_suffix
from sandbox.timestamps import parse_rfc3339, rfc3339
from sandbox.world import ObjRow, PodRow, World

#: Upstream's words (trainer's and JobSet's constants).
CREATED = ("JobsCreationSucceeded", "Succeeded to create Jobs")
SUSPENDED = ("Suspended", "TrainJob is suspended")
RESUMED = ("Resumed", "TrainJob is resumed")
COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
MAX_RESTARTS = ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
DEADLINE = ("DeadlineExceeded", "TrainJob exceeded its activeDeadlineSeconds")
#: A failure policy rule's FailJobSet (JobSet's words for a rule that fails the set).
DISRUPTED = ("FailJobSetFailurePolicyRule", "jobset failed due to a failure policy rule")


def job_name(trainjob: str, replicated_job: str) -> str:
    """The name of a replicated job's one Job (JobSet's ``<jobset>-<replicated job>-<job index>``)."""
    return f"{trainjob}-{replicated_job}-0"


def pod_name(job: ObjRow, role: int, index: int) -> str:
    replicated = job.plan["pods"][role]["role"]
    attempt = int(job.memo.get("restarts", 0))
    return f"{job_name(job.name[:40], replicated)}-{index}-{name_suffix(job.uid, attempt, replicated, index)}"


def _first_failed_job(job: ObjRow, failed: list[PodRow]) -> str:
    return job_name(job.name, job.plan["pods"][min(p.role for p in failed)]["role"])


def _succeeded(job: ObjRow, ended: list[PodRow]) -> dict[str, int]:
    """Pods of this attempt that succeeded, per replicated job (kept across ticks in the memo)."""
    done = dict(job.memo.get("succeeded") or {})
    for pod in ended:
        if pod.phase == "Succeeded":
            name = job.plan["pods"][pod.role]["role"]
            done[name] = done.get(name, 0) + 1
    return done


def _complete(job: ObjRow, done: dict[str, int]) -> bool:
    """The JobSet's success policy: every pod of the target replicated jobs (none named: of all) succeeded."""
    targets = job.plan.get("success") or [plan["role"] for plan in job.plan["pods"]]
    return all(done.get(plan["role"], 0) >= plan["count"] for plan in job.plan["pods"] if plan["role"] in targets)


def reconcile(world: World, job: ObjRow) -> None:
    pods = [p for p in world.pods_by_owner.get(job.pk, []) if p.active]
    if world.quiet(job, pods):
        return
    status = dict(job.status)
    conditions = list(status.get("conditions") or [])
    memo = job.memo
    ref = f"TrainJob/{job.name}"
    if not has_condition(conditions, "Created"):
        conditions.append(condition("Created", *CREATED, world.now))
        memo["start"] = rfc3339(world.now)
        world.dirty(job)
    if job.plan.get("suspend"):
        conditions = set_condition(conditions, "Suspended", "True", *SUSPENDED, world.now)
        _set(world, job, status, conditions, suspended=True)
        return
    if has_condition(conditions, "Suspended"):
        conditions = set_condition(conditions, "Suspended", "False", *RESUMED, world.now)
    ended = world.finished.get(job.pk, [])
    failed = [p for p in ended if p.phase == "Failed"]
    done = _succeeded(job, ended)
    if done != (memo.get("succeeded") or {}):
        memo["succeeded"] = done
        world.dirty(job)
    deadline = job.plan.get("deadline")
    final = None
    disrupted = [p for p in failed if p.disruption] if job.plan.get("fail_on_disruption") else []
    if disrupted:
        # The runtime's FailJobSet rule: a disrupted node fails the set at once, its pods kept to say why.
        final = ("Failed", DISRUPTED[0], f"{DISRUPTED[1]} (Job {_first_failed_job(job, disrupted)}: "
                                         f"{disrupted[0].disruption})")
    elif failed:
        restarts = int(memo.get("restarts", 0))
        if restarts < int(job.plan.get("restarts", 0)):
            # JobSet's failure policy: the whole set again, new Jobs and pods (the old ones go with their Jobs).
            for pod in pods:
                kill(world, pod, job)
            memo["restarts"], memo["succeeded"] = restarts + 1, {}
            world.reset_owners.add(job.pk)
            world.pods_by_owner[job.pk] = []
            pods = []
            world.event(job, ref, "Warning", "Restarting", f"restarting the JobSet (restart {restarts + 1} of "
                        f"{job.plan['restarts']}): Job {_first_failed_job(job, failed)} failed")
            world.dirty(job)
        else:
            reason, message = MAX_RESTARTS if job.plan.get("restarts") else FAILED_JOBS
            final = ("Failed", reason, f"{message} (first failed job: {_first_failed_job(job, failed)})")
    elif _complete(job, done):
        final = ("Complete", *COMPLETED)
    elif deadline is not None and world.now >= parse_rfc3339(memo["start"]) + timedelta(seconds=int(deadline)):
        final = ("Failed", *DEADLINE)
    if final:
        kind, reason, message = final
        for pod in pods:
            remove(world, pod, job)  # a finished JobSet deletes its active Jobs; failed pods stay for their reasons
        conditions = set_condition(conditions, kind, "True", reason, message, world.now)
        world.event(job, ref, "Normal" if kind == "Complete" else "Warning", reason, message)
        job.done = True
        world.dirty(job)
    elif not pods:
        specs = [(role, index, pod_name(job, role, index))
                 for role, plan in enumerate(job.plan["pods"]) for index in range(plan["count"])]
        create_pods(world, job, specs, ref)
    _set(world, job, status, conditions, failed=failed)


def _set(world: World, job: ObjRow, status: dict, conditions: list[dict], *, suspended: bool = False,
         failed: list[PodRow] = ()) -> None:
    """The status: the conditions, and each replicated job's one Job as JobSet counts it."""
    live = [p for p in world.pods_by_owner.get(job.pk, []) if p.active]
    done = job.memo.get("succeeded") or {}
    jobs = []
    for role, plan in enumerate(job.plan["pods"]):
        mine = [p for p in live if p.role == role]
        ok = done.get(plan["role"], 0) >= plan["count"]
        bad = any(p.role == role for p in failed)
        jobs.append({"name": plan["role"], "active": int(bool(mine) and not bad),
                     "ready": int(len(mine) + done.get(plan["role"], 0) >= plan["count"]
                                  and all(p.phase == "Running" for p in mine) and bool(mine)),
                     "succeeded": int(ok), "failed": int(bad), "suspended": int(suspended)})
    status["conditions"] = conditions
    status["jobsStatus"] = jobs
    world.set_status(job, status)
