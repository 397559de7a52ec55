"""ResourceQuota: what each namespace's active pods use, the API server's admission of new pods
against the namespace's quotas (all-or-nothing, ``FailedCreate`` when denied), and the quotas'
``status.used``.

Usage is counted once per tick (:func:`compute_usage`, after the kubelet step) and then kept
current as pods are created (:func:`create_pods`) and stop (:func:`release`).
"""

from __future__ import annotations

from collections import defaultdict

from sandbox.bulk import new as new_record
from sandbox.models import SimPod
from sandbox.quantity import format_units
from sandbox.world import ObjRow, PodRow, World, add_requests


def release(world: World, pod: PodRow) -> None:
    """An active pod stops counting against its namespace's quota (once usage is known)."""
    if world.usage is not None and pod.active:
        add_requests(world.usage[pod.namespace], world.plan_of(pod), -1)


def compute_usage(world: World) -> None:
    world.usage = defaultdict(lambda: defaultdict(int))
    for pods in world.pods_by_owner.values():
        for pod in pods:
            if pod.active:
                add_requests(world.usage[pod.namespace], world.plan_of(pod), +1)


def quota_denial(world: World, namespace: str, plans: list[dict], pod_name: str) -> str:
    """The API server's quota error for creating these pods, or "" when they fit."""
    wanted: dict[str, int] = defaultdict(int)
    for plan in plans:
        add_requests(wanted, plan, +1)
    used = world.usage[namespace]
    for quota in world.quotas.get(namespace, []):
        over = []
        for key, hard in sorted(quota.plan.get("hard", {}).items()):
            resource = key.removeprefix("requests.").removeprefix("limits.")
            if wanted.get(resource, 0) and used.get(resource, 0) + wanted[resource] > hard:
                over.append((key, resource, hard))
        if over:
            fmt = lambda values: ",".join(f"{k}={format_units(r, v)}" for k, r, v in values)  # noqa: E731
            requested = fmt([(k, r, wanted[r]) for k, r, _ in over])
            in_use = fmt([(k, r, used.get(r, 0)) for k, r, _ in over])
            limited = fmt(over)
            return (f'pods "{pod_name}" is forbidden: exceeded quota: {quota.name}, requested: {requested}, '
                    f"used: {in_use}, limited: {limited}")
    return ""


def create_pods(world: World, owner: ObjRow, specs: list[tuple[int, int, str]], failed_ref: str) -> bool:
    """Create pods (role, index, name) all-or-nothing within quota; FailedCreate when denied."""
    plans = [owner.plan["pods"][role] for role, _, _ in specs]
    denial = quota_denial(world, owner.namespace, plans, specs[0][2])
    if denial:
        message = f"Error creating: {denial}"
        if owner.memo.get("failed_create") != message:
            owner.memo["failed_create"] = message
            world.event(owner, failed_ref, "Warning", "FailedCreate", message)
            world.dirty(owner)
        return False
    if owner.memo.pop("failed_create", None):
        world.dirty(owner)
    for (role, index, name), plan in zip(specs, plans, strict=True):
        pod = new_record(SimPod, cluster=world.cluster, owner_id=owner.pk, namespace=owner.namespace, name=name,
                         workload=owner.workload, role=role, index=index, template_hash=plan["hash"],
                         created_at=world.now)
        world.new_pods.append(pod)
        world.pods_by_owner[owner.pk].append(pod)
        add_requests(world.usage[owner.namespace], plan, +1)
        world.event(owner, failed_ref, "Normal", "SuccessfulCreate", f"Created pod: {name}")
    return True


def report_status(world: World) -> None:
    """Every quota's ``status``: its hard limits and what its namespace uses, in the API's units."""
    for namespace, quotas in world.quotas.items():
        for quota in quotas:
            used = {k: format_units(k.removeprefix("requests.").removeprefix("limits."),
                                    world.usage[namespace].get(k.removeprefix("requests.").removeprefix("limits."), 0))
                    for k in quota.plan.get("hard", {})}
            hard = {k: format_units(k.removeprefix("requests.").removeprefix("limits."), v)
                    for k, v in quota.plan.get("hard", {}).items()}
            world.set_status(quota, {"hard": hard, "used": used})
