"""The scheduler step: every unbound pod is bound to a node that fits it (a PyTorchJob's pods, and a
TrainJob's whose runtime names a gang scheduler, as one gang, all or nothing), oldest first, or gets
kube-scheduler's ``FailedScheduling`` message (once per change). The filters and messages are :class:`sandbox.scheduler.Scheduler`'s.

A pod bound to a shared node (:class:`sandbox.inventory.GpuSharing`) for one replica of its shared
resource is given a physical GPU, as the device plugin allocates one: the GPU with the most
replicas in use that still has one free (:func:`sandbox.sharing.pack`).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from sandbox.models import SimObject
from sandbox.scheduler import Placed, Scheduler
from sandbox.sharing import pack
from sandbox.simulation import schedule_delay
from sandbox.world import STAGE_BOUND, ObjRow, PodRow, World, add_requests

#: The label the API server puts on every namespace (namespaceSelector terms often select by it).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def schedule(world: World) -> None:
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    waiting: list[tuple[ObjRow, list[PodRow]]] = []
    # Pods bound per node, for anti-affinity: tracked only when some pod has anti-affinity terms.
    terms = [term for owner in world.owners.values() for plan in owner.plan["pods"] for term in plan.get("anti", ())]
    anti = bool(terms)
    placed: dict[str, list[Placed]] | None = defaultdict(list) if anti else None
    gpus = _gpus_in_use(world)
    for owner_id, pods in world.pods_by_owner.items():
        owner = world.owners[owner_id]
        deleting = owner.delete_at is not None  # a pod being deleted is never bound
        unbound = []
        for pod in pods:
            if not pod.active:
                continue
            if pod.node:
                plan = world.plan_of(pod)
                add_requests(used[pod.node], plan, +1)
                if placed is not None:
                    placed[pod.node].append((pod.namespace, plan.get("lbl") or {}, plan.get("anti") or []))
            elif not deleting and not _held(world, pod):
                unbound.append(pod)
        if not unbound:
            continue
        if owner.resource_kind == "PyTorchJob" or (owner.resource_kind == "TrainJob" and owner.plan.get("gang")):
            waiting.append((owner, unbound))  # a gang: all or nothing (a TrainJob's runtime's podGroupPolicy)
        else:
            waiting.extend((owner, [pod]) for pod in unbound)
    selecting = any(term["nss"] for term in terms)  # a term selects namespaces by their labels
    booked = {row.node: row.request for row in world.pool_nodes.values() if row.request}
    scheduler = Scheduler(world.nodes, used, placed, _namespace_labels(world) if selecting else None, booked)
    waiting.sort(key=lambda item: (item[1][0].created_at, item[0].pk, item[1][0].name))
    for owner, pods in waiting:
        chosen, message = scheduler.place([owner.plan["pods"][p.role] for p in pods], owner.namespace)
        for i, pod in enumerate(pods):
            if chosen:
                pod.node, pod.scheduled_at, pod.stage, pod.message = chosen[i], world.now, STAGE_BOUND, ""
                _allocate(world, pod, gpus)
                ref = f"Pod/{pod.name}"
                world.event(pod, ref, "Normal", "Scheduled",
                            f"Successfully assigned {pod.namespace}/{pod.name} to {chosen[i]}")
                world.event(pod, ref, "Normal", "Pulling", f'Pulling image "{owner.plan["pods"][pod.role]["img"]}"')
                world.touch(pod)
            elif pod.message != message:
                pod.message = message
                world.event(pod, f"Pod/{pod.name}", "Warning", "FailedScheduling", message)
                world.touch(pod)


def _held(world: World, pod: PodRow) -> bool:
    """Whether the pod's scripted scheduling delay (``SLIPWAY_SIM_SCHEDULE_SECONDS``: a node being added, a
    busy scheduler) is still running: it is not even tried until then."""
    delay = schedule_delay(world.plan_of(pod))
    return bool(delay) and world.now < pod.created_at + timedelta(seconds=delay)


def _gpus_in_use(world: World) -> dict[str, list[int]]:
    """Replicas in use per physical GPU of each shared node. A bound pod of a shared resource without
    a GPU yet (bound before the sandbox tracked them) is given one now."""
    gpus = {name: [0] * sharing.gpus for name, sharing in world.sharing.items()}
    if not gpus:
        return gpus
    missing = []
    for pods in world.pods_by_owner.values():
        for pod in pods:
            if pod.active and pod.node in gpus:
                if pod.gpu is not None and pod.gpu < len(gpus[pod.node]):
                    gpus[pod.node][pod.gpu] += 1
                else:
                    missing.append(pod)
    for pod in missing:
        _allocate(world, pod, gpus)
    return gpus


def _allocate(world: World, pod: PodRow, gpus: dict[str, list[int]]) -> None:
    """The device plugin's allocation: one replica of one physical GPU for a pod of the node's shared
    resource (a request above one is refused by the kubelet, :mod:`sandbox.controllers.kubelet`)."""
    sharing = world.sharing.get(pod.node)
    if sharing is None or world.plan_of(pod)["req"].get(sharing.resource, 0) != 1:
        return
    gpu = pack(gpus[pod.node], sharing.replicas)
    if gpu is not None:
        gpus[pod.node][gpu] += 1
        pod.gpu = gpu
        world.touch(pod)


def _namespace_labels(world: World) -> dict[str, dict[str, str]]:
    """Every namespace's labels (with the one the API server adds), for namespaceSelector terms."""
    rows = SimObject.objects.filter(cluster=world.cluster, resource_kind="Namespace").values_list("name", "manifest")
    return {name: {**((manifest.get("metadata") or {}).get("labels") or {}), NAMESPACE_NAME_LABEL: name}
            for name, manifest in rows}
