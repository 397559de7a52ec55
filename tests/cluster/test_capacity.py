"""Why work waits for the cluster, in plain words."""

from __future__ import annotations

from cluster.backends.base import ClusterEvent, NodeCapacity
from cluster.capacity import capacity_reason, offers, scheduler_message
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
