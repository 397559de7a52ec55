"""Why work waits for the cluster, in plain words."""

from __future__ import annotations

from cluster.backends.base import ClusterEvent, NodeCapacity
from cluster.capacity import capacity_reason, scheduler_message

A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
NODES = [NodeCapacity("a100-0", "nvidia.com/gpu", 8, 7, A100), NodeCapacity("a100-1", "nvidia.com/gpu", 8, 5, A100),
         NodeCapacity("mig-0", "nvidia.com/mig-1g.10gb", 7, 7, A100)]


def test_it_names_the_largest_free_block_of_the_flavor():
    assert capacity_reason("a100-80gb", "nvidia.com/gpu", A100, 4, NODES) == (
        "waiting for capacity: needs 4\u00d7 a100-80gb on one node; the largest free block is 3 (node a100-1)")


def test_it_says_when_every_node_is_full_or_none_offers_the_flavor():
    assert capacity_reason("a100-1g.10gb", "nvidia.com/mig-1g.10gb", A100, 1, NODES).endswith(
        "every a100-1g.10gb node is full")
    assert capacity_reason("h100-80gb", "nvidia.com/gpu", {"nvidia.com/gpu.product": "H100"}, 8, NODES).endswith(
        "no node offers h100-80gb")


def test_it_keeps_the_schedulers_newest_words_one_click_away():
    events = [ClusterEvent("Normal", "SuccessfulCreate", "Created pod: run-4-abcde", "Job/run-4", "T1"),
              ClusterEvent("Warning", "FailedScheduling", "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
                           "Pod/run-4-abcde", "T2"),
              ClusterEvent("Warning", "FailedScheduling", "0/8 nodes are available: 6 Insufficient nvidia.com/gpu, "
                           "2 node(s) had untolerated taint.", "Pod/run-4-abcde", "T3")]
    assert scheduler_message(events).endswith("2 node(s) had untolerated taint.")
    assert scheduler_message(events[:1]) == ""
