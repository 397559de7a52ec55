"""The sandbox scheduler: fit, taints, selectors, MIG, gangs, quota, and kube-scheduler's wording."""

from __future__ import annotations

from cluster.backends.base import ResourceKind
from sandbox.models import SimPod
from tests.sandbox.helpers import A100, H100, L4, MIG_1G, at, observed, ref, team_objects, training
from workloads.registry import resource_kinds


def _pods(backend, workload):
    return observed(backend, workload).pods


def _unschedulable_message(pod) -> str:
    (condition,) = pod["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("PodScheduled", "False", "Unschedulable")
    return condition["message"]


def _capacity(backend) -> dict[tuple[str, str], tuple[int, int]]:
    return {(c.node, c.resource_name): (c.in_use, c.allocatable) for c in backend.capacity()}


def test_it_binds_a_pod_to_a_node_of_the_flavor(backend):
    backend.apply(team_objects() + training("run-1", flavor=H100, gpus=4), resource_kinds(), now=at(0))
    backend.tick(at(0))
    (pod,) = _pods(backend, "run-1")
    assert pod["spec"]["nodeName"] == "gpu-h100-0"
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert _capacity(backend)[("gpu-h100-0", "nvidia.com/gpu")] == (4, 8)


def test_it_packs_by_fit_and_spreads_when_a_node_is_full(backend):
    backend.apply(team_objects(), resource_kinds(), now=at(0))
    for i in range(3):
        backend.apply(training(f"run-{i}", flavor=H100, gpus=5), resource_kinds(), now=at(0))
    backend.tick(at(0))
    nodes = sorted(p.node for p in SimPod.objects.order_by("name"))
    assert nodes == ["", "gpu-h100-0", "gpu-h100-1"]  # 5 + 5 on one node would not fit
    waiting = SimPod.objects.get(node="")
    assert waiting.message == (
        "0/8 nodes are available: 2 Insufficient nvidia.com/gpu, "
        "2 node(s) had untolerated taint {slipway.dev/capacity-type: spot}, "
        "4 node(s) didn't match Pod's node affinity/selector."
    )


def test_it_reports_insufficient_gpus_across_all_nodes(backend):
    job = training("run-1", flavor=H100, gpus=9)[0]
    pod_spec = job["spec"]["template"]["spec"]
    pod_spec.pop("nodeSelector")  # any GPU node would do, none has 9 free GPUs
    pod_spec["tolerations"].append({"key": "slipway.dev/capacity-type", "operator": "Exists"})
    for section in pod_spec["containers"][0]["resources"].values():
        section.update(cpu="4", memory="16Gi")  # small enough for every node: only GPUs are short
    backend.apply([*team_objects(), job], resource_kinds(), now=at(0))
    backend.tick(at(0))
    (pod,) = _pods(backend, "run-1")
    assert _unschedulable_message(pod) == "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    assert "nodeName" not in pod["spec"]
    events = [e for e in backend.events(ref("run-1")) if e.reason == "FailedScheduling"]
    assert [(e.type, e.object) for e in events] == [("Warning", f"Pod/{pod['metadata']['name']}")]


def test_it_keeps_pods_without_a_gpu_toleration_off_tainted_nodes(backend):
    job = training("run-1", flavor=L4)[0]
    job["spec"]["template"]["spec"]["tolerations"] = []
    backend.apply([*team_objects(), job], resource_kinds(), now=at(0))
    backend.tick(at(0))
    (pod,) = _pods(backend, "run-1")
    assert _unschedulable_message(pod) == "0/8 nodes are available: 8 node(s) had untolerated taint {nvidia.com/gpu: }."


def test_it_places_spot_work_only_on_spot_nodes(backend):
    from jobs.manifests import build_training
    from jobs.specs import TrainingSpec
    from tests.sandbox.helpers import CONFIG, NS, TEAM

    spec = TrainingSpec(object_name="run-spot", team=TEAM, namespace=NS, name="spot", image="img:1",
                        command=("python",), flavor=L4, spot=True)
    backend.apply(team_objects() + build_training(spec, CONFIG) + training("run-l4", flavor=L4), resource_kinds(), now=at(0))
    backend.tick(at(0))
    assert _pods(backend, "run-spot")[0]["spec"]["nodeName"].startswith("gpu-l4-spot-")
    assert not _pods(backend, "run-l4")[0]["spec"]["nodeName"].startswith("gpu-l4-spot-")


def test_it_lands_mig_workloads_only_on_the_mig_node(backend):
    backend.apply(team_objects(), resource_kinds(), now=at(0))
    for i in range(3):
        backend.apply(training(f"mig-{i}", flavor=MIG_1G, gpus=1), resource_kinds(), now=at(0))
    backend.tick(at(0))
    assert {p.node for p in SimPod.objects.all()} == {"gpu-a100-mig-0"}
    capacity = _capacity(backend)
    assert capacity[("gpu-a100-mig-0", "nvidia.com/mig-1g.10gb")] == (3, 10)
    assert capacity[("gpu-a100-0", "nvidia.com/gpu")] == (0, 8)
    assert capacity[("gpu-a100-mig-0", "nvidia.com/gpu")] == (0, 4)  # mixed strategy: the 4 GPUs left whole


def test_it_reports_insufficient_mig_slices(backend):
    backend.apply(team_objects() + training("mig-big", flavor=MIG_1G, gpus=33), resource_kinds(), now=at(0))
    backend.tick(at(0))
    (pod,) = _pods(backend, "mig-big")
    assert _unschedulable_message(pod) == (
        "0/8 nodes are available: 2 Insufficient nvidia.com/mig-1g.10gb, "
        "2 node(s) had untolerated taint {slipway.dev/capacity-type: spot}, "
        "4 node(s) didn't match Pod's node affinity/selector."
    )


def test_it_schedules_a_pytorchjob_as_a_gang(backend):
    backend.apply(team_objects() + training("dist", flavor=H100, gpus=8, workers=2), resource_kinds(), now=at(0))
    backend.tick(at(0))
    pods = _pods(backend, "dist")
    assert sorted(p["metadata"]["name"] for p in pods) == ["dist-master-0", "dist-worker-0"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["gpu-h100-0", "gpu-h100-1"]


def test_it_binds_no_pod_of_a_gang_that_does_not_fit_whole(backend):
    backend.apply(team_objects() + training("single", flavor=H100, gpus=4), resource_kinds(), now=at(0))
    backend.tick(at(0))
    backend.apply(training("dist", flavor=H100, gpus=8, workers=2), resource_kinds(), now=at(1))
    backend.tick(at(1))
    pods = _pods(backend, "dist")
    assert len(pods) == 2
    assert all("nodeName" not in p["spec"] for p in pods)  # one H100 node was free, yet nothing was bound
    assert "Insufficient nvidia.com/gpu" in _unschedulable_message(pods[0])
    used = sum(c.in_use for c in backend.capacity() if c.resource_name == "nvidia.com/gpu")
    assert used == 4
    # once the single-node job finishes, the gang fits and starts together
    backend.tick(at(80))
    backend.tick(at(81))
    assert sorted(p["spec"].get("nodeName", "") for p in _pods(backend, "dist")) == ["gpu-h100-0", "gpu-h100-1"]


def test_it_enforces_the_resource_quota_like_the_api_server(backend):
    backend.apply(team_objects((("nvidia.com/gpu", 4),)), resource_kinds(), now=at(0))
    backend.apply(training("run-1", flavor=A100, gpus=3), resource_kinds(), now=at(0))
    backend.apply(training("run-2", flavor=A100, gpus=2), resource_kinds(), now=at(0))
    backend.tick(at(0))
    assert _pods(backend, "run-2") == []
    (event,) = [e for e in backend.events(ref("run-2")) if e.reason == "FailedCreate"]
    assert event.type == "Warning" and event.object == "Job/run-2"
    assert event.message.startswith('Error creating: pods "run-2-')
    assert event.message.endswith(
        'is forbidden: exceeded quota: slipway-gpu-quota, requested: requests.nvidia.com/gpu=2, '
        "used: requests.nvidia.com/gpu=3, limited: requests.nvidia.com/gpu=4"
    )
    # Observed when asked for, as any kind is: the portal never does (no kind declares it).
    quotas = ResourceKind("", "v1", "ResourceQuota", "resourcequotas", observed=True)
    [team] = [o for o in backend.observe((quotas,)) if o.object_name == "team-ml"]
    quota = team.first("ResourceQuota")
    assert quota["status"] == {"hard": {"requests.nvidia.com/gpu": "4"}, "used": {"requests.nvidia.com/gpu": "3"}}
    backend.tick(at(5))  # still over quota: no duplicate event
    assert len([e for e in backend.events(ref("run-2")) if e.reason == "FailedCreate"]) == 1
    backend.tick(at(75))  # run-1 finished (60s + 10s pull): run-2 gets its pod
    assert len(_pods(backend, "run-2")) == 1


def test_it_reports_capacity_per_node_and_resource(backend):
    capacity = backend.capacity()
    totals: dict[str, int] = {}
    for row in capacity:
        totals[row.resource_name] = totals.get(row.resource_name, 0) + row.allocatable
    assert totals == {"nvidia.com/gpu": 32, "nvidia.com/mig-1g.10gb": 10, "nvidia.com/mig-2g.20gb": 2,
                      "nvidia.com/mig-3g.40gb": 4}
    assert len({row.node for row in capacity}) == 8
    h100 = next(row for row in capacity if row.node == "gpu-h100-0")
    assert h100.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert h100.labels["nvidia.com/gpu.count"] == "8"
    assert h100.free == 8
