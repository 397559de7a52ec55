"""The Kubeflow training operator's PyTorchJob controller: a gang of Master and Worker pods
created together, restarted together when one fails (up to the backoff limit), ended when the
Master succeeds, the limit is reached, or ``activeDeadlineSeconds`` passes.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from sandbox.controllers.conditions import condition, has_condition, set_condition
from sandbox.controllers.kubelet import kill, remove, terminate
from sandbox.controllers.quota import create_pods
from sandbox.timestamps import parse_rfc3339, rfc3339
from sandbox.world import ObjRow, World


def keep_previous_runs(world: World, job: ObjRow, restarts: int) -> None:
    """Remember how each replica's run before a restart went, for the pods that replace them.

    The sandbox restarts a PyTorchJob's gang with new pods of the same names; a real cluster
    restarts each replica's container in place (``restartPolicy: OnFailure``), so the
    replacement shows what the kubelet would: ``restartCount`` and ``lastState.terminated``,
    and its previous log (:meth:`sandbox.backend.SandboxBackend.logs` with ``previous``).
    Only the run just before is kept, as the kubelet keeps one.
    """
    previous = dict(job.memo.get("previous") or {})
    for pod in world.pods_by_owner.get(job.pk, []):
        if pod.started_at is not None:
            previous[pod.name] = {"restarts": restarts, "started": rfc3339(pod.started_at),
                                  "finished": rfc3339(pod.finished_at or world.now), "reason": pod.reason or "Error",
                                  "code": pod.exit_code if pod.exit_code is not None else 1}
    job.memo["previous"] = previous


def reconcile(world: World, job: ObjRow) -> None:
    pods = [p for p in world.pods_by_owner.get(job.pk, []) if p.active]
    if world.quiet(job, pods):
        return
    status = dict(job.status)
    conditions = list(status.get("conditions") or [])
    memo = job.memo
    ref = f"PyTorchJob/{job.name}"
    key = f"PyTorchJob {job.name}"
    if not conditions:
        conditions.append(condition("Created", "PyTorchJobCreated", f"{key} is created.", world.now))
        status["startTime"] = rfc3339(world.now)
        memo["start"] = rfc3339(world.now)
        world.dirty(job)
    ended = world.finished.get(job.pk, [])
    failed = [p for p in ended if p.phase == "Failed"]
    master_done = any(p.phase == "Succeeded" and job.plan["pods"][p.role]["role"] == "Master" for p in ended)
    started = parse_rfc3339(memo["start"])
    deadline = job.plan.get("deadline")
    final = None
    if failed:
        roles = defaultdict(int)
        for p in failed:
            roles[job.plan["pods"][p.role]["role"]] += 1
        what = ", ".join(f"{n} {role} replica(s)" for role, n in sorted(roles.items()))
        restarts = int(memo.get("restarts", 0))
        if restarts < int(job.plan.get("backoff", 6)):
            memo["restarts"] = restarts + 1
            for pod in pods:
                kill(world, pod, job)
            keep_previous_runs(world, job, restarts + 1)
            world.reset_owners.add(job.pk)
            world.pods_by_owner[job.pk] = []
            pods = []
            conditions = set_condition(conditions, "Running", "False", "PyTorchJobRestarting", "", world.now)
            conditions = set_condition(conditions, "Restarting", "True", "PyTorchJobRestarting",
                                       f"{key} is restarting because {what} failed.", world.now)
            world.event(job, ref, "Warning", "PyTorchJobRestarting", f"{key} is restarting because {what} failed.")
            world.dirty(job)
        else:
            final = ("Failed", "PyTorchJobFailed", f"{key} is failed because {what} failed.")
    elif master_done:
        final = ("Succeeded", "PyTorchJobSucceeded", f"{key} is successfully completed.")
    elif deadline is not None and world.now >= started + timedelta(seconds=int(deadline)):
        final = ("Failed", "DeadlineExceeded", f"{key} has failed because it was active longer than specified "
                 "deadline")
    if final:
        kind, reason, message = final
        for pod in pods:
            if kind == "Succeeded" and pod.phase == "Running":
                terminate(world, pod, "Succeeded", "Completed", 0, world.now)
            else:
                remove(world, pod, job)  # cleanPodPolicy Running: the failed pods stay, the rest go
        conditions = set_condition(conditions, "Running", "False", reason, message, world.now)
        conditions = set_condition(conditions, kind, "True", reason, message, world.now)
        status["completionTime"] = rfc3339(world.now)
        world.event(job, ref, "Normal" if kind == "Succeeded" else "Warning", reason, message)
        job.done = True
        world.dirty(job)
    elif not pods:
        specs = [
            (role, index, f"{job.name[:40]}-{plan['role'].lower()}-{index}")
            for role, plan in enumerate(job.plan["pods"]) for index in range(plan["count"])
        ]
        create_pods(world, job, specs, ref)
    live = [p for p in world.pods_by_owner.get(job.pk, []) if p.active]
    if not job.done and live and all(p.phase == "Running" for p in live) and not has_condition(conditions, "Running"):
        conditions = set_condition(conditions, "Restarting", "False", "PyTorchJobRunning", "", world.now)
        conditions = set_condition(conditions, "Running", "True", "PyTorchJobRunning", f"{key} is running.",
                                   world.now)
    replica_statuses: dict[str, dict[str, int]] = {}
    for role, plan in enumerate(job.plan["pods"]):
        mine = [p for p in world.pods_by_owner.get(job.pk, []) if p.role == role]
        entry = {"active": sum(p.active for p in mine)}
        done_ok = sum(p.phase == "Succeeded" for p in mine)
        done_bad = sum(p.phase == "Failed" for p in mine)
        if done_ok:
            entry["succeeded"] = done_ok
        if done_bad:
            entry["failed"] = done_bad
        replica_statuses[plan["role"]] = entry
    status["replicaStatuses"] = replica_statuses
    status["conditions"] = [c for c in conditions if not (c["type"] == "Restarting" and c["status"] == "False")]
    world.set_status(job, status)
