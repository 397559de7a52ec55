"""The scheduler step: every unbound pod is bound to a node that fits it (a PyTorchJob's pods as
one gang, all or nothing), oldest first, or gets kube-scheduler's ``FailedScheduling`` message
(once per change). The filters and messages are :class:`sandbox.scheduler.Scheduler`'s.
"""

from __future__ import annotations

from collections import defaultdict

from sandbox.scheduler import Scheduler
from sandbox.world import STAGE_BOUND, ObjRow, PodRow, World, add_requests


def schedule(world: World) -> None:
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    waiting: list[tuple[ObjRow, list[PodRow]]] = []
    for owner_id, pods in world.pods_by_owner.items():
        owner = world.owners[owner_id]
        deleting = owner.delete_at is not None  # a pod being deleted is never bound
        unbound = []
        for pod in pods:
            if not pod.active:
                continue
            if pod.node:
                add_requests(used[pod.node], world.plan_of(pod), +1)
            elif not deleting:
                unbound.append(pod)
        if not unbound:
            continue
        if owner.kind == "PyTorchJob":
            waiting.append((owner, unbound))  # a gang: all or nothing
        else:
            waiting.extend((owner, [pod]) for pod in unbound)
    scheduler = Scheduler(world.nodes, used)
    waiting.sort(key=lambda item: (item[1][0].created_at, item[0].pk, item[1][0].name))
    for owner, pods in waiting:
        chosen, message = scheduler.place([owner.plan["pods"][p.role] for p in pods])
        for i, pod in enumerate(pods):
            if chosen:
                pod.node, pod.scheduled_at, pod.stage, pod.message = chosen[i], world.now, STAGE_BOUND, ""
                ref = f"Pod/{pod.name}"
                world.event(pod, ref, "Normal", "Scheduled",
                            f"Successfully assigned {pod.namespace}/{pod.name} to {chosen[i]}")
                world.event(pod, ref, "Normal", "Pulling", f'Pulling image "{owner.plan["pods"][pod.role]["img"]}"')
                world.touch(pod)
            elif pod.message != message:
                pod.message = message
                world.event(pod, f"Pod/{pod.name}", "Warning", "FailedScheduling", message)
                world.touch(pod)
