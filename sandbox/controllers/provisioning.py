"""ProvisioningRequests (autoscaling.x-k8s.io/v1) of the ``best-effort-atomic-scale-up`` class, as Cluster
Autoscaler handles them for a pool of mode ``atomic``: all of a request's nodes or none.

A request is ``Accepted`` when first seen. Its pod sets (their PodTemplates' GPU requests, nodeSelector, node
affinity and tolerations) are placed on the pool's ready nodes' free units that no other request booked, and
the pods left over need new nodes (:func:`cluster.pools.nodes_needed`, :func:`cluster.pools.new_nodes`). More
than the pool's ``max`` (or ``limit_units``) allows: ``Failed`` at once. Otherwise the request's own seeded
draws (:func:`request_rng`: the same request always gets the same story) give each new node its provisioning
delay (:func:`sandbox.pools.provisioning_delay`), and say whether the cloud fails the scale-up
(``failure_probability``: ``Failed`` when its first node would have come up, every node released, none ever
ready) and whether it takes the capacity back once provisioned (``revoke_probability``: ``BookingExpired`` on the
next tick, before any pod could bind). The nodes exist as provisioning and become ready at their times;
``Provisioned`` is True, its ``lastTransitionTime`` the last node's, only when all are ready.

The booked nodes are kept for pods whose ``autoscaling.x-k8s.io/consume-provisioning-request`` annotation names
the request (the scheduler binds them there and nowhere else, and no other pod there): the booking ends once all
its pods are bound, or ``ValidUntilSeconds`` (its parameter; 600 by default) after ``Provisioned``, with
``BookingExpired`` when none was bound by then. A released node is an ordinary idle node (scale-down takes it
after its unneeded minutes). A request deleted (with its workload) releases its nodes too.

A request of the atomic class whose pods go to a pool of mode ``any`` is ``Provisioned`` at once, booking
nothing: that pool grows node by node for the pods themselves when they are pending. A request of another class
is left as it is (no condition), as a Cluster Autoscaler without that class leaves it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from cluster.pools import ANY, ATOMIC_CLASS, new_nodes, nodes_needed
from sandbox.controllers.poolnodes import ask, units_used
from sandbox.models import SimNode, SimObject
from sandbox.pools import LivePool, provisioning_delay
from sandbox.scheduler import filter_node
from sandbox.simulation import stable_int
from sandbox.timestamps import parse_rfc3339, rfc3339
from sandbox.world import ObjRow, World

REF = "ProvisioningRequest/{name}"
#: The phases of a request in its memo: waiting for its nodes, provisioned (booked), over (done).
PROVISIONING, PROVISIONED, OVER = "provisioning", "provisioned", "over"


def request_rng_for(cluster: str, namespace: str, name: str, uid: str) -> random.Random:
    """The draws of one request: seeded by its cluster, namespace, name and uid (the same request, the same
    story): first each new node's delay, in order, then whether it fails, then whether it is revoked."""
    return random.Random(stable_int("provisioning-request", cluster, namespace, name, uid))


def request_rng(world: World, request: ObjRow) -> random.Random:
    return request_rng_for(world.cluster, request.namespace, request.name, request.uid)


def reconcile(world: World) -> None:
    live = set()
    for request in world.requests:
        key = f"{request.namespace}/{request.name}"
        live.add(key)
        if request.plan.get("class") == ATOMIC_CLASS:
            _reconcile(world, request, key)
    for row in list(world.pool_nodes.values()):
        if row.request and row.request not in live:  # its request is gone: deleted with its workload
            _release(world, row)


def _reconcile(world: World, request: ObjRow, key: str) -> None:
    memo = dict(request.memo or {})
    phase = memo.get("phase")
    if phase is None:
        _set(world, request, "Accepted", "Accepted", "The ProvisioningRequest was accepted.")
        _first_sight(world, request, key, memo)
    elif phase == PROVISIONING:
        _provisioning(world, request, key, memo)
    elif phase == PROVISIONED:
        _booked(world, request, key, memo)
    if memo != (request.memo or {}):
        request.memo = memo
        request.done = memo.get("phase") == OVER
        world.dirty(request)


@dataclass
class _PodSet:
    name: str
    count: int
    plan: dict


def _pod_sets(world: World, request: ObjRow) -> tuple[list[_PodSet], str]:
    """The request's pod sets with their PodTemplates' pod plans, or the words of what is missing."""
    names = [name for name, _ in request.plan.get("sets") or []]
    found = dict(SimObject.objects.filter(cluster=world.cluster, resource_kind="PodTemplate",
                                          namespace=request.namespace, name__in=names).values_list("name", "plan"))
    missing = [name for name in names if name not in found]
    if missing:
        return [], f'podtemplates "{missing[0]}" not found in namespace {request.namespace}'
    return [_PodSet(name, int(count), found[name]["pod"]) for name, count in request.plan["sets"]], ""


def _pool_of(world: World, plan: dict) -> LivePool | None:
    """The elastic pool whose new node would take a pod of ``plan`` (its GPU resource, labels and taints)."""
    for pool in world.pools.values():
        template = pool.pool.template
        if plan["req"].get(pool.pool.resource, 0) > 0 and not filter_node(plan, template, template.allocatable):
            return pool
    return None


def _first_sight(world: World, request: ObjRow, key: str, memo: dict) -> None:
    sets, missing = _pod_sets(world, request)
    if missing:
        _fail(world, request, memo, "PodTemplateNotFound", missing, world.now)
        return
    per_pool: dict[str, list[_PodSet]] = {}
    for podset in sets:
        pool = _pool_of(world, podset.plan)
        if pool is None:
            if any(podset.plan["req"].get(r, 0) > 0 for r in podset.plan["req"] if r.startswith("nvidia.com/")):
                _fail(world, request, memo, "NotProvisioned",
                      f"no elastic pool of cluster {world.cluster} can run pod set {podset.name}", world.now)
                return
            continue  # no GPU: any node runs it
        per_pool.setdefault(pool.prefix, []).append(podset)
    if any(world.pools[prefix].settings.mode == ANY for prefix in per_pool) or not per_pool:
        memo.update(phase=OVER, pools=sorted(per_pool))
        _set(world, request, "Provisioned", "Provisioned",
             "Nothing to book: the pool adds nodes one by one for the pods as they come (mode any).")
        return
    existing, new = {}, {}
    for prefix, podsets in per_pool.items():
        existing[prefix], new[prefix] = _place(world, world.pools[prefix], podsets)
        pool = world.pools[prefix]
        have = sum(1 for row in world.pool_nodes.values() if row.pool == prefix)
        if have + new[prefix] > pool.most_nodes:
            limit = f", {pool.settings.limit_units} units (limit_units)" if pool.settings.limit_units is not None else ""
            _fail(world, request, memo, "NotProvisioned",
                  f"the request needs {new[prefix]} new node(s) of pool {prefix}, which has {have} of at most "
                  f"{pool.settings.max_nodes} (max{limit}): it can never be provisioned", world.now)
            return
    rng = request_rng(world, request)
    booked: list[str] = []
    asked: list[str] = []  # of those, the nodes asked for it (the others were there, idle)
    for prefix in sorted(per_pool):
        pool = world.pools[prefix]
        delays = [provisioning_delay(rng, pool.settings.delay_median_seconds, pool.settings.delay_tail_seconds)
                  for _ in range(new[prefix])]
        failed = rng.random() < pool.settings.failure_probability
        revoked = rng.random() < pool.settings.revoke_probability
        fails_at = world.now + timedelta(seconds=min(delays)) if failed and delays else None
        for row in existing[prefix]:
            row.request, row.idle_since, row.unneeded_at = key, None, None
            world.pool_node_changed(row)
            booked.append(row.node)
        for delay in delays:
            row = ask(world, pool, delay, request=key, fails_at=fails_at)
            booked.append(row.node)
            asked.append(row.node)
        memo["failed"] = memo.get("failed") or (rfc3339(fails_at) if fails_at else None)
        memo["revoked"] = memo.get("revoked") or revoked
    memo.update(phase=PROVISIONING, nodes=booked, asked=asked, new=sum(new.values()), pods=sum(s.count for s in sets if _pool_of(world, s.plan)),
                pools=sorted(per_pool))
    _provisioning(world, request, key, memo)


def _place(world: World, pool: LivePool, podsets: list[_PodSet]) -> tuple[list[SimNode], int]:
    """The pool's ready unbooked nodes the pod sets fit on (first fit), and how many new nodes the rest need."""
    used = units_used(world, pool.pool.resource)
    candidates = [row for row in world.pool_nodes.values()
                  if row.pool == pool.prefix and row.state == SimNode.READY and not row.request]
    free = {row.node: pool.pool.units_per_node - used.get(row.node, 0) for row in candidates}
    chosen: list[SimNode] = []
    needed = 0
    for podset in podsets:
        units = podset.plan["req"][pool.pool.resource]
        missing = nodes_needed(list(free.values()), units, podset.count)
        for _ in range(podset.count - missing):
            row = next(r for r in candidates if free[r.node] >= units)
            free[row.node] -= units
            if row not in chosen:
                chosen.append(row)
        needed += new_nodes(missing, pool.pool.units_per_node, units)
    return chosen, needed


def _provisioning(world: World, request: ObjRow, key: str, memo: dict) -> None:
    failed = memo.get("failed")
    if failed and world.now >= parse_rfc3339(failed):
        pool = world.pools[memo["pools"][0]]
        _fail(world, request, memo, "FailedToProvision", _cloud_failure(pool, memo.get("new", 0)),
              parse_rfc3339(failed))
        return
    rows = [world.pool_nodes.get(name) for name in memo["nodes"]]
    if any(row is None for row in rows):
        _fail(world, request, memo, "FailedToProvision", "a booked node is gone before it came up", world.now)
        return
    if all(row.state == SimNode.READY for row in rows):
        at = max([row.ready_at for row in rows], default=world.now)
        memo.update(phase=PROVISIONED, provisioned=rfc3339(at))
        _set(world, request, "Provisioned", "Provisioned",
             f"Capacity is provisioned: {len(rows)} node(s) booked for {memo['pods']} pod(s).", at)


def _booked(world: World, request: ObjRow, key: str, memo: dict) -> None:
    rows = [world.pool_nodes[name] for name in memo["nodes"] if name in world.pool_nodes]
    booked = {row.node for row in rows if row.request == key}
    bound = sum(1 for pods in world.pods_by_owner.values() for pod in pods
                if pod.active and pod.node in booked and pod.namespace == request.namespace
                and world.plan_of(pod).get("consume") == request.name)
    provisioned = parse_rfc3339(memo["provisioned"])
    if memo.get("revoked") and not bound and world.now > provisioned:
        for row in rows:  # the nodes asked for it go back to the cloud; those that were there stay, released
            if row.node in memo.get("asked", ()) and row.request == key:
                world.remove_pool_node(row.node)
            else:
                _release(world, row)
        memo["phase"] = OVER
        _set(world, request, "BookingExpired", "CapacityRevoked",
             "The cloud provider took the provisioned capacity back before it was used.")
        return
    if bound >= memo["pods"] or world.now >= provisioned + timedelta(seconds=int(request.plan.get("valid") or 0)):
        for row in rows:
            _release(world, row)
        memo["phase"] = OVER
        if not bound:
            _set(world, request, "BookingExpired", "BookingExpired",
                 f"No pod consumed the capacity within {request.plan.get('valid')} seconds (ValidUntilSeconds): "
                 "the booking is released.")


def _release(world: World, row: SimNode) -> None:
    if row.request:
        row.request = ""
        world.pool_node_changed(row)


def _fail(world: World, request: ObjRow, memo: dict, reason: str, message: str, at: datetime) -> None:
    """``Failed``: the request's nodes are released (those not up yet are never built: none is billed)."""
    for name in memo.get("nodes") or []:
        row = world.pool_nodes.get(name)
        if row is None:
            continue
        if row.state == SimNode.PROVISIONING:
            world.remove_pool_node(name)
        else:
            _release(world, row)
    memo["phase"] = OVER
    _set(world, request, "Failed", reason, message, at, warning=True)


def _cloud_failure(pool: LivePool, nodes: int) -> str:
    """What a cloud answers when it cannot build the nodes (a zone out of the accelerator)."""
    labels = pool.pool.template.labels
    where = labels.get("topology.kubernetes.io/region", "its region")
    return (f"Scale-up of node group {pool.prefix} by {nodes} node(s) failed: instance type "
            f"{labels.get('node.kubernetes.io/instance-type', '?')} in {where}: ZONE_RESOURCE_POOL_EXHAUSTED: "
            "The zone does not have enough resources available to fulfill the request. Atomic scale-up: "
            "no node kept.")


def _set(world: World, request: ObjRow, kind: str, reason: str, message: str, at: datetime | None = None,
         warning: bool = False) -> None:
    """Condition ``kind`` True (metav1.Condition: its transition time ``at``), and an event saying it."""
    at = at or world.now
    status = dict(request.status or {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != kind]
    conditions.append({"type": kind, "status": "True", "reason": reason, "message": message,
                       "lastTransitionTime": rfc3339(at), "observedGeneration": request.generation})
    status["conditions"] = conditions
    world.set_status(request, status)
    world.event(request, REF.format(name=request.name), "Warning" if warning else "Normal", reason, message, at)
