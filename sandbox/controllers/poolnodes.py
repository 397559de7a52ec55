"""What the autoscaler and the ProvisioningRequest controller share about elastic pools' nodes in a tick:
asking for a node, the draws of a node asked for alone, and what is bound where."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime, timedelta

from sandbox.models import SimNode
from sandbox.pools import LivePool, pool_index
from sandbox.simulation import stable_int
from sandbox.timestamps import rfc3339
from sandbox.world import World


def ask(world: World, pool: LivePool, delay: float, request: str = "", fails_at: datetime | None = None) -> SimNode | None:
    """A new node of ``pool`` (its lowest free index), provisioning from now for ``delay`` seconds (booked by
    ``request``, failing at ``fails_at`` when given); None when the pool is at its most nodes."""
    taken = {pool_index(row.node) for row in world.pool_nodes.values() if row.pool == pool.prefix}
    if len(taken) >= pool.most_nodes:
        return None
    index = next(i for i in range(pool.settings.max_nodes + len(taken) + 1) if i not in taken)
    name = f"{pool.prefix}-{index}"
    row = SimNode(cluster=world.cluster, pool=pool.prefix, node=name, state=SimNode.PROVISIONING, asked_at=world.now,
                  ready_at=world.now + timedelta(seconds=delay), fails_at=fails_at, request=request)
    world.pool_nodes[name] = row
    world.pool_removed.discard(name)
    world.pool_node_changed(row)
    return row


def node_rng(world: World, key: str) -> random.Random:
    """The draws of a node asked for now outside any request: seeded by cluster, ``key`` and time."""
    return random.Random(stable_int("node", world.cluster, key, rfc3339(world.now)))


def pods_per_node(world: World) -> dict[str, int]:
    """Live pods bound per node (pending or running: either keeps its node)."""
    found: dict[str, int] = defaultdict(int)
    for pods in world.pods_by_owner.values():
        for pod in pods:
            if pod.active and pod.node:
                found[pod.node] += 1
    return found


def units_used(world: World, resource: str) -> dict[str, int]:
    """Units of ``resource`` the live pods bound on each node request."""
    found: dict[str, int] = defaultdict(int)
    for pods in world.pods_by_owner.values():
        for pod in pods:
            if pod.active and pod.node:
                found[pod.node] += world.plan_of(pod)["req"].get(resource, 0)
    return found
