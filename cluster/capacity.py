"""Why work waits for the cluster, in plain words, from the nodes' capacity (pure).

The scheduler says "0/8 nodes are available: 8 Insufficient nvidia.com/gpu"; people want
"waiting for capacity: needs 4× a100-80gb on one node; the largest free block is 2 (node
a100-1)". The raw words stay in the workload's events; :func:`scheduler_message` finds them
for the run page, which keeps them one click away.
"""

from __future__ import annotations

from cluster.backends.base import ClusterEvent, NodeCapacity
from cluster.manifests.common import node_selector
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


def capacity_reason(flavor: FlavorSpec, units_per_node: int, nodes: list[NodeCapacity]) -> str:
    """The plain-words reason a workload of ``units_per_node`` × ``flavor`` per worker cannot be placed."""
    fitting = [n for n in nodes if offers(n, flavor)]
    flavor = flavor.name
    need = f"{WAITING_FOR_CAPACITY}: needs {units_per_node}\u00d7 {flavor} on one node"
    if not fitting:
        return f"{need}; no node offers {flavor}"
    largest = max(fitting, key=lambda n: (n.free, n.node))
    if largest.free == 0:
        return f"{need}; every {flavor} node is full"
    return f"{need}; the largest free block is {largest.free} (node {largest.node})"


#: The scheduler's event reason when it found no node for a pod.
FAILED_SCHEDULING = "FailedScheduling"


def scheduler_message(events: list[ClusterEvent]) -> str:
    """The scheduler's own words behind a capacity reason: its newest FailedScheduling message, or ""."""
    return next((e.message for e in reversed(events) if e.reason == FAILED_SCHEDULING), "")
