"""An atomic pool's provisioning objects (:mod:`cluster.manifests.provisioning`): golden files, the
ProvisioningRequest validated against its CRD (tests/cluster/schemas/provisioningrequest.json), its PodTemplates
with kubernetes-validate, and the pod sets and consume annotations of each kind of workload object.

Golden files live in ``tests/cluster/golden/``. After an intended change, regenerate them with

    SLIPWAY_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/cluster/test_provisioning.py

and review the diff like code.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from cluster.manifests import labels
from cluster.manifests.provisioning import MAX_POD_SETS, build_provisioning, consuming, pod_sets
from cluster.manifests.training_runtimes import runtime_name
from cluster.pools import ATOMIC_CLASS, CLASS_ANNOTATION, CONSUME_ANNOTATION
from cluster.training import TRAINJOB
from inference.manifests import build_endpoint
from inference.specs import CanarySpec
from jobs.manifests import build_training
from tests.cluster import crd_schema, samples
from tests.cluster.manifest_rules import CUSTOM_KINDS
from tests.golden import K8S_VERSIONS, all_objects, assert_golden_manifests

GOLDEN = Path(__file__).parent / "golden"
CONSUMED = {CONSUME_ANNOTATION: "run-42", CLASS_ANNOTATION: ATOMIC_CLASS}


def _run(**overrides: Any) -> list[dict[str, Any]]:
    return build_training(samples.training(**overrides), samples.CONFIG)


def _trainjob(framework: str = "pytorch", **overrides: Any) -> list[dict[str, Any]]:
    spec = samples.training(framework=framework, training_api=TRAINJOB, runtime=runtime_name(framework),
                            **{"workers": 4, **overrides})
    return build_training(spec, samples.CONFIG)


def _canary_endpoint() -> list[dict[str, Any]]:
    return build_endpoint(samples.endpoint(revision=3, canary=CanarySpec(
        revision=4, image="registry.example.com/vision/serve:2.1", replicas=2)), samples.CONFIG)


def _without_consume(value: Any) -> Any:
    """``value`` without the consume annotations anywhere in it (an annotations map they leave empty goes too)."""
    if isinstance(value, list):
        return [_without_consume(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key == "annotations" and isinstance(item, dict):
            item = {k: v for k, v in item.items() if k not in CONSUMED}
            if not item:
                continue
        out[key] = _without_consume(item)
    return out


def _provisioning(name: str, objects: list[dict[str, Any]], **kwargs: Any) -> list[dict[str, Any]]:
    return build_provisioning(name, "team-vision", labels("vision", name), pod_sets(objects), **kwargs)


VARIANTS: dict[str, Any] = {
    "provisioning_job": lambda: _provisioning("run-42", _run()),
    # A Master and two Workers of one template: one pod set of 3.
    "provisioning_pytorchjob": lambda: _provisioning("run-42", _run(workers=3, gpus_per_worker=8)),
    # A TrainJob's trainer pods: resourcesPerNode, image and where the runtime patch places them, times numNodes.
    "provisioning_trainjob_mpi_spot": lambda: _provisioning("run-42", _trainjob("mpi", spot=True)),
    # The stable Deployment's one replica (KEDA owns its count) and the candidate's two: two pod sets.
    "provisioning_endpoint_canary": lambda: _provisioning("ep-7", _canary_endpoint(), valid_until_seconds=900),
}


def _all_objects() -> list[tuple[str, dict[str, Any]]]:
    return all_objects(VARIANTS)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_it_matches_the_golden_file(variant: str) -> None:
    assert_golden_manifests(GOLDEN, variant, VARIANTS[variant]())


@pytest.mark.parametrize(("label", "obj"), [o for o in _all_objects() if o[1]["kind"] == "ProvisioningRequest"])
def test_it_renders_the_request_valid_against_its_crd(label: str, obj: dict[str, Any]) -> None:
    assert crd_schema.errors("provisioningrequest", obj) == []


def test_the_crd_check_rejects_what_an_api_server_would_refuse_or_prune() -> None:
    [*_templates, request] = VARIANTS["provisioning_job"]()
    broken = copy.deepcopy(request)
    broken["spec"]["podSets"][0]["count"] = 0  # minimum 1
    broken["spec"]["parameters"]["ValidUntilSeconds"] = 600  # parameters are strings
    broken["spec"]["podSets"][0]["template"] = {}  # a pod set refers to a PodTemplate, it holds none
    assert len(crd_schema.errors("provisioningrequest", broken)) == 3


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(("label", "obj"), [o for o in _all_objects() if o[1]["kind"] == "PodTemplate"])
def test_it_renders_pod_templates_valid_in_strict_mode(label: str, obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_is_the_workloads_and_the_request_refers_to_its_templates(variant: str) -> None:
    *templates, request = VARIANTS[variant]()
    workload = request["metadata"]["name"]
    assert {obj["kind"] for obj in templates} == {"PodTemplate"}
    for obj in (*templates, request):
        assert obj["metadata"]["labels"] == labels("vision", workload)  # observed and deleted with the workload
        assert obj["metadata"]["namespace"] == "team-vision"
    assert [s["podTemplateRef"]["name"] for s in request["spec"]["podSets"]] == [
        t["metadata"]["name"] for t in templates]
    assert request["spec"]["provisioningClassName"] == "best-effort-atomic-scale-up.autoscaling.x-k8s.io"


def test_a_job_is_one_pod_set_of_its_template() -> None:
    [job] = _run()
    [(template, count)] = pod_sets([job])
    assert (template, count) == (job["spec"]["template"], 1)
    assert VARIANTS["provisioning_job"]()[-1]["spec"]["parameters"] == {"ValidUntilSeconds": "600"}


def test_a_pytorchjobs_equal_replicas_merge_into_one_pod_set() -> None:
    [job] = _run(workers=4, gpus_per_worker=8)
    [(template, count)] = pod_sets([job])
    assert count == 4
    assert template == job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    # Replica specs that differ stay apart, each with its own count.
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"]["zone"] = "b"
    assert [count for _template, count in pod_sets([job])] == [1, 3]


def test_a_trainjobs_trainer_pods_are_made_from_the_trainer_and_its_runtime_patch() -> None:
    [trainjob] = _trainjob("mpi", gpus_per_worker=2, spot=True)
    [(template, count)] = pod_sets([trainjob])
    patched = trainjob["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][1]
    pod = patched["template"]["spec"]["template"]
    assert count == 4
    assert template["metadata"] == pod["metadata"]
    assert template["spec"]["containers"] == [{"name": "node", "image": trainjob["spec"]["trainer"]["image"],
                                               "resources": trainjob["spec"]["trainer"]["resourcesPerNode"]}]
    assert {key: template["spec"][key] for key in ("nodeSelector", "tolerations", "affinity")} == {
        key: pod["spec"][key] for key in ("nodeSelector", "tolerations", "affinity")}
    assert "volumes" not in template["spec"]  # where a pod may run is all the autoscaler's simulation needs


def test_an_endpoints_deployments_are_one_pod_set_each_and_its_service_none() -> None:
    objects = _canary_endpoint()
    sets = pod_sets(objects)
    assert [count for _template, count in sets] == [1, 2]
    assert [t["metadata"]["labels"]["slipway.dev/track"] for t, _count in sets] == ["stable", "canary"]


def test_pods_without_a_gpu_and_objects_without_pods_are_no_pod_set() -> None:
    [job] = _run()
    cpu_only = copy.deepcopy(job)
    for resources in cpu_only["spec"]["template"]["spec"]["containers"][0]["resources"].values():
        resources.pop("nvidia.com/gpu")
    idle = copy.deepcopy(job)
    idle["spec"]["parallelism"] = 0
    service = next(obj for obj in build_endpoint(samples.endpoint(), samples.CONFIG) if obj["kind"] == "Service")
    assert pod_sets([cpu_only, idle, service]) == []
    with pytest.raises(ValueError, match="nothing to provision"):
        build_provisioning("run-42", "team-vision", labels("vision", "run-42"), [])


def test_it_refuses_what_the_crd_would() -> None:
    [(template, _count)] = pod_sets(_run())
    many = [({**template, "metadata": {"labels": {"i": str(i)}}}, 1) for i in range(MAX_POD_SETS + 1)]
    with pytest.raises(ValueError, match="at most 32"):
        build_provisioning("run-42", "team-vision", {}, many)
    with pytest.raises(ValueError, match="at least one pod"):
        build_provisioning("run-42", "team-vision", {}, [(template, 0)])


@pytest.mark.parametrize("objects", [
    pytest.param(_run, id="job"), pytest.param(lambda: _run(workers=3), id="pytorchjob"),
    pytest.param(_trainjob, id="trainjob"), pytest.param(lambda: _trainjob("deepspeed"), id="trainjob-launcher"),
    pytest.param(_canary_endpoint, id="endpoint-canary"),
])
def test_consuming_annotates_every_gpu_pod_and_changes_nothing_else(objects: Any) -> None:
    original = objects()
    consumed = consuming(original, "run-42")
    assert original == objects()  # its input untouched
    metas = []
    for obj in consumed:
        if obj["kind"] == "TrainJob":
            jobs = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
            metas += [job["template"]["spec"]["template"]["metadata"] for job in jobs]
        elif obj["kind"] == "PyTorchJob":
            metas += [replica["template"]["metadata"] for replica in obj["spec"]["pytorchReplicaSpecs"].values()]
        elif obj["kind"] in ("Job", "Deployment"):
            metas.append(obj["spec"]["template"]["metadata"])
    assert metas and all(CONSUMED.items() <= meta["annotations"].items() for meta in metas)

    assert [_without_consume(obj) for obj in consumed] == original
    # The pod sets read the same before and after: a template describes the pods, not the request they consume.
    assert pod_sets(consumed) == pod_sets(original)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_consumed_objects_stay_valid(version: str) -> None:
    for obj in consuming([*_run(workers=3), *_trainjob("mpi"), *_canary_endpoint(), *_run()], "run-42"):
        if obj["kind"] in CUSTOM_KINDS:
            assert crd_schema.errors(obj["kind"].lower(), obj) == [], obj["kind"]
        else:
            kubernetes_validate.validate(obj, version, strict=True)
