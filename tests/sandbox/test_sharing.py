"""Shared GPUs in the sandbox (issue 37, "the sandbox tells the truth about sharing"): pools shared by
time-slicing or MPS, one replica of one physical GPU per pod, the slowdown and the memory that
time-slicing does not isolate, MPS's per-client limit, anti-affinity, and the DCGM figures — all
through the backend interface, with pods shaped as the contract says (tests/sandbox/shared.py)."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from django.core.management import call_command

from cluster.backends.base import ClusterAddress
from cluster.errors import Invalid
from inference.status import endpoint_status
from jobs.status import TrainingPhase, training_status
from sandbox.backend import SandboxBackend
from sandbox.inventory import InventoryError, parse_inventory
from sandbox.models import SimPod
from tests.sandbox.helpers import L4, at, observed, run_until, training
from tests.sandbox.shared import A10G_MPS2, T4_TS4, shared_endpoint, shared_run, teams
from workloads.registry import resource_kinds

#: One T4 time-sliced x4 (4 units), two nodes of two A10Gs shared by MPS x2, one whole T4.
SHARED = """
pools:
  - prefix: t4
    cpu: "64"
    memory: 256Gi
    gpu: {product: Tesla-T4, count: 1, memory_mib: 15360, family: turing}
    sharing: {strategy: time-slicing, replicas: 4, config: t4-ts4}
  - prefix: a10g
    count: 2
    cpu: "64"
    memory: 256Gi
    gpu: {product: NVIDIA-A10G, count: 2, memory_mib: 23028, family: ampere}
    sharing: {strategy: mps, replicas: 2, config: a10g-mps2}
  - prefix: t4-whole
    cpu: "16"
    memory: 64Gi
    gpu: {product: Tesla-T4, count: 1, memory_mib: 15360, family: turing}
"""
KINDS = resource_kinds()


@pytest.fixture
def shared(db, settings, tmp_path) -> SandboxBackend:
    path = tmp_path / "shared.yaml"
    path.write_text(SHARED)
    settings.SLIPWAY_SANDBOX_INVENTORY = str(path)
    return SandboxBackend()


@pytest.fixture
def east(db, settings) -> SandboxBackend:
    """The shipped inventory's cluster east, where the demo's shared pools are."""
    settings.SLIPWAY_SANDBOX_INVENTORY = str(settings.BASE_DIR / "sandbox" / "inventory.yaml")
    return SandboxBackend("east")


def pod_row(workload: str) -> SimPod:
    return SimPod.objects.filter(workload=workload).order_by("-created_at", "-pk").first()


def where(workload: str) -> tuple[str, int | None]:
    """The node and physical GPU a workload's (latest) pod got."""
    row = pod_row(workload)
    return row.node, row.gpu


def ran_for(workload: str) -> float:
    """Seconds between a finished pod's start and its end."""
    row = pod_row(workload)
    assert row.finished_at is not None, f"{workload} has not finished"
    return (row.finished_at - row.started_at).total_seconds()


def unschedulable(backend: SandboxBackend, workload: str, namespace: str) -> str:
    (pod,) = observed(backend, workload, namespace).pods
    (condition,) = pod["status"]["conditions"]
    assert (condition["type"], condition["reason"]) == ("PodScheduled", "Unschedulable")
    return condition["message"]


def annotations(backend: SandboxBackend, workload: str, namespace: str = "team-ml") -> dict[str, str]:
    (pod,) = [p for p in observed(backend, workload, namespace).pods if p["status"]["phase"] == "Running"]
    return pod["metadata"]["annotations"]


# -- the inventory ---------------------------------------------------------------------------------


def test_a_shared_pool_advertises_its_replicas_with_the_labels_gpu_feature_discovery_sets():
    inventory = parse_inventory({"pools": [
        {"prefix": "t4", "gpu": {"product": "Tesla-T4", "count": 2, "memory_mib": 15360},
         "sharing": {"strategy": "time-slicing", "replicas": 4, "config": "t4-ts4"}},
        {"prefix": "t4r", "gpu": {"product": "Tesla-T4", "count": 2, "memory_mib": 15360},
         "sharing": {"strategy": "time-slicing", "replicas": 4, "rename": True}},
        {"prefix": "a10g", "gpu": {"product": "NVIDIA-A10G", "count": 2, "memory_mib": 23028},
         "sharing": {"strategy": "mps", "replicas": 2}},
        {"prefix": "l4", "gpu": {"product": "NVIDIA-L4", "count": 1}},
    ]})
    t4, renamed, a10g, l4 = inventory.nodes["default"]
    gfd = ("nvidia.com/gpu.product", "nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy",
           "nvidia.com/mps.capable", "nvidia.com/gpu.count", "nvidia.com/device-plugin.config")
    assert [t4.labels.get(key) for key in gfd] == ["Tesla-T4-SHARED", "4", "time-slicing", "false", "2", "t4-ts4"]
    assert t4.allocatable["nvidia.com/gpu"] == 8 and t4.gpu_resources == ["nvidia.com/gpu"]
    # Renamed: the product keeps its name, the replicas are another resource (the default config: the pool).
    assert [renamed.labels.get(key) for key in gfd] == ["Tesla-T4", "4", "time-slicing", "false", "2", "t4r"]
    assert renamed.gpu_resources == ["nvidia.com/gpu.shared"] and renamed.allocatable["nvidia.com/gpu.shared"] == 8
    assert [a10g.labels.get(key) for key in gfd] == ["NVIDIA-A10G-SHARED", "2", "mps", "true", "2", "a10g"]
    assert (a10g.sharing.client_gib, a10g.sharing.gpus) == (pytest.approx(23028 / 1024 / 2), 2)
    # A whole GPU's node says so too; a whole-GPU selector keeps matching it.
    assert [l4.labels.get(key) for key in gfd] == ["NVIDIA-L4", "1", "none", "false", "1", None]
    assert l4.sharing is None and l4.allocatable["nvidia.com/gpu"] == 1


def test_the_shipped_east_shares_two_t4s_time_sliced_and_two_a10gs_by_mps(east):
    capacity = {(row.node, row.resource_name): row.allocatable for row in east.capacity()}
    assert capacity[("east-t4-0", "nvidia.com/gpu")] == 8
    # One A10G per node: one team per node's MPS GPUs still lets two teams use them at once.
    assert capacity[("east-a10g-0", "nvidia.com/gpu")] == capacity[("east-a10g-1", "nvidia.com/gpu")] == 2


T4 = {"product": "Tesla-T4", "count": 1, "memory_mib": 15360}


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ({"sharing": "time-slicing"}, r"pool x: sharing must be a mapping \{strategy, replicas, rename, config\}"),
        ({"sharing": {"strategy": "mig", "replicas": 4}}, "sharing.strategy must be time-slicing or mps, got 'mig'"),
        ({"sharing": {"strategy": "mps", "replicas": 1}}, "sharing.replicas must be a whole number of at least 2"),
        ({"sharing": {"strategy": "mps", "replicas": "4"}}, "sharing.replicas .* got '4'"),
        ({"sharing": {"strategy": "mps", "replicas": True}}, "sharing.replicas .* got True"),
        ({"sharing": {"strategy": "mps", "replicas": 2, "renameByDefault": True}}, "unknown key 'renameByDefault'"),
        ({"sharing": {"strategy": "mps", "replicas": 2, "rename": "yes"}}, "sharing.rename must be true or false"),
        ({"sharing": {"strategy": "mps", "replicas": 2, "config": "a b"}}, "sharing.config must name a device plugin"),
        ({"gpu": {"product": "Tesla-T4", "count": 1}, "sharing": {"strategy": "mps", "replicas": 2}},
         "sharing needs gpu.memory_mib"),
        ({"gpu": {}, "sharing": {"strategy": "time-slicing", "replicas": 2}}, "sharing needs GPUs to share"),
        ({"gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 1, "memory_mib": 81920},
          "mig": {"layout": [{"gpus": 1, "slices": {"7g.80gb": 1}}]},
          "sharing": {"strategy": "mps", "replicas": 2}}, "sharing cannot be combined with mig"),
    ],
)
def test_the_loader_refuses_a_sharing_the_device_plugin_would_not_run(pool, message):
    with pytest.raises(InventoryError, match=f"cluster default: .*{message}"):
        parse_inventory({"pools": [{"prefix": "x", "gpu": T4, **pool}]})


# -- placement -------------------------------------------------------------------------------------


def test_four_pods_of_a_time_sliced_x4_flavor_share_one_physical_gpu_and_a_fifth_waits(shared):
    shared.apply(teams("ml"), KINDS, now=at(0))
    for i in range(5):
        shared.apply(shared_run(f"run-{i}"), KINDS, now=at(0))
    shared.tick(at(0))
    assert [where(f"run-{i}") for i in range(4)] == [("t4-0", 0)] * 4
    assert unschedulable(shared, "run-4", "team-ml") == (
        "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node "
        "affinity/selector.")
    assert {(row.node, row.in_use, row.allocatable) for row in shared.capacity() if row.node == "t4-0"} == {
        ("t4-0", 4, 4)}


def test_the_device_plugin_fills_the_fullest_gpu_that_has_a_free_replica(east):
    east.apply(teams("vision"), KINDS, now=at(0))
    for i in range(5):
        east.apply(shared_endpoint(f"ep-{i}", team="vision"), KINDS, now=at(0))
        east.tick(at(i))
    # The demo's four t4-ts4 endpoints on one physical T4 of east-t4-0; the fifth opens the other.
    assert [where(f"ep-{i}") for i in range(5)] == [("east-t4-0", 0)] * 4 + [("east-t4-0", 1)]


def test_a_whole_gpu_selector_matches_no_shared_node(shared):
    """GPU Feature Discovery renames a shared T4 Tesla-T4-SHARED: a whole T4's pods stay off it."""
    whole = replace(T4_TS4, name="t4", node_selector=(("nvidia.com/gpu.product", "Tesla-T4"),), gpu_fraction=1.0,
                    sharing="none", replicas=1)
    shared.apply(teams("ml") + shared_run("run-1", whole) + shared_run("run-2", whole), KINDS, now=at(0))
    shared.tick(at(0))
    assert where("run-1") == ("t4-whole-0", None)
    assert unschedulable(shared, "run-2", "team-ml") == (
        "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node "
        "affinity/selector.")


def test_the_device_plugin_refuses_a_pod_asking_for_two_replicas(shared):
    objects = shared_run("run-1")  # hand-made: Slipway's builders ask for one unit of a shared flavor
    for section in objects[0]["spec"]["template"]["spec"]["containers"][0]["resources"].values():
        section["nvidia.com/gpu"] = "2"
    shared.apply(teams("ml") + objects, KINDS, now=at(0))
    run_until(shared, 0, 10)
    (pod,) = observed(shared, "run-1", "team-ml").pods
    message = ("Allocate failed due to rpc error: code = Unknown desc = request for 'nvidia.com/gpu: 2' too "
               "large: maximum request size for shared resources is 1, which is unexpected")
    assert (pod["status"]["phase"], pod["status"]["reason"], pod["status"]["message"]) == (
        "Failed", "UnexpectedAdmissionError", message)
    status = training_status(observed(shared, "run-1", "team-ml"))
    assert status.state == TrainingPhase.FAILED
    assert f"UnexpectedAdmissionError: {message}" in status.reason
    assert any(e.reason == "UnexpectedAdmissionError" for e in shared.events(ClusterAddress("team-ml", "run-1")))


# -- time-slicing: turns and memory ----------------------------------------------------------------


def test_two_busy_time_sliced_runs_each_take_twice_as_long_as_one_alone(shared):
    shared.apply(teams("ml") + shared_run("alone"), KINDS, now=at(0))
    run_until(shared, 0, 100)
    assert ran_for("alone") == 60
    shared.reset()
    shared.apply(teams("ml") + shared_run("run-a") + shared_run("run-b"), KINDS, now=at(0))
    run_until(shared, 0, 200)
    assert where("run-a") == where("run-b") == ("t4-0", 0)
    assert ran_for("run-a") == ran_for("run-b") == pytest.approx(120)
    assert training_status(observed(shared, "run-a", "team-ml")).state == TrainingPhase.SUCCEEDED


@pytest.mark.parametrize("step", [5, 13])
def test_turns_follow_who_is_busy_whatever_the_ticks(shared, step):
    """A alone for 30 s, then A and B take turns until A's 60 s of work are done, then B alone."""
    shared.apply(teams("ml") + shared_run("run-a"), KINDS, now=at(0))
    run_until(shared, 0, 29, step)
    shared.apply(shared_run("run-b"), KINDS, now=at(30))
    run_until(shared, 30, 300, step)
    a, b = pod_row("run-a"), pod_row("run-b")
    assert (a.started_at, b.started_at) == (at(10), at(40))
    # A: 30 s alone, then its other 30 s of work at half speed (60 s); B: 30 s of work at half
    # speed until A ends, then 30 s at full speed.
    assert (a.finished_at, b.finished_at) == (at(100), at(130))


def test_a_time_sliced_runs_log_steps_at_the_shared_speed(shared):
    """Its steps (and the progress an ETA is read from) follow the work it got done, not the clock: A alone
    for 30 s, then at half speed beside B. A's 60 s of work end at 100 s, with its last step."""
    shared.apply(teams("ml") + shared_run("run-a"), KINDS, now=at(0))
    run_until(shared, 0, 29, 5)
    shared.apply(shared_run("run-b"), KINDS, now=at(30))
    run_until(shared, 30, 70, 5)

    def steps(workload: str, seconds: float) -> list[tuple[str, int]]:
        lines = shared.logs(ClusterAddress("team-ml", workload), pod_row(workload).name, tail=None, now=at(seconds))
        return [(line.split()[0], int(line.split("step=")[1].split()[0])) for line in lines
                if " step=" in line and "SLIPWAY_PROGRESS" not in line]

    # Started at 10 s, alone until B starts at 40 s (30 s of work), then 1 s of work per 2 s: 45 s of work by 70 s,
    # a line every 10 s of work (20 steps each) — 4 lines, where the clock's 60 s would have printed 6.
    a = steps("run-a", 70)
    assert a == [("2026-11-22T10:00:20Z", 20), ("2026-11-22T10:00:30Z", 40), ("2026-11-22T10:00:40Z", 60),
                 ("2026-11-22T10:01:00Z", 80)]  # 30 s of work by 40 s; the 40th second of work at 60 s
    run_until(shared, 75, 130, 5)
    later = steps("run-a", 130)
    assert later[:4] == a  # a line keeps its time from one read to the next (a log reader follows it by time)
    assert later[-1] == ("2026-11-22T10:01:40Z", 120)  # its 60 s of work done at 100 s: the last of its 120 steps
    progress = [line for line in shared.logs(ClusterAddress("team-ml", "run-a"), pod_row("run-a").name, tail=None,
                                             now=at(130)) if "SLIPWAY_PROGRESS" in line]
    assert progress[-1].endswith("SLIPWAY_PROGRESS step=120 total=120")


def test_a_pod_pinned_idle_does_not_slow_the_busy_one(shared):
    shared.apply(teams("ml") + shared_run("busy") + shared_run("idle", util=3, duration="300s"), KINDS, now=at(0))
    run_until(shared, 0, 100)
    assert where("busy") == where("idle") and ran_for("busy") == 60


def test_a_memory_hungry_run_on_a_time_sliced_gpu_is_oomkilled_naming_the_sharing(shared):
    shared.apply(teams("ml") + [obj for i in range(3) for obj in shared_endpoint(f"ep-{i}")], KINDS, now=at(0))
    run_until(shared, 0, 30)
    shared.apply(shared_run("hungry", memory_gb=12), KINDS, now=at(35))
    run_until(shared, 35, 90)
    assert where("hungry") == ("t4-0", 0)
    status = training_status(observed(shared, "hungry", "team-ml"))
    sharing = ("GPU memory is shared with 3 other pods on this time-sliced GPU: they hold 6.0 GiB of its "
               "15.0 GiB, this pod asked for 12.0 GiB")
    assert status.state == TrainingPhase.FAILED
    assert f"OOMKilled (exit 137): {sharing}" in status.reason
    (pod,) = observed(shared, "hungry", "team-ml").pods
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] == sharing
    logs = shared.logs(ClusterAddress("team-ml", "hungry"), pod["metadata"]["name"])
    assert f"CUDA out of memory. {sharing}" in logs[-2]
    # The others run on, ready.
    for i in range(3):
        assert endpoint_status(observed(shared, f"ep-{i}", "team-ml")).replicas == 1


def test_a_server_its_gpus_memory_kills_crash_loops_until_the_memory_is_free(shared):
    shared.apply(teams("ml") + shared_run("big", memory_gb=12, duration="120s"), KINDS, now=at(0))
    run_until(shared, 0, 15)
    shared.apply(shared_endpoint("ep-1", memory_gb=4), KINDS, now=at(20))
    run_until(shared, 20, 80)
    status = endpoint_status(observed(shared, "ep-1", "team-ml"))
    assert status.replicas == 0
    assert ("CrashLoopBackOff after OOMKilled (exit 137): GPU memory is shared with 1 other pod on this "
            "time-sliced GPU: they hold 12.0 GiB of its 15.0 GiB, this pod asked for 4.0 GiB") in status.reason
    crashed = annotations(shared, "ep-1")  # it holds none of the GPU, and takes no turns on it
    assert (crashed["sandbox.slipway.dev/gpu-memory-mib"], crashed["sandbox.slipway.dev/gpu-utilization"]) == ("0", "0")
    run_until(shared, 85, 200)  # the run ends after its 120 s (the crashed server takes no turns)
    assert ran_for("big") == 120
    status = endpoint_status(observed(shared, "ep-1", "team-ml"))
    assert status.replicas == 1 and "OOMKilled" not in status.reason


# -- MPS -------------------------------------------------------------------------------------------


def test_an_mps_client_over_its_share_of_memory_fails_alone_and_nobody_slows_down(shared):
    shared.apply(teams("ml") + shared_run("small", A10G_MPS2) + shared_run("large", A10G_MPS2, memory_gb=16),
                 KINDS, now=at(0))
    run_until(shared, 0, 100)
    assert where("small") == where("large") == ("a10g-0", 0)
    status = training_status(observed(shared, "large", "team-ml"))
    assert status.state == TrainingPhase.FAILED
    assert ("OOMKilled (exit 137): MPS limits each of this GPU's 2 clients to 11.2 GiB of its 22.5 GiB; "
            "this pod asked for 16.0 GiB") in status.reason
    assert training_status(observed(shared, "small", "team-ml")).state == TrainingPhase.SUCCEEDED
    assert ran_for("small") == 60


def test_another_teams_mps_pod_is_kept_off_the_node_and_the_same_teams_joins(shared):
    shared.apply(teams("ml", "nlp") + shared_run("ml-1", A10G_MPS2, team="ml"), KINDS, now=at(0))
    shared.tick(at(0))
    shared.apply(shared_run("nlp-1", A10G_MPS2, team="nlp"), KINDS, now=at(1))
    shared.tick(at(1))
    shared.apply(shared_run("ml-2", A10G_MPS2, team="ml"), KINDS, now=at(2))
    shared.tick(at(2))
    assert [where(name)[0] for name in ("ml-1", "nlp-1", "ml-2")] == ["a10g-0", "a10g-1", "a10g-0"]


def test_on_the_demos_two_mps_nodes_each_team_gets_a_node_and_a_third_waits_as_the_scheduler_says(east):
    east.apply(teams("ml-research", "nlp", "vision") + shared_run("ml-1", A10G_MPS2, team="ml-research"), KINDS,
               now=at(0))
    east.tick(at(0))
    east.apply(shared_run("nlp-1", A10G_MPS2, team="nlp") + shared_run("ml-2", A10G_MPS2, team="ml-research"),
               KINDS, now=at(1))
    east.tick(at(1))
    assert where("ml-2") == where("ml-1") == ("east-a10g-0", 0)  # beside its team's pod, on the same A10G
    assert where("nlp-1") == ("east-a10g-1", 0)  # another team: the other node (one A10G per node)
    east.apply(shared_run("vision-1", A10G_MPS2, team="vision"), KINDS, now=at(2))
    east.tick(at(2))
    assert unschedulable(east, "vision-1", "team-vision") == (
        "0/8 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match pod anti-affinity rules, "
        "6 node(s) didn't match Pod's node affinity/selector.")  # ml-research's node is full, nlp's another team's


def test_the_contract_term_without_a_namespace_selector_looks_in_its_own_namespace_only(shared):
    """Kubernetes applies a term with neither namespaces nor namespaceSelector to the pod's own
    namespace: each team has its own, so such a term never keeps two teams apart."""
    shared.apply(teams("ml", "nlp") + shared_run("ml-1", A10G_MPS2, team="ml", all_namespaces=False), KINDS,
                 now=at(0))
    shared.tick(at(0))
    shared.apply(shared_run("nlp-1", A10G_MPS2, team="nlp", all_namespaces=False), KINDS, now=at(1))
    shared.tick(at(1))
    assert where("nlp-1") == where("ml-1") == ("a10g-0", 0)


# -- anti-affinity in general ----------------------------------------------------------------------


def _with_anti_affinity(objects: list[dict], labels: dict[str, str], terms: list[dict]) -> list[dict]:
    objects = copy.deepcopy(objects)
    template = objects[0]["spec"]["template"]
    template["metadata"]["labels"].update(labels)
    if terms:
        template["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}
    return objects


def test_anti_affinity_keeps_any_labelled_pods_apart_and_says_whose_rule_it_is(backend):
    spread = [{"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}]
    backend.apply(teams("ml"), KINDS, now=at(0))
    for name in ("cache-1", "cache-2", "cache-3"):
        backend.apply(_with_anti_affinity(training(name, duration="600s"), {"app": "cache"}, spread), KINDS,
                      now=at(0))
    # No terms of its own, but the running caches' rule selects it.
    backend.apply(_with_anti_affinity(training("plain", duration="600s"), {"app": "cache"}, []), KINDS, now=at(0))
    # Its own term selects no running pod (none has the label): it goes where there is room.
    backend.apply(_with_anti_affinity(training("other", duration="600s"), {"app": "web"}, [
        {"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
         "topologyKey": "kubernetes.io/hostname"}]), KINDS, now=at(0))
    backend.tick(at(0))
    assert [where(name)[0] for name in ("cache-1", "cache-2", "other")] == ["gpu-h100-0", "gpu-h100-1", "gpu-h100-0"]
    spot = "2 node(s) had untolerated taint {slipway.dev/capacity-type: spot}"
    elsewhere = "4 node(s) didn't match Pod's node affinity/selector."
    assert unschedulable(backend, "cache-3", "team-ml") == (
        f"0/8 nodes are available: 2 node(s) didn't match pod anti-affinity rules, {spot}, {elsewhere}")
    assert unschedulable(backend, "plain", "team-ml") == (
        f"0/8 nodes are available: 2 node(s) didn't satisfy existing pods anti-affinity rules, {spot}, {elsewhere}")


@pytest.mark.parametrize(
    ("term", "message"),
    [
        ({"labelSelector": {"matchLabels": {"app": "x"}}}, r"topologyKey: Required value: can not be empty"),
        ({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]},
          "topologyKey": "kubernetes.io/hostname"}, r'operator: Invalid value: "Near": not a valid selector operator'),
        ({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]},
          "topologyKey": "kubernetes.io/hostname"}, r"values: Required value: must be specified"),
        ({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]},
          "topologyKey": "kubernetes.io/hostname"}, r"values: Forbidden: may not be specified"),
    ],
)
def test_the_api_server_refuses_a_malformed_anti_affinity_term(backend, term, message):
    job = _with_anti_affinity(training("run-1", flavor=L4), {}, [term])
    with pytest.raises(Invalid, match=r'Job.batch "run-1" is invalid: spec.template.spec.affinity.podAntiAffinity.'
                                      r"requiredDuringSchedulingIgnoredDuringExecution\[0\]\..*" + message):
        backend.apply(teams("ml") + job, KINDS, now=at(0))


# -- what the simulated DCGM exporter reports -------------------------------------------------------


def test_dcgm_reports_each_pods_part_of_a_shared_gpu_and_the_gpus_sum(shared):
    shared.apply(teams("ml") + shared_run("ts-a", util=80, duration="600s") + shared_run("ts-b", util=80,
                                                                                       duration="600s")
                 + shared_run("mps-a", A10G_MPS2, util=80, duration="600s", memory_gb=3)
                 + shared_run("mps-b", A10G_MPS2, util=60, duration="600s"), KINDS, now=at(0))
    run_until(shared, 0, 20)
    # Time-sliced: two busy pods take turns, each gets half the GPU's time. MPS: each its share.
    assert [annotations(shared, name)["sandbox.slipway.dev/gpu-utilization"] for name in
            ("ts-a", "ts-b", "mps-a", "mps-b")] == ["40", "40", "40", "30"]
    workloads = shared.observe(KINDS)
    per_workload = shared.gpu_telemetry(workloads)
    assert per_workload[ClusterAddress("team-ml", "ts-a")].util_pct == 40
    # Each pod's memory and power are its own; the GPU's heat and (time-sliced) free memory the GPU's.
    (ts_a,) = per_workload[ClusterAddress("team-ml", "ts-a")].gpus
    (ts_b,) = per_workload[ClusterAddress("team-ml", "ts-b")].gpus
    assert ts_a.gpu == ts_b.gpu and ts_a.temp_c is not None and ts_a.temp_c == ts_b.temp_c
    assert (ts_a.fb_used_mib, ts_a.fb_free_mib) == (2048, 15360 - 4096)
    devices = {(d.node, d.gpu): d for d in shared.gpu_devices(workloads)}
    t4 = devices[("t4-0", 0)]
    assert (t4.sharing, t4.utilization, t4.memory_used_mib, t4.memory_mib) == ("time-slicing", 80, 4096, 15360)
    assert sorted(t4.pods) == [f"team-ml/{pod_row('ts-a').name}", f"team-ml/{pod_row('ts-b').name}"]
    a10g = devices[("a10g-0", 0)]
    assert (a10g.sharing, a10g.utilization, a10g.memory_used_mib, len(a10g.pods)) == ("mps", 70, 5120, 2)
    assert devices[("a10g-0", 1)].pods == () and devices[("a10g-1", 0)].utilization == 0
    (mps_a,) = per_workload[ClusterAddress("team-ml", "mps-a")].gpus
    # An MPS client's share is all the memory it has: its fullness is against that.
    assert (mps_a.fb_used_mib, mps_a.fb_total_mib) == (3072, a10g.memory_mib / 2)
    # One pod's own view agrees with the cluster-wide one.
    (pod,) = shared.pods(ClusterAddress("team-ml", "ts-a"), now=at(20))
    assert pod["metadata"]["annotations"]["sandbox.slipway.dev/gpu-utilization"] == "40"


def test_sandbox_status_shows_each_shared_gpus_pods_utilisation_and_memory(shared, capsys):
    shared.apply(teams("ml") + shared_run("ts-a", util=80, duration="600s", memory_gb=5)
                 + shared_run("ts-b", util=80, duration="600s"), KINDS, now=at(0))
    run_until(shared, 0, 20)
    call_command("sandbox", "status")
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()
            if line.startswith(("t4-0/", "a10g-"))}
    assert rows["t4-0/0"] == ["time-slicing", "x4", "2", "80%", "7.0/15.0"]
    assert rows["a10g-0/1"] == ["mps", "x2", "0", "0%", "0.0/22.5"]
