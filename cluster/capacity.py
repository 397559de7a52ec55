"""Why work waits for the cluster, in plain words, from the nodes' capacity (pure).

The scheduler says "0/8 nodes are available: 8 Insufficient nvidia.com/gpu"; people want
"waiting for capacity: needs 4× a100-80gb on one node; the largest free block is 2 (node
a100-1)". The raw words stay in the workload's events; :func:`scheduler_message` finds them
for the run page, which keeps them one click away.

With several clusters (docs/design.md "Sharing, preemption, clusters") the same reason names each cluster's largest
free block, best first: "needs 4× h100-80gb on one node; largest free block: 2 on west, 0 on
east" (:func:`clusters_capacity_reason`). Which nodes count is :func:`serves`: the flavor
(:func:`offers`) and the capacity type, spot work on spot nodes only.
"""

from __future__ import annotations

from dataclasses import replace

from cluster.backends.base import ClusterEvent, NodeCapacity
from cluster.manifests.common import SPOT_KEY, SPOT_VALUE, node_selector
from cluster.specs import FlavorSpec

#: How every capacity reason starts: the Capacity page finds the work waiting for the cluster by it.
WAITING_FOR_CAPACITY = "waiting for capacity"


def offers(node: NodeCapacity, flavor: FlavorSpec) -> bool:
    """Whether ``node`` offers ``flavor``: the one rule, for the Capacity page and the waiting reason alike.

    What the Kubernetes scheduler does with the pods Slipway renders: a pod asks for the
    flavor's resource and carries the nodeSelector :func:`cluster.manifests.common.node_selector`
    builds (the GPU product label plus the flavor's node labels), so only a node that has the
    resource *and* every one of those labels can run it. A node that reports no labels matches
    no selector, as on a real cluster: it does not offer the flavor.
    """
    return node.resource_name == flavor.resource_name and all(
        node.labels.get(key) == value for key, value in node_selector(flavor).items())


def serves(node: NodeCapacity, flavor: FlavorSpec, spot: bool) -> bool:
    """Whether ``node`` can run a worker of ``flavor`` asked for as spot work (``spot``) or not.

    It offers the flavor (:func:`offers`) and is a spot node exactly when the work is spot: the
    builders give spot work a required affinity to :data:`~cluster.manifests.common.SPOT_KEY`
    nodes, and those nodes carry a taint only spot work tolerates (deploy/README.md), so a
    node's free GPUs count for one kind of work or the other, never both.
    """
    return offers(node, flavor) and (node.labels.get(SPOT_KEY) == SPOT_VALUE) == spot


def free_blocks(nodes: list[NodeCapacity], units_per_node: int) -> int:
    """How many workers of ``units_per_node`` units each ``nodes`` hold now, several on a node when they fit.

    Each worker is one pod asking for its units on one node; the scheduler binds a gang's pods
    one after another against the running totals (as :mod:`sandbox.scheduler` does), so equal
    blocks pack exactly this many whatever the order.
    """
    return sum(n.free // units_per_node for n in nodes)


def capacity_reason(flavor: FlavorSpec, units_per_node: int, nodes: list[NodeCapacity]) -> str:
    """The plain-words reason a workload of ``units_per_node`` × ``flavor`` per worker cannot be placed."""
    fitting = [n for n in nodes if offers(n, flavor)]
    need = _needs(flavor, units_per_node)
    flavor = flavor.name
    if not fitting:
        return f"{need}; no node offers {flavor}"
    largest = max(fitting, key=lambda n: (n.free, n.node))
    if largest.free == 0:
        return f"{need}; every {flavor} node is full"
    return f"{need}; the largest free block is {largest.free} (node {largest.node})"


def bind(nodes: list[NodeCapacity], flavor: FlavorSpec, units_per_node: int, workers: int,
         spot: bool = False) -> list[NodeCapacity]:
    """``nodes`` once ``workers`` pods of ``units_per_node`` units each are bound, as the scheduler
    would: each on the serving node with the most free units that holds it (a pod that fits nowhere
    is left out). What placement counts for work placed a moment ago that the nodes do not show yet.
    """
    nodes = list(nodes)
    for _ in range(workers):
        fitting = [i for i, n in enumerate(nodes) if serves(n, flavor, spot) and n.free >= units_per_node]
        if not fitting:
            break
        i = max(fitting, key=lambda i: (nodes[i].free, nodes[i].node))
        nodes[i] = replace(nodes[i], in_use=nodes[i].in_use + units_per_node)
    return nodes


def withhold(nodes: list[NodeCapacity], flavor: FlavorSpec, units: int) -> list[NodeCapacity]:
    """``nodes`` with ``units`` of ``flavor``'s free on-demand units counted as taken (units reserved for a window,
    docs/reservations.md): from the nodes with the most free first, so that what stays for the window is whole
    nodes where it can be — a window is usually booked for whole-node workers."""
    nodes = list(nodes)
    left = units
    for i in sorted((i for i, n in enumerate(nodes) if serves(n, flavor, False) and n.free),
                    key=lambda i: (-nodes[i].free, nodes[i].node)):
        if left <= 0:
            break
        taken = min(left, nodes[i].free)
        nodes[i] = replace(nodes[i], in_use=nodes[i].in_use + taken)
        left -= taken
    return nodes


def clusters_capacity_reason(flavor: FlavorSpec, units_per_node: int,
                             clusters: list[tuple[str, list[NodeCapacity]]], *, workers: int = 1,
                             spot: bool = False) -> str:
    """:func:`capacity_reason` across clusters: each offering cluster's largest free block, in the order given.

    ``clusters`` is ``(name, nodes)`` best first (:func:`cluster.placement.place` gives its
    ranking), so the first cluster named is the one the work waits on. A distributed request
    (``workers`` above 1) needs that many blocks, so each cluster's count of free blocks is
    named instead. With one cluster the words are :func:`capacity_reason`'s (its node named),
    as a single-cluster install always said.
    """
    serving = [(name, [n for n in nodes if serves(n, flavor, spot)]) for name, nodes in clusters]
    if len(serving) == 1:
        return capacity_reason(flavor, units_per_node, serving[0][1])
    need = _needs(flavor, units_per_node)
    offering = [(name, nodes) for name, nodes in serving if nodes]
    if not offering:
        return f"{need}; no cluster offers {flavor.name}{' on spot nodes' if spot else ''}"
    if workers > 1:
        counts = ", ".join(f"{free_blocks(nodes, units_per_node)} on {name}" for name, nodes in offering)
        return f"{need} for each of {workers} workers; free blocks: {counts}"
    largest = ", ".join(f"{max(n.free for n in nodes)} on {name}" for name, nodes in offering)
    return f"{need}; largest free block: {largest}"


def _needs(flavor: FlavorSpec, units_per_node: int) -> str:
    return f"{WAITING_FOR_CAPACITY}: needs {units_per_node}\u00d7 {flavor.name} on one node"


#: The scheduler's event reason when it found no node for a pod.
FAILED_SCHEDULING = "FailedScheduling"


def scheduler_message(events: list[ClusterEvent]) -> str:
    """The scheduler's own words behind a capacity reason: its newest FailedScheduling message, or ""."""
    return next((e.message for e in reversed(events) if e.reason == FAILED_SCHEDULING), "")
