"""Why work waits for the cluster, in plain words."""

from __future__ import annotations

from cluster.backends.base import ClusterEvent, NodeCapacity
from cluster.capacity import (
    bind,
    capacity_reason,
    clusters_capacity_reason,
    free_blocks,
    offers,
    scheduler_message,
    serves,
)
from cluster.manifests.common import node_selector
from cluster.specs import FlavorSpec

A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def flavor(name: str, resource: str, gpu_model: str, node_labels: dict[str, str] | None = None) -> FlavorSpec:
    return FlavorSpec(name=name, resource_name=resource, gpu_model=gpu_model,
                      node_selector=tuple(sorted((node_labels or {}).items())))


A100_80GB = flavor("a100-80gb", "nvidia.com/gpu", "NVIDIA-A100-SXM4-80GB")
A100_MIG = flavor("a100-1g.10gb", "nvidia.com/mig-1g.10gb", "NVIDIA-A100-SXM4-80GB")
H100 = flavor("h100-80gb", "nvidia.com/gpu", "H100")
NODES = [NodeCapacity("a100-0", "nvidia.com/gpu", 8, 7, A100), NodeCapacity("a100-1", "nvidia.com/gpu", 8, 5, A100),
         NodeCapacity("mig-0", "nvidia.com/mig-1g.10gb", 7, 7, A100)]


def test_it_names_the_largest_free_block_of_the_flavor():
    assert capacity_reason(A100_80GB, 4, NODES) == (
        "waiting for capacity: needs 4\u00d7 a100-80gb on one node; the largest free block is 3 (node a100-1)")


def test_it_says_when_every_node_is_full_or_none_offers_the_flavor():
    assert capacity_reason(A100_MIG, 1, NODES).endswith(
        "every a100-1g.10gb node is full")
    assert capacity_reason(H100, 8, NODES).endswith(
        "no node offers h100-80gb")


def test_it_keeps_the_schedulers_newest_words_one_click_away():
    events = [ClusterEvent("Normal", "SuccessfulCreate", "Created pod: run-4-abcde", "Job/run-4", "T1"),
              ClusterEvent("Warning", "FailedScheduling", "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
                           "Pod/run-4-abcde", "T2"),
              ClusterEvent("Warning", "FailedScheduling", "0/8 nodes are available: 6 Insufficient nvidia.com/gpu, "
                           "2 node(s) had untolerated taint.", "Pod/run-4-abcde", "T3")]
    assert scheduler_message(events).endswith("2 node(s) had untolerated taint.")
    assert scheduler_message(events[:1]) == ""


def test_a_node_offers_a_flavor_exactly_when_the_scheduler_would_place_its_pods_there():
    """The rule is the rendered nodeSelector: the resource, the product label and the flavor's own labels."""
    zone = flavor("a100-zone-a", "nvidia.com/gpu", "NVIDIA-A100-SXM4-80GB", {"topology.kubernetes.io/zone": "a"})
    labelled = NodeCapacity("a100-0", "nvidia.com/gpu", 8, 0, A100)
    in_zone = NodeCapacity("a100-1", "nvidia.com/gpu", 8, 0, {**A100, "topology.kubernetes.io/zone": "a"})
    unlabelled = NodeCapacity("bare-0", "nvidia.com/gpu", 8, 0)
    mig = NodeCapacity("mig-0", "nvidia.com/mig-1g.10gb", 7, 0, A100)
    assert node_selector(A100_80GB) == A100
    assert offers(labelled, A100_80GB) and offers(in_zone, A100_80GB)
    assert not offers(mig, A100_80GB) and offers(mig, A100_MIG)  # the resource tells full GPUs and slices apart
    assert offers(in_zone, zone) and not offers(labelled, zone)  # a flavor's own labels narrow it further
    # A node reporting no labels matches no nodeSelector: it offers nothing (it used to count on
    # the Capacity page, by resource alone, while the waiting reason said "no node offers").
    assert not offers(unlabelled, A100_80GB)
    assert capacity_reason(A100_80GB, 1, [unlabelled]).endswith("no node offers a100-80gb")


def test_across_clusters_the_reason_names_each_clusters_largest_free_block_best_first():
    west = [NodeCapacity("w0", "nvidia.com/gpu", 8, 6, A100), NodeCapacity("w1", "nvidia.com/gpu", 8, 7, A100)]
    east = [NodeCapacity("e0", "nvidia.com/gpu", 8, 8, A100)]
    elsewhere = [NodeCapacity("x0", "nvidia.com/gpu", 8, 0, {"nvidia.com/gpu.product": "H100"})]
    assert clusters_capacity_reason(A100_80GB, 4, [("west", west), ("east", east), ("x", elsewhere)]) == (
        "waiting for capacity: needs 4\u00d7 a100-80gb on one node; largest free block: 2 on west, 0 on east")
    # A distributed run needs a block per worker: each cluster's count of free blocks is what tells.
    assert clusters_capacity_reason(A100_80GB, 1, [("east", east), ("west", west)], workers=4) == (
        "waiting for capacity: needs 1\u00d7 a100-80gb on one node for each of 4 workers; "
        "free blocks: 0 on east, 3 on west")
    assert clusters_capacity_reason(H100, 1, [("west", west), ("east", east)]).endswith("no cluster offers h100-80gb")
    # One cluster: the words a single cluster always had, its node named.
    assert clusters_capacity_reason(A100_80GB, 4, [("west", west)]) == capacity_reason(A100_80GB, 4, west)


def test_spot_work_counts_spot_nodes_only_and_other_work_never_does():
    spot = NodeCapacity("s0", "nvidia.com/gpu", 8, 5, {**A100, "slipway.dev/capacity-type": "spot"})
    on_demand = NodeCapacity("a0", "nvidia.com/gpu", 8, 7, A100)
    assert serves(spot, A100_80GB, spot=True) and not serves(spot, A100_80GB, spot=False)
    assert serves(on_demand, A100_80GB, spot=False) and not serves(on_demand, A100_80GB, spot=True)
    clusters = [("west", [spot, on_demand]), ("east", [on_demand])]
    assert clusters_capacity_reason(A100_80GB, 4, clusters, spot=True) == (
        "waiting for capacity: needs 4\u00d7 a100-80gb on one node; largest free block: 3 on west")
    assert clusters_capacity_reason(A100_80GB, 4, clusters[1:], spot=True).endswith("no node offers a100-80gb")
    assert clusters_capacity_reason(A100_80GB, 4, [("east", [on_demand])] * 2, spot=True).endswith(
        "no cluster offers a100-80gb on spot nodes")


def test_free_blocks_packs_several_workers_on_a_node_when_they_fit():
    nodes = [NodeCapacity("a", "nvidia.com/gpu", 8, 0, A100), NodeCapacity("b", "nvidia.com/gpu", 8, 2, A100)]
    assert (free_blocks(nodes, 4), free_blocks(nodes, 3), free_blocks(nodes, 8), free_blocks([], 1)) == (3, 4, 1, 0)


def test_bind_puts_each_pod_on_the_emptiest_serving_node_as_a_scheduler_would():
    flavor = FlavorSpec("a100-80gb", "nvidia.com/gpu", "NVIDIA-A100-SXM4-80GB")
    labels = dict(node_selector(flavor))
    nodes = [NodeCapacity("a", "nvidia.com/gpu", 8, 2, labels), NodeCapacity("b", "nvidia.com/gpu", 8, 0, labels),
             NodeCapacity("c", "nvidia.com/gpu", 8, 0, {})]  # c offers no flavor: no labels
    bound = bind(nodes, flavor, units_per_node=4, workers=3)
    assert [(n.node, n.free) for n in bound] == [("a", 2), ("b", 0), ("c", 8)]  # b (8), a (6 > 4), b again; c never
    assert [n.free for n in nodes] == [6, 8, 8]  # the input is left as it was
