"""Start estimates on elastic pools (issue 52): the simulation starts work when its nodes are ready, pure.

Work whose units the ready nodes hold starts as before; work that needs nodes a pool does not have ready yet
starts once the pool's provisioning median is over (nodes already being provisioned: when they should be
ready), and its answer names the pool. A flavor without a pool is the fixed inventory of before
(tests/workloads/test_estimates.py holds that). The words of work waiting on its pool come from the pool's
status and history (:func:`workloads.estimates.provisioning.waiting_words`).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from cluster.backends.base import NodeCapacity
from cluster.manifests.common import SPOT_KEY, SPOT_VALUE, node_selector
from cluster.pools import DEFAULT_PROVISIONING_SECONDS, DEFAULT_PROVISIONING_TAIL_SECONDS
from core.formatting import format_clock
from core.priority import Priority
from fleet.models import Cluster, GpuFlavor, NodePool
from fleet.pools import with_headroom
from jobs.models import TrainingRun
from quotas.models import QueuedRequest, TeamQuota
from tests.jobs.conftest import run_payload
from tests.workloads.test_start_estimates import submit_lasting
from workloads.estimates import Growth, Holding, Start, Waiting, simulate
from workloads.estimates.forecast import estimated_starts
from workloads.estimates.provisioning import about_minutes, growing_words, seconds_left, waiting_words
from workloads.models import ReasonCode

NOW = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
CYCLE = timedelta(seconds=5)
FLAVOR = GpuFlavor(pk=1, name="h100-80gb", active=True, max_units_per_node=8, resource_name="nvidia.com/gpu",
                   gpu_model="NVIDIA-H100-80GB-HBM3")
A = 1
FOUR_MIN = timedelta(minutes=4)


def entry(ref: str, units: int, pk: int = 1) -> QueuedRequest:
    return QueuedRequest(pk=pk, ref=ref, team_id=A, flavor=FLAVOR, units=units, units_per_node=min(units, 8),
                         priority=Priority.NORMAL.rank, created_at=NOW)


def holding(ref: str, units: int, ends_in: timedelta) -> Holding:
    return Holding(ref, A, FLAVOR.pk, units, NOW + ends_in, 0, Priority.NORMAL.rank, NOW - timedelta(hours=1),
                   entry(ref, units, pk=99))


def quotas(limit: int = 32) -> dict:
    return {(A, FLAVOR.pk): TeamQuota(team_id=A, flavor=FLAVOR, limit=limit)}


def test_work_the_ready_nodes_hold_starts_now_and_work_beyond_them_after_the_pools_median():
    growth = {FLAVOR.pk: Growth(free=8, room=16, takes=FOUR_MIN, pool="h100-80gb on east")}
    starts = simulate(NOW, [], [Waiting(entry("run:1", 8, pk=1), timedelta(minutes=30)),
                                Waiting(entry("run:2", 16, pk=2), timedelta(minutes=30))], quotas(), CYCLE,
                      growth=growth)
    assert starts["run:1"] == Start(NOW)
    assert starts["run:2"] == Start(NOW + FOUR_MIN, grows="h100-80gb on east", new_units=16)
    # The same queue on a fixed inventory (no growth): both admitted now, as before.
    fixed = simulate(NOW, [], [Waiting(entry("run:1", 8, pk=1), timedelta(minutes=30)),
                               Waiting(entry("run:2", 16, pk=2), timedelta(minutes=30))], quotas(), CYCLE)
    assert fixed["run:2"] == Start(NOW)


def test_work_started_later_ends_later_and_what_waits_behind_it_too():
    # run:1 needs a new node (4 min), runs 30 min: the quota it holds frees at 34 min, not 30.
    growth = {FLAVOR.pk: Growth(free=0, room=16, takes=FOUR_MIN, pool="h100-80gb on east")}
    starts = simulate(NOW, [], [Waiting(entry("run:1", 8, pk=1), timedelta(minutes=30)),
                                Waiting(entry("run:2", 8, pk=2), timedelta(minutes=10))], quotas(limit=8), CYCLE,
                      growth=growth)
    assert starts["run:1"].at == NOW + FOUR_MIN
    # run:2 is admitted when run:1 ends; its node is then ready (run:1's), so no provisioning again.
    assert starts["run:2"] == Start(NOW + FOUR_MIN + timedelta(minutes=30), ("run:1",))


def test_units_freed_by_work_that_ends_are_ready_for_the_work_behind_it():
    growth = {FLAVOR.pk: Growth(free=0, room=0, takes=FOUR_MIN, pool="h100-80gb on east")}
    starts = simulate(NOW, [holding("run:1", 8, timedelta(minutes=20))],
                      [Waiting(entry("run:2", 8), timedelta(minutes=10))], quotas(limit=8), CYCLE, growth=growth)
    assert starts["run:2"] == Start(NOW + timedelta(minutes=20), ("run:1",))


def test_nodes_already_being_provisioned_are_ready_when_they_should_be():
    # 8 units on a node asked for 3 minutes ago (ready in 1 min by the median), then new ones (4 min).
    growth = {FLAVOR.pk: Growth(free=0, room=8, takes=FOUR_MIN, pool="h100-80gb on east",
                                coming=((NOW + timedelta(minutes=1), 8),))}
    starts = simulate(NOW, [], [Waiting(entry("run:1", 8, pk=1), timedelta(minutes=30)),
                                Waiting(entry("run:2", 8, pk=2), timedelta(minutes=30))], quotas(), CYCLE,
                      growth=growth)
    assert starts["run:1"] == Start(NOW + timedelta(minutes=1), grows="h100-80gb on east", new_units=8)
    assert starts["run:2"] == Start(NOW + FOUR_MIN, grows="h100-80gb on east", new_units=8)


def test_spot_work_never_waits_for_a_pool_nor_frees_its_units():
    """docs/pools.md: pools are on-demand nodes; spot work's flavor is a fixed inventory to it."""
    growth = {FLAVOR.pk: Growth(free=0, room=16, takes=FOUR_MIN, pool="h100-80gb on east")}
    spot = entry("run:1", 8)
    spot.spot = True
    assert simulate(NOW, [], [Waiting(spot, timedelta(minutes=30))], quotas(), CYCLE, growth=growth)["run:1"] == Start(
        NOW)
    # A spot run that ends frees spot nodes: the on-demand work behind it waits for the pool's new node.
    ending = dataclasses.replace(holding("run:2", 8, timedelta(minutes=20)), spot=True)
    starts = simulate(NOW, [ending], [Waiting(entry("run:3", 8), timedelta(minutes=10))], quotas(limit=8), CYCLE,
                      growth=growth)
    assert starts["run:3"] == Start(NOW + timedelta(minutes=20) + FOUR_MIN, ("run:2",), grows="h100-80gb on east",
                                    new_units=8)


def test_what_is_left_of_a_provisioning_is_the_median_then_the_tail_then_unknown():
    history = [200.0, 240.0, 300.0, 330.0, 900.0]  # median 300, tail (p90) 900
    assert seconds_left(history, None, NOW) == 300
    assert seconds_left(history, NOW - timedelta(seconds=120), NOW) == 180
    assert seconds_left(history, NOW - timedelta(seconds=400), NOW) == 500  # past the median: the tail's rest
    assert seconds_left(history, NOW - timedelta(seconds=400), NOW, tail=True) == 500
    assert seconds_left(history, NOW - timedelta(seconds=1000), NOW) is None
    # Until a pool has seen three, the defaults.
    assert seconds_left([], None, NOW) == DEFAULT_PROVISIONING_SECONDS
    assert seconds_left([100.0], None, NOW, tail=True) == DEFAULT_PROVISIONING_TAIL_SECONDS


def _pool(history: list[float]) -> tuple[NodePool, list[NodeCapacity]]:
    east = Cluster(name="east")
    labels = node_selector(FLAVOR.to_spec())
    return NodePool(cluster=east, flavor=FLAVOR, min_nodes=0, max_nodes=6, history_seconds=history), [
        NodeCapacity("east-h100-0", "nvidia.com/gpu", 8, 8, labels),  # busy
        NodeCapacity("east-h100-1", "nvidia.com/gpu", 8, 0, labels),  # up for the gang
        NodeCapacity("east-h100-2", "nvidia.com/gpu", 8, 0, labels),  # up for the gang
        NodeCapacity("east-h100-3", "nvidia.com/gpu", 8, 0, labels, provisioning=True),  # not Ready yet
    ]


def test_the_growing_words_name_the_pool_its_progress_and_the_minutes_left():
    assert growing_words("h100-80gb", "east", 2, 4, 170) == "pool h100-80gb on east growing: node 2 of 4 ready, about 3 min"
    assert growing_words("h100-80gb", "east", 6, 4, 10) == "pool h100-80gb on east growing: node 4 of 4 ready, about 1 min"
    assert growing_words("l4", "west", 0, 1, None) == "pool l4 on west growing: node 0 of 1 ready"
    # 2 min 30 s is "about 3 min", as the start estimate reads it (round() took the half to even: 2).
    assert growing_words("l4", "west", 0, 1, 150) == "pool l4 on west growing: node 0 of 1 ready, about 3 min"
    assert [about_minutes(seconds) for seconds in (0, 89.9, 90, 150, 210, 270)] == [1, 1, 2, 3, 4, 5]


def test_the_words_of_a_gang_waiting_on_its_pool_count_its_nodes_ready_and_the_time_left():
    pool, nodes = _pool([180.0, 200.0, 240.0])  # median 200 s
    words = waiting_words(pool, nodes, pods=4, units_per_pod=8, since=NOW - timedelta(seconds=20), now=NOW)
    assert words == "pool h100-80gb on east growing: node 2 of 4 ready, about 3 min"
    # A pool slower than it has ever been: no time said.
    late = waiting_words(pool, nodes, pods=4, units_per_pod=8, since=NOW - timedelta(hours=1), now=NOW)
    assert late == "pool h100-80gb on east growing: node 2 of 4 ready"
    # Two pods of 4 share a node: one node wanted, and a ready node holds both.
    assert waiting_words(pool, nodes, pods=2, units_per_pod=4, since=NOW, now=NOW).startswith(
        "pool h100-80gb on east growing: node 1 of 1 ready")


def test_headroom_is_not_a_ready_node(monkeypatch):
    pool, nodes = _pool([])
    monkeypatch.setattr("fleet.pools.pools_of", lambda cluster: [pool])  # an unsaved pool: its cluster's only one
    # The headroom the pool offers every reader of the nodes (fleet.pools.with_headroom) is room, not a ready node.
    grown = with_headroom(pool.cluster, nodes)
    assert any("-pool+" in node.node for node in grown)
    words = waiting_words(pool, grown, pods=4, units_per_pod=8, since=NOW, now=NOW)
    assert words == "pool h100-80gb on east growing: node 2 of 4 ready, about 4 min"


# -- through the portal: the pools as data, the queue as stored ----------------------------------------------


def _elastic_east(a100: GpuFlavor, in_use: int, history: list[float]) -> Cluster:
    """A cluster ``east`` whose one ready A100 node has ``in_use`` of its 8 units taken, in a pool of up to 2."""
    labels = node_selector(a100.to_spec())
    east = Cluster.objects.create(name="east", nodes=[{"node": "east-a100-0", "resource_name": a100.resource_name,
                                                       "allocatable": 8, "in_use": in_use, "labels": labels}],
                                  nodes_read_at=NOW)
    NodePool.objects.create(cluster=east, flavor=a100, min_nodes=0, max_nodes=2, history_seconds=history)
    return east


@pytest.mark.django_db
def test_queued_work_that_needs_a_new_node_is_told_when_and_which_pool_grows(member, team, quota):
    a100 = GpuFlavor.objects.get(name="a100-80gb")
    east = _elastic_east(a100, in_use=4, history=[170.0, 180.0, 200.0])  # median 180 s, tail 200 s
    first = submit_lasting(member, team, "first", 4, "1h", limit=30)
    TrainingRun.objects.filter(pk=first.pk).update(state="running", started_at=NOW)
    waiting = submit_lasting(member, team, "wide", 8, "1h", limit=30)
    assert waiting.state == "queued"
    # Admitted when first ends (30 min): its 4 units and the 4 free now make the 8, on the ready node.
    estimate = estimated_starts(team, now=NOW)[waiting.ref]
    assert estimate.at == NOW + timedelta(minutes=30) and estimate.grows == ""
    # East's node holds someone else's 4 units as well: the 8 need a new node, 3 min after the admission.
    Cluster.objects.filter(pk=east.pk).update(nodes=[{**east.nodes[0], "in_use": 8}])
    estimate = estimated_starts(team, now=NOW)[waiting.ref]
    assert estimate.at == NOW + timedelta(minutes=33)
    assert estimate.latest == NOW + timedelta(minutes=30, seconds=200)  # the bound takes the pool's tail
    assert estimate.words(NOW) == ("starts in about 33 min, when first ends, after pool a100-80gb on east grows by 1 "
                                   f"node (about 3 min), by {format_clock(estimate.latest)} UTC at the latest")


@pytest.mark.django_db
def test_the_pool_that_grows_is_the_quickest_of_those_with_room(member, team, quota):
    """docs/pools.md "What the estimates assume": a pool at its max adds no node, however quick it was."""
    a100 = GpuFlavor.objects.get(name="a100-80gb")
    east = _elastic_east(a100, in_use=8, history=[50.0, 60.0, 70.0])  # quick (1 min), but at its max of 1 node
    NodePool.objects.filter(cluster=east).update(max_nodes=1)
    west = Cluster.objects.create(name="west", nodes=[], nodes_read_at=NOW)
    NodePool.objects.create(cluster=west, flavor=a100, min_nodes=0, max_nodes=2, history_seconds=[290.0, 300.0, 310.0])
    first = submit_lasting(member, team, "first", 4, "1h", limit=30)
    TrainingRun.objects.filter(pk=first.pk).update(state="running", started_at=NOW)
    waiting = submit_lasting(member, team, "wide", 8, "1h", limit=30)
    estimate = estimated_starts(team, now=NOW)[waiting.ref]
    # West grows: its 5 min after first ends (east's minute named the pool that cannot grow).
    assert estimate.at == NOW + timedelta(minutes=35)
    assert estimate.grows == "after pool a100-80gb on west grows by 1 node (about 5 min)"


@pytest.mark.django_db
@pytest.mark.parametrize("taking_none", [{"draining": True}, {"health": "lost"}])
def test_a_cluster_taking_no_new_work_lends_no_free_units_nor_pool_to_the_estimate(member, team, quota, taking_none):
    """Placement puts nothing new on a draining or lost cluster (Cluster.placeable): its free node and its quicker pool
    start nothing, so the 8 wait for east's new node, 3 min after first ends."""
    a100 = GpuFlavor.objects.get(name="a100-80gb")
    _elastic_east(a100, in_use=8, history=[170.0, 180.0, 200.0])  # median 180 s
    west = Cluster.objects.create(name="west", nodes=[{"node": "west-a100-0", "resource_name": a100.resource_name,
                                                       "allocatable": 8, "in_use": 0,
                                                       "labels": node_selector(a100.to_spec())}],
                                  nodes_read_at=NOW, **taking_none)
    NodePool.objects.create(cluster=west, flavor=a100, min_nodes=0, max_nodes=2, history_seconds=[50.0, 60.0, 70.0])
    assert not west.placeable
    first = submit_lasting(member, team, "first", 4, "1h", limit=30)
    TrainingRun.objects.filter(pk=first.pk).update(state="running", started_at=NOW)
    waiting = submit_lasting(member, team, "wide", 8, "1h", limit=30)
    estimate = estimated_starts(team, now=NOW)[waiting.ref]
    assert estimate.at == NOW + timedelta(minutes=33)
    assert estimate.grows == "after pool a100-80gb on east grows by 1 node (about 3 min)"


@pytest.mark.django_db
def test_a_spot_nodes_free_units_are_no_ready_units_for_on_demand_work(member, team, quota):
    a100 = GpuFlavor.objects.get(name="a100-80gb")
    east = _elastic_east(a100, in_use=8, history=[170.0, 180.0, 200.0])  # median 180 s
    spot_node = {**east.nodes[0], "node": "east-a100-spot-0", "in_use": 0,
                 "labels": {**east.nodes[0]["labels"], SPOT_KEY: SPOT_VALUE}}
    Cluster.objects.filter(pk=east.pk).update(nodes=[*east.nodes, spot_node])
    first = submit_lasting(member, team, "first", 4, "1h", limit=30)
    TrainingRun.objects.filter(pk=first.pk).update(state="running", started_at=NOW)
    waiting = submit_lasting(member, team, "wide", 8, "1h", limit=30)
    # The spot node's 8 free units run no on-demand work: the 8 need a new node, 3 min after first ends.
    estimate = estimated_starts(team, now=NOW)[waiting.ref]
    assert estimate.at == NOW + timedelta(minutes=33)
    assert estimate.grows == "after pool a100-80gb on east grows by 1 node (about 3 min)"


@pytest.mark.django_db
def test_work_waiting_on_its_nodes_starts_after_what_is_left_of_the_median(member, team, quota):
    a100 = GpuFlavor.objects.get(name="a100-80gb")
    east = _elastic_east(a100, in_use=8, history=[])  # the default: 4 min
    provisioning = submit_lasting(member, team, "gang", 8, "1h", limit=30)
    TrainingRun.objects.filter(pk=provisioning.pk).update(
        state="pending", cluster=east, reason_code=ReasonCode.PROVISIONING,
        provisioning_since=NOW - timedelta(minutes=1))
    waiting = submit_lasting(member, team, "next", 8, "1h", limit=30)
    assert waiting.state == "queued"
    # The gang starts in 3 min (4 min asked 1 min ago) and runs its 30: the next one waits 33 min, not 30.
    assert estimated_starts(team, now=NOW)[waiting.ref].at == NOW + timedelta(minutes=33)


@pytest.mark.django_db
def test_a_dry_run_admitted_onto_a_pool_that_must_grow_says_when_it_starts(member, team, quota, api, client,
                                                                          monkeypatch):
    """Docs/pools.md "Start estimates": the preview of work admitted now whose nodes are not up yet says the pool's
    time, as the queue's estimates do; where the ready nodes hold it, the preview says nothing of a start."""
    monkeypatch.setattr("django.utils.timezone.now", lambda: NOW)
    a100 = GpuFlavor.objects.get(name="a100-80gb")
    east = _elastic_east(a100, in_use=8, history=[170.0, 180.0, 200.0])  # median 180 s, tail 200 s
    dry = api.post("/api/v1/runs/?dry_run=1", run_payload(gpus_per_worker=8, max_runtime_minutes=60),
                   format="json").json()
    assert dry["outcome"] == "admit", dry
    assert dry["estimated_start_at"] == "2026-11-28T09:03:00Z"
    assert dry["estimated_start_latest"] == "2026-11-28T09:03:20Z"  # the pool's tail is the bound
    assert dry["start"] == ("starts in about 3 min, after pool a100-80gb on east grows by 1 node (about 3 min), "
                            "by 09:03 UTC at the latest")
    # The New run form's preview says the same words.
    client.force_login(member)
    html = client.post("/runs/preview/", {"flavor": "a100-80gb", "command": "python train.py", "gpus_per_worker": 8,
                                          "max_runtime_minutes": 60}, HTTP_HX_REQUEST="true").content.decode()
    assert f"<strong>Admitted: {dry['start']}</strong>" in html
    # Its node up and free: it starts at once, and the preview says no more than before.
    Cluster.objects.filter(pk=east.pk).update(nodes=[{**east.nodes[0], "in_use": 0}])
    dry = api.post("/api/v1/runs/?dry_run=1", run_payload(gpus_per_worker=8, max_runtime_minutes=60),
                   format="json").json()
    assert (dry["outcome"], dry["start"], dry["estimated_start_at"]) == ("admit", "", None)
