"""The elastic pools' autoscaler, one step of the tick (after the workload controllers, before the scheduler):
nodes come up at their drawn times, a pool of mode ``any`` grows for pods the scheduler could not place, every
pool keeps its ``min``, and idle nodes go. ProvisioningRequests (mode ``atomic``) are
:mod:`sandbox.controllers.provisioning`'s, run inside this step once nodes have come up.

* **Coming up**: a provisioning node becomes ready at its ``ready_at`` (drawn when it was asked for,
  :func:`sandbox.pools.provisioning_delay`), or is gone at its ``fails_at`` (the cloud could not build it).
* **Mode any** (Cluster Autoscaler for pending pods): pods the scheduler marked unschedulable (its
  ``FailedScheduling`` message) that a new node of the pool would take, and that the nodes already
  provisioning will not hold, make the pool ask for nodes, one each with its own delay, never beyond ``max``
  (or the pool's ``limit_units``). A pod that consumes a ProvisioningRequest's booking is the request's business.
* **Scale-down**: a ready node with no pod and no booking for the pool's ``unneeded_minutes`` is found unneeded
  by one tick and removed by the next (unneeded + one cycle), highest index first, never below ``min``. Only
  empty nodes go, so no running pod is ever evicted (``karpenter.sh/do-not-disrupt`` and
  ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`` are honoured by construction).
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import timedelta

from cluster.pools import ANY
from sandbox.controllers import provisioning
from sandbox.controllers.poolnodes import ask, node_rng, pods_per_node, units_used
from sandbox.models import SimNode
from sandbox.pools import LivePool, pool_index, provisioning_delay
from sandbox.scheduler import filter_node
from sandbox.simulation import stable_int
from sandbox.timestamps import rfc3339
from sandbox.world import World


def scale(world: World) -> None:
    if not world.pools:
        return
    _come_up(world)
    provisioning.reconcile(world)
    for pool in world.pools.values():
        if pool.settings.mode == ANY:
            _grow_for_pending(world, pool)
        _keep_min(world, pool)
    _scale_down(world)
    world.refresh_nodes()


def _come_up(world: World) -> None:
    for row in list(world.pool_nodes.values()):
        if row.state != SimNode.PROVISIONING:
            continue
        if row.fails_at is not None and world.now >= row.fails_at:
            world.remove_pool_node(row.node)
        elif world.now >= row.ready_at:
            row.state, row.idle_since = SimNode.READY, None if row.request else row.ready_at
            world.pool_node_changed(row)


def _grow_for_pending(world: World, pool: LivePool) -> None:
    """Cluster Autoscaler's scale-up for the pods the scheduler could not place (module docstring)."""
    template, resource = pool.pool.template, pool.pool.resource
    booked = {row.request for row in world.pool_nodes.values() if row.request}
    waiting: list[tuple[int, object]] = []
    for pods in world.pods_by_owner.values():
        for pod in pods:
            if not pod.active or pod.node or not pod.message:
                continue
            plan = world.plan_of(pod)
            units = plan["req"].get(resource, 0)
            if units <= 0 or units > pool.pool.units_per_node:
                continue
            if plan.get("consume") and f"{pod.namespace}/{plan['consume']}" in booked:
                continue
            if filter_node(plan, template, template.allocatable):
                continue  # a new node of this pool would not take it either
            waiting.append((units, pod))
    if not waiting:
        return
    # What the pool's unbooked nodes still hold (those on their way: all their units; those that came up in this
    # tick: what the scheduler has not given yet), then a new node for each pod that still finds none.
    used = units_used(world, resource)
    room = [pool.pool.units_per_node - used.get(row.node, 0) for row in world.pool_nodes.values()
            if row.pool == pool.prefix and not row.request]
    for units, pod in sorted(waiting, key=lambda item: -item[0]):
        slot = next((i for i, free in enumerate(room) if free >= units), None)
        if slot is None:
            row = ask(world, pool, _delay(world, pool, f"{pool.prefix}/{len(room)}"))
            if row is None:
                return  # at its most nodes: the rest wait for room
            _fail_maybe(world, pool, row)
            room.append(pool.pool.units_per_node)
            slot = len(room) - 1
            world.event(pod, f"Pod/{pod.name}", "Normal", "TriggeredScaleUp",
                        f"pod triggered scale-up: [{{{pool.prefix} {len(room) - 1}->{len(room)} "
                        f"(max: {pool.most_nodes})}}]")
        room[slot] -= units


def _delay(world: World, pool: LivePool, key: str) -> float:
    return provisioning_delay(node_rng(world, key), pool.settings.delay_median_seconds, pool.settings.delay_tail_seconds)


def _fail_maybe(world: World, pool: LivePool, row: SimNode) -> None:
    """A node asked for alone fails with the pool's ``failure_probability``, when it would have come up."""
    rng = random.Random(stable_int("fail", world.cluster, row.node, rfc3339(world.now)))
    if rng.random() < pool.settings.failure_probability:
        row.fails_at = row.ready_at


def _keep_min(world: World, pool: LivePool) -> None:
    """A pool below its ``min`` (raised live) asks for the nodes it lacks."""
    have = sum(1 for row in world.pool_nodes.values() if row.pool == pool.prefix)
    for _ in range(pool.settings.min_nodes - have):
        row = ask(world, pool, _delay(world, pool, f"{pool.prefix}/min/{have}"))
        if row is None:
            return
        have += 1


def _scale_down(world: World) -> None:
    busy = pods_per_node(world)
    count: dict[str, int] = defaultdict(int)
    for row in world.pool_nodes.values():
        count[row.pool] += 1
    for row in sorted(world.pool_nodes.values(), key=lambda r: (r.pool, -pool_index(r.node))):
        if row.state != SimNode.READY:
            continue
        if busy.get(row.node) or row.request:
            if row.idle_since is not None or row.unneeded_at is not None:
                row.idle_since = row.unneeded_at = None
                world.pool_node_changed(row)
            continue
        if row.idle_since is None:
            row.idle_since = world.now
            world.pool_node_changed(row)
        pool = world.pools[row.pool]
        if world.now - row.idle_since < timedelta(minutes=pool.settings.unneeded_minutes):
            continue
        if count[row.pool] <= pool.settings.min_nodes:
            continue
        if row.unneeded_at is None:
            row.unneeded_at = world.now  # found unneeded: the next tick removes it
            world.pool_node_changed(row)
        elif world.now > row.unneeded_at:
            world.remove_pool_node(row.node)
            count[row.pool] -= 1
