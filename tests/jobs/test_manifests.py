"""The training run's pure builders (:mod:`jobs.manifests`): golden files, schema validation, and the rules they must keep.

Golden files live in ``tests/jobs/golden/``. After an intended change, regenerate them with

    SLIPWAY_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/jobs/test_manifests.py

and review the diff like code. The rules every builder keeps are in ``tests/cluster/manifest_rules.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from cluster.specs import ClusterConfig
from jobs.manifests import PATCH_MANAGER, TRAINER_NODE, build_training, build_trainjob
from tests.cluster import crd_schema, samples
from tests.cluster.manifest_rules import CUSTOM_KINDS, check_argv, check_hardened, check_labels, pod_specs
from tests.golden import K8S_VERSIONS, all_objects, assert_golden_manifests

GOLDEN = Path(__file__).parent / "golden"


VARIANTS: dict[str, Any] = {
    "training_job": lambda: build_training(samples.training(), samples.CONFIG),
    "training_job_spot_defaults": lambda: build_training(
        samples.training(
            spot=True, cpu=None, memory_gb=None, shm_gb=None, max_runtime_minutes=None, volumes=(), env=(), args=()
        ),
        samples.CONFIG,
    ),
    "training_pytorchjob": lambda: build_training(samples.training(workers=3, gpus_per_worker=8), samples.CONFIG),
    "training_pytorchjob_volcano": lambda: build_training(samples.training(workers=2), samples.VOLCANO),
    "training_pytorchjob_scheduler_plugins": lambda: build_training(samples.training(workers=4), samples.PLUGINS),
    # Secret env: the pods name the Secret and a key per variable; the values are in the Secret only.
    "training_job_secret_env": lambda: build_training(
        samples.training(secret_env=("HF_TOKEN", "WANDB_API_KEY")), samples.CONFIG),
    "training_pytorchjob_secret_env": lambda: build_training(
        samples.training(workers=2, secret_env=("HF_TOKEN",)), samples.CONFIG),
    # The checkpoint contract: env, the claim Slipway provides (kept across attempts), the notice file, the grace.
    "training_job_checkpoint": lambda: build_training(
        samples.training(checkpoint=samples.checkpoint(attempt=2, resume_from="/slipway/checkpoints/step-1000.pt",
                                                       grace_seconds=120,
                                                       report_url="http://slipway-web.slipway-system.svc/api/v1/runs/42/checkpoints/")),
        samples.CONFIG),
    "training_pytorchjob_checkpoint_volume": lambda: build_training(
        samples.training(workers=3, secret_env=("HF_TOKEN",),
                         checkpoint=samples.checkpoint(claim="team-checkpoints", provided=False)), samples.VOLCANO),
    "training_pytorchjob_checkpoint_provided": lambda: build_training(
        samples.training(workers=2, env=(), checkpoint=samples.checkpoint(storage_class="nfs-rwx")), samples.CONFIG),
    # Shared GPUs: one unit per pod, the labels GFD puts on shared nodes; MPS one team per node, no /dev/shm of ours.
    "training_job_time_sliced": lambda: build_training(
        samples.training(flavor=samples.T4_TS4, gpus_per_worker=1, cpu=None, memory_gb=None, shm_gb=None,
                         volumes=()), samples.CONFIG),
    "training_job_mps": lambda: build_training(
        samples.training(flavor=samples.A10G_MPS2, gpus_per_worker=1, shm_gb=None), samples.CONFIG),
    # Trainer v2 (docs/training.md; not submitted yet): a TrainJob on the cluster's PyTorch runtime.
    "training_trainjob": lambda: [build_trainjob(samples.training(workers=3, gpus_per_worker=8), samples.CONFIG,
                                                 "torch-distributed")],
    "training_trainjob_secret_env_checkpoint": lambda: [build_trainjob(
        samples.training(workers=2, secret_env=("HF_TOKEN",), env=(("NCCL_DEBUG", "INFO"),),
                         checkpoint=samples.checkpoint(attempt=2, resume_from="/slipway/checkpoints/step-1000.pt",
                                                       grace_seconds=120)),
        samples.CONFIG, "torch-distributed")],
    "training_trainjob_spot_defaults": lambda: [build_trainjob(
        samples.training(workers=2, spot=True, cpu=None, memory_gb=None, shm_gb=None, max_runtime_minutes=None,
                         volumes=(), env=(), args=()), samples.VOLCANO, "torch-distributed")],
}


def _all_objects() -> list[tuple[str, dict[str, Any]]]:
    return all_objects(VARIANTS)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_it_matches_the_golden_file(variant: str) -> None:
    assert_golden_manifests(GOLDEN, variant, VARIANTS[variant]())


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(
    ("label", "obj"), [o for o in _all_objects() if o[1]["kind"] not in CUSTOM_KINDS]
)
def test_it_renders_core_objects_valid_in_strict_mode(label: str, obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(("label", "obj"), [o for o in _all_objects() if o[1]["kind"] == "PyTorchJob"])
def test_it_renders_pytorchjob_pod_templates_valid_in_strict_mode(
    label: str, obj: dict[str, Any], version: str
) -> None:
    for role, replica in obj["spec"]["pytorchReplicaSpecs"].items():
        template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {
                "name": f"{obj['metadata']['name']}-{role.lower()}",
                "namespace": obj["metadata"]["namespace"],
            },
            "template": replica["template"],
        }
        kubernetes_validate.validate(template, version, strict=True)


@pytest.mark.parametrize(
    ("label", "obj"), [o for o in _all_objects() if o[1]["kind"] in CUSTOM_KINDS]
)
def test_it_renders_custom_resources_valid_against_their_crd(label: str, obj: dict[str, Any]) -> None:
    name = obj["kind"].lower()
    assert crd_schema.errors(name, obj) == []


def test_it_rejects_fields_the_crd_does_not_know() -> None:
    # The strict walker must fail on what an API server would silently prune.
    pytorchjob = build_training(samples.training(workers=2), samples.VOLCANO)[0]
    pytorchjob["spec"]["runPolicy"]["schedulingPolicy"]["minMember"] = 2  # Volcano's PodGroup field, not PyTorchJob's
    pytorchjob["spec"]["pytorchReplicaSpecs"]["Master"]["replica"] = 1
    assert len(crd_schema.errors("pytorchjob", pytorchjob)) == 2


@pytest.mark.parametrize(("label", "obj"), _all_objects())
def test_it_labels_every_object_for_slipway(label: str, obj: dict[str, Any]) -> None:
    check_labels(label, obj)


@pytest.mark.parametrize(("label", "obj"), [o for o in _all_objects() if pod_specs(o[1])])
def test_it_hardens_every_pod(label: str, obj: dict[str, Any]) -> None:
    check_hardened(obj)


def test_it_can_allow_root_containers_when_configured() -> None:
    job = build_training(samples.training(), ClusterConfig(run_as_non_root=False))[0]
    pod = job["spec"]["template"]["spec"]
    assert "runAsNonRoot" not in pod["securityContext"]
    assert "runAsNonRoot" not in pod["containers"][0]["securityContext"]
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_it_builds_a_job_for_single_node_training() -> None:
    [job] = build_training(samples.training(), samples.CONFIG)
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("batch/v1", "Job", "run-42")
    assert job["spec"]["backoffLimit"] == 2
    assert job["spec"]["activeDeadlineSeconds"] == 7200
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["command"] == ["python", "train.py"] and container["args"] == ["--epochs", "10"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["requests"]["memory"] == "64Gi"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert {"name": "data-0", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}} in pod["volumes"]
    assert {"name": "data-1", "mountPath": "/ckpt"} in container["volumeMounts"]
    # The user's env reaches the container unchanged (the sandbox reads these).
    assert {"name": "SLIPWAY_SIM_OUTCOME", "value": "succeed"} in container["env"]
    assert job["metadata"]["annotations"] == {"slipway.dev/name": "resnet baseline"}
    assert "affinity" not in pod


def test_it_places_spot_work_on_spot_nodes_only() -> None:
    pod = build_training(samples.training(spot=True), samples.CONFIG)[0]["spec"]["template"]["spec"]
    assert {"key": "slipway.dev/capacity-type", "operator": "Equal", "value": "spot", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "slipway.dev/capacity-type", "operator": "In", "values": ["spot"]}]}]


def test_it_builds_a_pytorchjob_for_distributed_training() -> None:
    [job] = build_training(samples.training(workers=3, gpus_per_worker=8), samples.CONFIG)
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert {role: r["replicas"] for role, r in replicas.items()} == {"Master": 1, "Worker": 2}
    for replica in replicas.values():
        container = replica["template"]["spec"]["containers"][0]
        assert container["name"] == "pytorch"
        assert container["command"][:4] == ["torchrun", "--nnodes=3", "--nproc_per_node=8", "--no-python"]
        assert container["command"][4:] == ["python", "train.py"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["NCCL_DEBUG"] == "WARN" and env["SLIPWAY_SIM_DURATION"] == "30"
        assert "schedulerName" not in replica["template"]["spec"]
    assert job["spec"]["runPolicy"] == {"backoffLimit": 2, "cleanPodPolicy": "Running", "activeDeadlineSeconds": 7200}


@pytest.mark.parametrize(
    ("config", "scheduler"), [(samples.VOLCANO, "volcano"), (samples.PLUGINS, "scheduler-plugins-scheduler")]
)
def test_it_gang_schedules_when_the_cluster_can(config: ClusterConfig, scheduler: str) -> None:
    [job] = build_training(samples.training(workers=4), config)
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 4}
    assert {r["template"]["spec"]["schedulerName"] for r in job["spec"]["pytorchReplicaSpecs"].values()} == {scheduler}


def test_it_renders_the_same_manifests_every_time() -> None:
    assert build_training(samples.training(workers=2), samples.VOLCANO) == build_training(
        samples.training(workers=2), samples.VOLCANO
    )


@pytest.mark.parametrize(("label", "obj"), [o for o in _all_objects() if pod_specs(o[1])])
def test_it_never_wraps_the_argv_in_a_shell(label: str, obj: dict[str, Any]) -> None:
    check_argv(label, obj)


def trainjob_pod(trainjob: dict[str, Any]) -> dict[str, Any]:
    """The pod template Slipway's runtime patch sets on the trainer's job (its labels and spec)."""
    [patch] = trainjob["spec"]["runtimePatches"]
    assert patch["manager"] == PATCH_MANAGER
    [job] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert job["name"] == TRAINER_NODE
    return job["template"]["spec"]["template"]


def test_it_builds_a_trainjob_on_the_clusters_runtime_from_the_spec() -> None:
    job = build_trainjob(samples.training(workers=3, gpus_per_worker=8), samples.CONFIG, "torch-distributed")
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob",
                                                                         "run-42")
    spec = job["spec"]
    assert spec["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                  "name": "torch-distributed"}
    assert spec["activeDeadlineSeconds"] == 7200  # the runtime limit
    trainer = spec["trainer"]
    assert (trainer["image"], trainer["numNodes"], trainer["numProcPerNode"]) == (
        "registry.example.com/vision/train:1.4", 3, 8)
    assert trainer["command"] == ["torchrun", "--nnodes=3", "--nproc_per_node=8", "--no-python", "python", "train.py"]
    assert trainer["args"] == ["--epochs", "10"]
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "8"
    assert trainer["resourcesPerNode"]["requests"]["memory"] == "64Gi"
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["NCCL_DEBUG"] == "WARN" and env["SLIPWAY_SIM_DURATION"] == "30"
    pod = trainjob_pod(job)
    # Slipway's labels on the pods: the observation groups them by these, as a PyTorchJob's.
    assert pod["metadata"]["labels"] == {k: job["metadata"]["labels"][k] for k in (
        "app.kubernetes.io/managed-by", "slipway.dev/team", "slipway.dev/workload")}
    pod = pod["spec"]
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert {"name": "data-0", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}} in pod["volumes"]
    [container] = pod["containers"]
    assert container["name"] == TRAINER_NODE and "env" not in container  # Trainer v2 takes env in trainer only
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert "affinity" not in pod and "terminationGracePeriodSeconds" not in pod


def test_a_trainjobs_pods_are_hardened_as_far_as_a_patch_may_set() -> None:
    pod = trainjob_pod(build_trainjob(samples.training(workers=2), samples.CONFIG, "torch-distributed"))["spec"]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert not any("hostPath" in v for v in pod["volumes"])
    ctx = pod["containers"][0]["securityContext"]
    assert (ctx["allowPrivilegeEscalation"], ctx["privileged"], ctx["capabilities"]) == (False, False, {"drop": ["ALL"]})


def test_a_trainjob_carries_secret_env_by_reference_and_the_checkpoint_contract() -> None:
    job = build_trainjob(samples.training(workers=2, secret_env=("HF_TOKEN",), env=(("NCCL_DEBUG", "INFO"),),
                                          checkpoint=samples.checkpoint(attempt=2, grace_seconds=120)),
                         samples.CONFIG, "torch-distributed")
    env = job["spec"]["trainer"]["env"]
    names = [e["name"] for e in env]
    assert len(names) == len(set(names))  # a list keyed by name: the user's NCCL_DEBUG replaces the default
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in env
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "run-42-env", "key": "HF_TOKEN"}}} in env
    assert {"name": "SLIPWAY_ATTEMPT", "value": "2"} in env
    assert not any(e.get("value") == "secret" for e in env)  # values live in the Secret only
    pod = trainjob_pod(job)["spec"]
    assert pod["terminationGracePeriodSeconds"] == 120
    assert {"name": "slipway-checkpoints", "persistentVolumeClaim": {"claimName": "run-42-checkpoints"}} in pod["volumes"]
    assert {"name": "slipway-checkpoints", "mountPath": "/slipway/checkpoints"} in pod["containers"][0]["volumeMounts"]


def test_a_spot_trainjob_goes_to_spot_nodes_and_one_without_a_limit_has_no_deadline() -> None:
    job = build_trainjob(samples.training(workers=2, spot=True, max_runtime_minutes=None), samples.CONFIG, "rt")
    assert "activeDeadlineSeconds" not in job["spec"]
    pod = trainjob_pod(job)["spec"]
    assert {"key": "slipway.dev/capacity-type", "operator": "Equal", "value": "spot", "effect": "NoSchedule"} in pod[
        "tolerations"]
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


def test_the_trainjob_crd_refuses_what_a_runtime_patch_may_not_set() -> None:
    """The strict walker fails on pod fields a patch may not carry: the runtime sets them (docs/training.md)."""
    job = build_trainjob(samples.training(workers=2), samples.CONFIG, "torch-distributed")
    pod = trainjob_pod(job)["spec"]
    pod["automountServiceAccountToken"] = False
    pod["restartPolicy"] = "OnFailure"
    pod["containers"][0]["resources"] = {}
    found = " ".join(crd_schema.errors("trainjob", job))
    assert all(field in found for field in ("automountServiceAccountToken", "restartPolicy", "'resources'")), found


def test_it_never_wraps_the_trainjobs_argv_in_a_shell() -> None:
    trainer = build_trainjob(samples.training(workers=2), samples.CONFIG, "torch-distributed")["spec"]["trainer"]
    argv = trainer["command"] + trainer["args"]
    assert argv[0] == "torchrun" and trainer["command"][-2:] == ["python", "train.py"]
    assert not {"sh", "bash", "-c"} & set(argv)
