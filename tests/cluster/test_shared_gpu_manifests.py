"""Pods of time-sliced and MPS flavors, as NVIDIA's device plugin and GPU Feature Discovery expect them.

The golden files (``training_job_time_sliced``, ``training_job_mps``: tests/jobs/test_manifests.py;
``endpoint_time_sliced``, ``endpoint_mps_spot``, ``endpoint_mps_renamed``: tests/inference/test_manifests.py)
are rendered and validated with the others of their kind; these tests pin the rules those files follow
(the shared pod pieces of ``cluster.manifests.common``, on both kinds' pods).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from cluster.backends.base import NodeCapacity
from cluster.capacity import offers
from cluster.manifests.common import node_selector
from cluster.nvidia import gfd_selector, selector_conflicts
from cluster.specs import FlavorSpec
from inference.manifests import build_endpoint
from jobs.manifests import build_training
from tests.cluster import samples

SHARED = [samples.T4_TS4, samples.A10G_MPS2, samples.A10G_MPS2_RENAMED]
#: What GFD writes on the nodes of each sample flavor (k8s-device-plugin internal/lm/resource.go).
GFD_LABELS = {
    "t4-ts4": {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "4",
               "nvidia.com/gpu.sharing-strategy": "time-slicing"},
    "a10g-mps2": {"nvidia.com/gpu.product": "NVIDIA-A10G-SHARED", "nvidia.com/gpu.replicas": "2",
                  "nvidia.com/gpu.sharing-strategy": "mps"},
    # Renamed (renameByDefault): the resource is nvidia.com/gpu.shared and the product keeps its plain name.
    "a10g-mps2-shared": {"nvidia.com/gpu.product": "NVIDIA-A10G", "nvidia.com/gpu.replicas": "2",
                         "nvidia.com/gpu.sharing-strategy": "mps"},
}


def pods(flavor: FlavorSpec, spot: bool = False) -> list[dict[str, Any]]:
    """The pod templates of a single-node run and of an endpoint on ``flavor``, one unit each."""
    job = build_training(samples.training(flavor=flavor, gpus_per_worker=1, spot=spot), samples.CONFIG)[0]
    deployment = build_endpoint(samples.endpoint(flavor=flavor, spot=spot), samples.CONFIG)[0]
    return [job["spec"]["template"], deployment["spec"]["template"]]


@pytest.mark.parametrize("flavor", SHARED, ids=lambda f: f.name)
def test_it_selects_the_labels_gfd_puts_on_the_flavors_shared_nodes(flavor: FlavorSpec) -> None:
    for pod in pods(flavor):
        selector = pod["spec"]["nodeSelector"]
        assert {k: selector[k] for k in GFD_LABELS[flavor.name]} == GFD_LABELS[flavor.name]
        assert set(selector) - set(GFD_LABELS[flavor.name]) == {k for k, _ in flavor.node_selector}


def test_it_keeps_whole_gpu_and_mig_selectors_to_the_product() -> None:
    assert node_selector(samples.A100) == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                                           "node.kubernetes.io/instance-type": "p4de.24xlarge"}
    assert node_selector(samples.MIG_1G) == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


@pytest.mark.parametrize("flavor", SHARED, ids=lambda f: f.name)
def test_a_shared_pod_requests_exactly_one_unit_of_the_flavors_resource(flavor: FlavorSpec) -> None:
    for pod in pods(flavor):
        [container] = pod["spec"]["containers"]
        for side in ("requests", "limits"):
            gpu = {k: v for k, v in container["resources"][side].items() if k.startswith("nvidia.com/")}
            assert gpu == {flavor.resource_name: "1"}


@pytest.mark.parametrize("flavor", SHARED, ids=lambda f: f.name)
def test_it_refuses_to_render_a_pod_asking_for_two_shared_units(flavor: FlavorSpec) -> None:
    # The device plugin's failRequestsGreaterThanOne would fail the pod: two replicas of one GPU are not two GPUs.
    with pytest.raises(ValueError, match="exactly 1 unit"):
        build_training(samples.training(flavor=flavor, gpus_per_worker=2), samples.CONFIG)
    with pytest.raises(ValueError, match="exactly 1 unit"):
        build_endpoint(samples.endpoint(flavor=flavor, gpus_per_replica=2), samples.CONFIG)


def _matches(expressions: list[dict[str, Any]], pod_labels: dict[str, str]) -> bool:
    """A labelSelector's matchExpressions (In / NotIn) against a pod's labels, as the scheduler reads them."""
    def one(expr: dict[str, Any]) -> bool:
        value = pod_labels.get(expr["key"])
        return value in expr["values"] if expr["operator"] == "In" else value not in expr["values"]
    return all(one(expr) for expr in expressions)


@pytest.mark.parametrize("flavor", [samples.A10G_MPS2, samples.A10G_MPS2_RENAMED], ids=lambda f: f.name)
def test_a_one_team_mps_pod_keeps_other_teams_pods_of_its_flavor_off_its_node(flavor: FlavorSpec) -> None:
    for pod in pods(flavor):
        assert pod["metadata"]["labels"]["slipway.dev/flavor"] == flavor.name
        [term] = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        # Every namespace: each team's pods live in their own, which a term without it would never see.
        assert term["namespaceSelector"] == {}
        expressions = term["labelSelector"]["matchExpressions"]
        other_team = {**pod["metadata"]["labels"], "slipway.dev/team": "nlp"}
        assert _matches(expressions, other_team)  # another team's pod of the flavor: kept apart
        assert not _matches(expressions, pod["metadata"]["labels"])  # its own team's: welcome
        assert not _matches(expressions, {**other_team, "slipway.dev/flavor": "t4-ts4"})  # another flavor: no matter


@pytest.mark.parametrize("flavor", [replace(samples.A10G_MPS2, one_team_per_gpu=False),
                                    replace(samples.T4_TS4, one_team_per_gpu=True)], ids=["mps-mixed", "time-sliced"])
def test_only_one_team_mps_pods_get_the_flavor_label_and_anti_affinity(flavor: FlavorSpec) -> None:
    for pod in pods(flavor, spot=True):
        assert "slipway.dev/flavor" not in pod["metadata"]["labels"]
        assert set(pod["spec"]["affinity"]) == {"nodeAffinity"}  # the spot rule alone


def test_an_mps_run_leaves_dev_shm_to_the_device_plugin() -> None:
    # The plugin mounts the MPS daemon's shm directory at /dev/shm; a volume of ours there would hide one of them.
    mps_job = pods(samples.A10G_MPS2)[0]
    [container] = mps_job["spec"]["containers"]
    assert all(m["mountPath"] != "/dev/shm" for m in container["volumeMounts"])
    assert all("emptyDir" not in v for v in mps_job["spec"]["volumes"])
    time_sliced_job = pods(samples.T4_TS4)[0]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in time_sliced_job["spec"]["containers"][0]["volumeMounts"]


def _node(resource: str, labels: dict[str, str]) -> NodeCapacity:
    return NodeCapacity("gpu-0", resource, 8, 0, labels=labels)


def test_placement_offers_a_shared_flavor_only_on_nodes_shared_its_way() -> None:
    t4_whole = FlavorSpec(name="t4", resource_name="nvidia.com/gpu", gpu_model="Tesla-T4")
    shared_t4 = _node("nvidia.com/gpu", GFD_LABELS["t4-ts4"])
    whole_t4 = _node("nvidia.com/gpu", {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.replicas": "1",
                                        "nvidia.com/gpu.sharing-strategy": "none"})
    assert offers(shared_t4, samples.T4_TS4) and not offers(whole_t4, samples.T4_TS4)
    # The whole-GPU selector matches no shared T4 (its product reads Tesla-T4-SHARED there).
    assert offers(whole_t4, t4_whole) and not offers(shared_t4, t4_whole)
    assert not offers(_node("nvidia.com/gpu", {**GFD_LABELS["t4-ts4"], "nvidia.com/gpu.replicas": "2"}), samples.T4_TS4)
    assert not offers(_node("nvidia.com/gpu", {**GFD_LABELS["t4-ts4"], "nvidia.com/gpu.sharing-strategy": "mps"}),
                      samples.T4_TS4)
    renamed = _node("nvidia.com/gpu.shared", {**GFD_LABELS["a10g-mps2-shared"],
                                              "node.kubernetes.io/instance-type": "g5.12xlarge"})
    assert offers(renamed, samples.A10G_MPS2_RENAMED) and not offers(renamed, samples.A10G_MPS2)


@pytest.mark.parametrize(("node_labels", "conflicts"), [
    ({"nvidia.com/gpu.product": "Tesla-T4"}, ["nvidia.com/gpu.product=Tesla-T4"]),
    ({"nvidia.com/gpu.sharing-strategy": "mps"}, ["nvidia.com/gpu.sharing-strategy=mps"]),
    ({"nvidia.com/gpu.replicas": "2"}, ["nvidia.com/gpu.replicas=2"]),
    ({**GFD_LABELS["t4-ts4"], "node.kubernetes.io/instance-type": "g4dn.12xlarge"}, []),
    ({}, []),
])
def test_it_names_the_node_labels_gfd_never_puts_on_a_time_sliced_node(node_labels, conflicts) -> None:
    assert selector_conflicts(node_labels, "Tesla-T4", "nvidia.com/gpu", "time-slicing", 4) == conflicts


@pytest.mark.parametrize(("sharing", "node_labels", "conflicts"), [
    ("mps", {"nvidia.com/gpu.product": "NVIDIA-A10G-SHARED"}, ["nvidia.com/gpu.product=NVIDIA-A10G-SHARED"]),
    ("mps", {"nvidia.com/gpu.product": "NVIDIA-A10G"}, []),
    ("none", {"nvidia.com/gpu.product": "NVIDIA-A10G-SHARED"}, ["nvidia.com/gpu.product=NVIDIA-A10G-SHARED"]),
    ("none", {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"},
     ["nvidia.com/gpu.sharing-strategy=time-slicing", "nvidia.com/gpu.replicas=4"]),
    ("none", {"nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.replicas": "1"}, []),
])
def test_it_names_the_node_labels_of_renamed_and_unshared_flavors_that_match_nothing(sharing, node_labels,
                                                                                     conflicts) -> None:
    resource = "nvidia.com/gpu.shared" if sharing == "mps" else "nvidia.com/gpu"
    replicas = 2 if sharing == "mps" else 1
    assert selector_conflicts(node_labels, "NVIDIA-A10G", resource, sharing, replicas) == conflicts


def test_the_gfd_rule_of_a_mig_flavor_is_the_product() -> None:
    assert gfd_selector("NVIDIA-A100-SXM4-80GB", "nvidia.com/mig-1g.10gb", "mig", 1) == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
