"""The Deployment controller (apps/v1) with its ReplicaSet: pods brought to the replica target
(fixed, or the HPA's when a ScaledObject targets the Deployment, see
:mod:`sandbox.controllers.scaledobject`), old-template pods replaced, and the status a real
controller writes (replica counts; Available, Progressing with ``progressDeadlineSeconds``,
ReplicaFailure on a quota denial).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sandbox.controllers import scaledobject
from sandbox.controllers.kubelet import pod_ready, remove
from sandbox.controllers.quota import create_pods
from sandbox.names import name_suffix, replicaset_name
from sandbox.timestamps import parse_rfc3339, rfc3339
from sandbox.world import STAGE_READY, ObjRow, PodRow, World

#: Deployment progressDeadlineSeconds default.
PROGRESS_DEADLINE = 600


def reconcile(world: World, dep: ObjRow) -> None:
    template_hash = dep.plan["pods"][0]["hash"]
    scaled = world.scaled.get((dep.namespace, dep.name))
    if scaled is not None:
        desired = scaledobject.replica_target(world, scaled, dep)
    else:
        desired = dep.plan.get("replicas")
        desired = 1 if desired is None else int(desired)
    pods = [p for p in world.pods_by_owner.get(dep.pk, []) if p.active]
    if (dep.pk not in world.attention and desired == dep.replicas == len(pods)
            and all(p.stage == STAGE_READY and p.template_hash == template_hash for p in pods)
            and not dep.memo.get("failed_create")):
        return  # every replica ready and nothing changed: the stored status still holds
    sync_pods(world, dep, desired, pods)


def sync_pods(world: World, dep: ObjRow, desired: int, pods: list[PodRow]) -> None:
    """Scale the ReplicaSet to ``desired`` pods of the current template, then write the status."""
    plan = dep.plan["pods"][0]
    rs = replicaset_name(dep.name, plan["hash"])
    if desired != dep.replicas:
        verb = "up" if desired > dep.replicas else "down"
        world.event(dep, f"Deployment/{dep.name}", "Normal", "ScalingReplicaSet",
                    f"Scaled {verb} replica set {rs} from {dep.replicas} to {desired}")
        dep.replicas = desired
        world.dirty(dep)
    for pod in [p for p in pods if p.template_hash != plan["hash"]]:
        remove(world, pod, dep)  # the template changed: replace old pods
        pods.remove(pod)
    while len(pods) > desired:
        pod = max(pods, key=lambda p: (p.created_at, p.name))
        remove(world, pod, dep)
        pods.remove(pod)
    seq = int(dep.memo.get("seq", 0))
    for _ in range(desired - len(pods)):
        name = f"{rs}-{name_suffix(dep.uid, seq)}"
        if not create_pods(world, dep, [(0, 0, name)], f"ReplicaSet/{rs}"):
            break
        seq += 1
    if seq != dep.memo.get("seq", 0):
        dep.memo["seq"] = seq
        world.dirty(dep)
    live = [p for p in world.pods_by_owner.get(dep.pk, []) if p.active]
    ready = sum(1 for p in live if pod_ready(p, plan, world.now))
    status: dict[str, Any] = {"observedGeneration": dep.generation}
    if live:
        status["replicas"] = len(live)
        status["updatedReplicas"] = len(live)
    if ready:
        status["readyReplicas"] = ready
        status["availableReplicas"] = ready
    if len(live) - ready:
        status["unavailableReplicas"] = max(desired, len(live)) - ready
    available = ready >= desired - 1 if desired else True  # maxUnavailable 1
    # Progress = more ready replicas (or a new target); none for progressDeadlineSeconds
    # (600s by default) and the Deployment controller reports ProgressDeadlineExceeded.
    if "progress" not in dep.memo or ready > int(dep.memo.get("ready", 0)) or desired != dep.memo.get("desired"):
        dep.memo.update(progress=rfc3339(world.now), ready=ready, desired=desired)
        world.dirty(dep)
    elif ready < int(dep.memo.get("ready", 0)):
        # A replica went away (or went unready: its engine died, sandbox.engines): progress is measured from
        # here, not from the last progress, which may be long past (it was stable).
        dep.memo.update(progress=rfc3339(world.now), ready=ready)
        world.dirty(dep)
    stalled = (ready < desired
               and world.now - parse_rfc3339(dep.memo["progress"]) > timedelta(seconds=PROGRESS_DEADLINE))
    if stalled:
        progressing = ("False", "ProgressDeadlineExceeded", f'ReplicaSet "{rs}" has timed out progressing.')
    elif ready >= desired:
        progressing = ("True", "NewReplicaSetAvailable", f'ReplicaSet "{rs}" has successfully progressed.')
    else:
        progressing = ("True", "ReplicaSetUpdated", f'ReplicaSet "{rs}" is progressing.')
    old = {c["type"]: c for c in dep.status.get("conditions") or []}
    conditions = [
        _condition(old, "Available", "True" if available else "False",
                   "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                   "Deployment has minimum availability." if available
                   else "Deployment does not have minimum availability.", world.now),
        _condition(old, "Progressing", *progressing, world.now),
    ]
    if dep.memo.get("failed_create"):
        conditions.append(_condition(old, "ReplicaFailure", "True", "FailedCreate",
                                     dep.memo["failed_create"].removeprefix("Error creating: "), world.now))
    status["conditions"] = conditions
    world.set_status(dep, status)


def _condition(old: dict[str, dict], type_: str, status: str, reason: str, message: str, now: datetime) -> dict:
    """A Deployment condition; its transition time holds while its status does."""
    previous = old.get(type_)
    since = previous["lastTransitionTime"] if previous and previous.get("status") == status else rfc3339(now)
    updated = previous.get("lastUpdateTime", since) if previous and previous.get("reason") == reason else rfc3339(now)
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastUpdateTime": updated,
            "lastTransitionTime": since}
