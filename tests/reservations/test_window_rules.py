"""The window's rules, pure (issue 49, point 5): admission into a team's reserved window, what a cluster keeps
for windows from other work, and when that work may be lent a window's idle units."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.budget_rule import BudgetState
from billing.reserved import Withheld, lendable
from cluster.backends.base import NodeCapacity
from cluster.capacity import free_blocks, withhold
from cluster.manifests.common import SPOT_KEY, SPOT_VALUE, node_selector
from cluster.placement import ClusterOffer, PlacementRequest, reserved_in_the_way
from cluster.specs import FlavorSpec
from quotas.constants import AdmissionCode, Outcome
from quotas.decide import FlavorQuota, ResourceRequest, decide

A100 = FlavorSpec(name="a100-80gb", resource_name="nvidia.com/gpu", gpu_model="NVIDIA-A100-SXM4-80GB")
SPENT = BudgetState(Decimal("100"), Decimal("100"), "USD")
NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def req(units: int, per_node: int | None = None, spot: bool = False, may_borrow: bool = True) -> ResourceRequest:
    return ResourceRequest(flavor="a100-80gb", units=units, units_per_node=per_node or units, spot=spot,
                           may_borrow=may_borrow)


@pytest.mark.parametrize(("request_", "usage", "quota", "budget", "outcome", "code", "reserved", "words"), [
    # Into an open window whole, on top of the quota: a full quota, no quota at all, a spent budget.
    (req(4), 8, FlavorQuota(max_units_per_node=8, limit=8, reserved=4), None, Outcome.ADMIT, AdmissionCode.ADMITTED,
     True, "admitted into the team's reservation: 4\u00d7 a100-80gb of its 4 reserved and free"),
    (req(4), 0, FlavorQuota(max_units_per_node=8, limit=None, reserved=8, reserved_ahead=8), None, Outcome.ADMIT,
     AdmissionCode.ADMITTED, True, "of its 8 reserved and free"),
    (req(2), 0, FlavorQuota(max_units_per_node=8, limit=4, reserved=2), SPENT, Outcome.ADMIT, AdmissionCode.ADMITTED,
     True, "reservation"),
    # Larger than what the window has free: the quota's rule, as without a window.
    (req(6), 0, FlavorQuota(max_units_per_node=8, limit=8, reserved=4), None, Outcome.ADMIT, AdmissionCode.ADMITTED,
     False, "admitted: 6\u00d7 a100-80gb, 6 of 8 now in use"),
    # Spot work never runs on reserved (on-demand) units.
    (req(2, spot=True), 8, FlavorQuota(max_units_per_node=8, limit=8, reserved=4), None, Outcome.QUEUE,
     AdmissionCode.WAITING_FOR_QUOTA, False, "waiting for quota"),
    # A window not open yet holds it: it waits for the window instead of a 400 "no quota" / "exceeds quota".
    (req(4), 0, FlavorQuota(max_units_per_node=8, limit=None, reserved_ahead=4), None, Outcome.QUEUE,
     AdmissionCode.WAITING_FOR_QUOTA, False, "waiting for the team's reservation of 4\u00d7 a100-80gb"),
    (req(8), 0, FlavorQuota(max_units_per_node=8, limit=2, reserved_ahead=8), None, Outcome.QUEUE,
     AdmissionCode.WAITING_FOR_QUOTA, False, "waiting for the team's reservation of 8\u00d7 a100-80gb"),
    # ... but not one larger than any of its windows.
    (req(6), 0, FlavorQuota(max_units_per_node=8, limit=None, reserved_ahead=4), None, Outcome.REJECT,
     AdmissionCode.NO_QUOTA_FOR_FLAVOR, False, "no quota"),
    (req(8), 0, FlavorQuota(max_units_per_node=8, limit=2, reserved_ahead=4), None, Outcome.REJECT,
     AdmissionCode.EXCEEDS_QUOTA, False, "more than the team's limit of 2"),
    # A window does not make a worker fit a node.
    (req(16, 16), 0, FlavorQuota(max_units_per_node=8, limit=None, reserved=16, reserved_ahead=16), None,
     Outcome.REJECT, AdmissionCode.EXCEEDS_LARGEST_NODE, False, "largest node has 8"),
])
def test_admission_into_a_window(request_, usage, quota, budget, outcome, code, reserved, words):
    decision = decide(request_, usage, quota, budget)
    assert (decision.outcome, decision.reason.code, decision.reserved) == (outcome, code, reserved)
    assert words in decision.reason.words
    assert not (decision.reserved and decision.borrows)  # a window's units are the team's: never borrowed


def node(name: str, allocatable: int, in_use: int = 0, spot: bool = False) -> NodeCapacity:
    labels = dict(node_selector(A100))
    if spot:
        labels[SPOT_KEY] = SPOT_VALUE
    return NodeCapacity(name, A100.resource_name, allocatable, in_use, labels)


def test_units_kept_for_a_window_come_off_the_emptiest_nodes_first():
    nodes = [node("a", 8, 6), node("b", 8, 0), node("c", 8, 4), node("s", 8, 0, spot=True)]
    kept = withhold(nodes, A100, 10)
    free = {n.node: n.free for n in kept}
    # b (8 free) goes whole, then c's 4 gives 2: whole nodes stay for the window; spot nodes never count.
    assert free == {"a": 2, "b": 0, "c": 2, "s": 8}
    assert sum(n.free for n in kept if n.node != "s") == sum(n.free for n in nodes if n.node != "s") - 10
    assert free_blocks(withhold(nodes, A100, 100), 1) == 8  # never below nothing: only the spot node's


def offer(name: str, *nodes: NodeCapacity, state: str = "ready", labels: dict | None = None) -> ClusterOffer:
    return ClusterOffer(name=name, state=state, nodes=nodes, prices={"a100-80gb": Decimal("2")}, labels=labels or {})


@pytest.mark.parametrize(("kept", "clusters", "in_the_way"), [
    ({}, [offer("east", node("e", 8, 8))], False),  # no window: never the reason
    ({"east": 4}, [offer("east", node("e", 8, 0))], False),  # room beside the 4 kept
    ({"east": 6}, [offer("east", node("e", 8, 0))], True),  # 2 free beside them: a 4-GPU worker waits
    ({"east": 6}, [offer("east", node("e", 8, 0)), offer("west", node("w", 4, 0))], False),  # west has room
    ({"east": 6}, [offer("east", node("e", 8, 0)), offer("west", node("w", 4, 0), state="draining")], True),
    ({"east": 6}, [offer("east", node("e", 8, 0)), offer("west", node("w", 4, 0), labels={"zone": "b"})], False),
])
def test_a_window_is_in_the_way_when_no_ready_cluster_has_room_beside_what_it_keeps(kept, clusters, in_the_way):
    request = PlacementRequest.shaped(A100, 4, 4)
    assert reserved_in_the_way(request, clusters, kept) is in_the_way


def test_a_selector_the_cluster_beside_does_not_match_leaves_only_the_window():
    request = PlacementRequest.shaped(A100, 4, 4, selector={"zone": "a"})
    clusters = [offer("east", node("e", 8, 0), labels={"zone": "a"}), offer("west", node("w", 4, 0), labels={"zone": "b"})]
    assert reserved_in_the_way(request, clusters, {"east": 6})


@pytest.mark.parametrize(("start", "claimed", "may_borrow", "lends"), [
    (NOW + timedelta(hours=2), False, True, True),  # hours before the window: lent, preemptible
    (NOW + timedelta(minutes=10), False, True, False),  # in its lead (15 min): being cleared, nothing lent
    (NOW + timedelta(minutes=15), False, True, True),  # the lead starts at start − lead exactly (inclusive)
    (NOW - timedelta(minutes=30), False, True, True),  # open and idle: lent
    (NOW - timedelta(minutes=30), True, True, False),  # open, its holder's work about to start there
    (NOW + timedelta(hours=2), False, False, False),  # an endpoint's guaranteed minimum is never lent
])
def test_when_a_windows_units_may_be_lent(settings, start, claimed, may_borrow, lends):
    settings.SLIPWAY_RESERVATION_LEAD_MINUTES = 15
    kept = Withheld(4, 1, 1, start, start + timedelta(hours=8), claimed=claimed)
    if start == NOW + timedelta(minutes=15):
        assert not lendable(kept, NOW, may_borrow)  # NOW is exactly start − lead: inside the lead
        assert lendable(kept, NOW - timedelta(seconds=1), may_borrow)
        return
    assert lendable(kept, NOW, may_borrow) is lends
