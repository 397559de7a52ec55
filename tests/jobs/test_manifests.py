"""The training run's pure builders (:mod:`jobs.manifests`): golden files, schema validation, and the rules they must keep.

Golden files live in ``tests/jobs/golden/``. After an intended change, regenerate them with

    SLIPWAY_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/jobs/test_manifests.py

and review the diff like code. The rules every builder keeps are in ``tests/cluster/manifest_rules.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from cluster.manifests.training_runtimes import build_runtime, runtime_name
from cluster.specs import ClusterConfig
from cluster.training import FRAMEWORKS, TRAINER_CONTAINER, TRAINJOB, trainer_jobs
from jobs.manifests import build_training
from tests.cluster import crd_schema, samples
from tests.cluster.manifest_rules import CUSTOM_KINDS, check_argv, check_hardened, check_labels, pod_specs
from tests.golden import K8S_VERSIONS, all_objects, assert_golden_manifests

GOLDEN = Path(__file__).parent / "golden"


def trainjob_run(framework: str = "pytorch", **overrides: Any) -> Any:
    """A distributed run of ``framework`` placed on a Trainer v2 cluster offering Slipway's runtime for it."""
    values: dict[str, Any] = {"workers": 2}
    values.update(overrides)
    return samples.training(framework=framework, training_api=TRAINJOB, runtime=runtime_name(framework), **values)


VARIANTS: dict[str, Any] = {
    "training_job": lambda: build_training(samples.training(), samples.CONFIG),
    "training_job_spot_defaults": lambda: build_training(
        samples.training(
            spot=True, cpu=None, memory_gb=None, shm_gb=None, active_deadline_seconds=None, volumes=(), env=(), args=()
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
    # Trainer v2: a TrainJob per framework on its runtime (the gang policy is the runtime's: no config changes it).
    "training_trainjob_pytorch": lambda: build_training(trainjob_run(workers=3, gpus_per_worker=8), samples.CONFIG),
    "training_trainjob_deepspeed": lambda: build_training(trainjob_run("deepspeed"), samples.PLUGINS),
    "training_trainjob_jax": lambda: build_training(trainjob_run("jax", workers=4), samples.VOLCANO),
    "training_trainjob_mpi": lambda: build_training(trainjob_run("mpi", workers=3), samples.CONFIG),
    "training_trainjob_xgboost": lambda: build_training(trainjob_run("xgboost", gpus_per_worker=1), samples.CONFIG),
    "training_trainjob_secret_env": lambda: build_training(
        trainjob_run(secret_env=("HF_TOKEN", "WANDB_API_KEY")), samples.CONFIG),
    "training_trainjob_checkpoint": lambda: build_training(
        trainjob_run(secret_env=("HF_TOKEN",), checkpoint=samples.checkpoint(
            attempt=2, resume_from="/slipway/checkpoints/step-1000.pt", grace_seconds=120,
            report_url="http://slipway-web.slipway-system.svc/api/v1/runs/42/checkpoints/")), samples.CONFIG),
    "training_trainjob_spot_defaults": lambda: build_training(
        trainjob_run(spot=True, cpu=None, memory_gb=None, shm_gb=None, active_deadline_seconds=None, volumes=(), env=(),
                     args=()), samples.CONFIG),
    "training_trainjob_mps": lambda: build_training(
        trainjob_run("mpi", flavor=samples.A10G_MPS2, gpus_per_worker=1, shm_gb=None), samples.CONFIG),
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


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_trainjob_patches_exactly_the_jobs_and_container_its_runtime_runs_the_trainer_in(framework: str) -> None:
    """Trainer's admission refuses a patch naming a replicated job or a container its runtime lacks, and a
    patch the runtime's other jobs would miss leaves their pods without dshm, labels or placement."""
    [trainjob] = build_training(trainjob_run(framework), samples.CONFIG)
    runtime = build_runtime(framework)
    assert trainjob["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                              "name": runtime["metadata"]["name"]}
    runtime_jobs = {job["name"]: {c["name"] for c in job["template"]["spec"]["template"]["spec"]["containers"]}
                    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    [patch] = trainjob["spec"]["runtimePatches"]
    patched = {job["name"]: {c["name"] for c in job["template"]["spec"]["template"]["spec"]["containers"]}
               for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]}
    assert patched == runtime_jobs == {name: {TRAINER_CONTAINER} for name in trainer_jobs(framework)}


@pytest.mark.parametrize(("label", "obj"), [o for o in _all_objects() if o[1]["kind"] == "TrainJob"])
def test_a_trainjob_sets_env_through_its_trainer_only(label: str, obj: dict[str, Any]) -> None:
    """Trainer's admission refuses a runtime patch with env on the trainer's container ("must not have envs
    for the … node containers"): the secret env and the checkpoint contract's are the trainer's."""
    [patch] = obj["spec"]["runtimePatches"]
    for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]
        assert pod["metadata"]["labels"]["slipway.dev/workload"] == obj["metadata"]["name"]  # observed by it
        assert [c for c in pod["spec"]["containers"] if "env" in c] == []
        assert "resources" not in pod["spec"]["containers"][0]  # the trainer's resourcesPerNode
    env = {e["name"]: e for e in obj["spec"]["trainer"]["env"]}
    if label.startswith("training_trainjob_secret_env"):
        assert env["WANDB_API_KEY"] == {"name": "WANDB_API_KEY",
                                        "valueFrom": {"secretKeyRef": {"name": "run-42-env", "key": "WANDB_API_KEY"}}}
    if label.startswith("training_trainjob_checkpoint"):
        assert env["SLIPWAY_ATTEMPT"] == {"name": "SLIPWAY_ATTEMPT", "value": "2"}
        assert "SLIPWAY_RUN_TOKEN" in env and "HF_TOKEN" in env


def test_a_trainjob_asks_a_process_per_gpu_where_its_framework_launches_them() -> None:
    trainer = build_training(trainjob_run(workers=3, gpus_per_worker=8), samples.CONFIG)[0]["spec"]["trainer"]
    assert trainer["numNodes"] == 3 and trainer["numProcPerNode"] == 8  # an integer: the CRD's type
    assert trainer["command"][:4] == ["torchrun", "--nnodes=3", "--nproc_per_node=8", "--no-python"]
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "8"
    jax = build_training(trainjob_run("jax", workers=4), samples.CONFIG)[0]["spec"]["trainer"]
    assert "numProcPerNode" not in jax and jax["command"] == ["python", "train.py"]


#: The CEL rules of the TrainJob CRD's root (the strict walker runs no CEL): its name is an RFC 1035 label.
TRAINJOB_NAME_RULES = ("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')", "size(self.metadata.name) <= 63")


def trainjob_name_ok(name: str) -> bool:
    """:data:`TRAINJOB_NAME_RULES`, in Python."""
    return re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) is not None and len(name) <= 63


def test_the_crds_name_rule_is_the_one_checked_here() -> None:
    """So an upstream change of the rule fails here rather than on a cluster."""
    rules = crd_schema.fixture("trainjob")["openAPIV3Schema"]["x-kubernetes-validations"]
    assert tuple(rule["rule"] for rule in rules) == TRAINJOB_NAME_RULES
    assert not trainjob_name_ok("42-run") and not trainjob_name_ok("run_42") and not trainjob_name_ok("r" * 64)


@pytest.mark.parametrize(("label", "obj"), [o for o in _all_objects() if o[1]["kind"] == "TrainJob"])
def test_a_trainjob_is_named_as_the_crds_cel_rule_requires(label: str, obj: dict[str, Any]) -> None:
    assert trainjob_name_ok(obj["metadata"]["name"])


def test_it_rejects_what_trainers_runtime_patch_type_does_not_know() -> None:
    # The patch's pod template is Trainer's restricted type, not a PodTemplateSpec: the fixture keeps it.
    trainjob = build_training(trainjob_run(), samples.CONFIG)[0]
    pod = trainjob["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]["spec"]
    pod["schedulerName"] = "volcano"  # the runtime's podGroupPolicy says the gang scheduler
    pod["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}  # the trainer's resourcesPerNode
    trainjob["spec"]["trainer"]["numProcPerNode"] = "8"  # an integer in Trainer v2.3
    assert sorted(e.split(":")[0].rsplit("/", 1)[-1] for e in crd_schema.errors("trainjob", trainjob)) == [
        "0", "numProcPerNode", "spec"]  # containers/0: resources; template/spec: schedulerName


def _gpu_pod_metadata(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The metadata of every pod template a run's main object renders (a TrainJob's: its runtime patches')."""
    if obj["kind"] == "TrainJob":
        jobs = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        return [job["template"]["spec"]["template"]["metadata"] for job in jobs]
    if obj["kind"] == "PyTorchJob":
        return [replica["template"]["metadata"] for replica in obj["spec"]["pytorchReplicaSpecs"].values()]
    return [obj["spec"]["template"]["metadata"]]


@pytest.mark.parametrize("variant", [v for v in sorted(VARIANTS) if "checkpoint" not in v])
def test_a_run_without_the_checkpoint_contract_is_never_evicted_by_scale_down(variant: str) -> None:
    """Karpenter's and Cluster Autoscaler's do-not-disrupt annotations on every pod of a run that cannot resume."""
    main = VARIANTS[variant]()[0]
    for meta in _gpu_pod_metadata(main):
        assert meta["annotations"] == {"karpenter.sh/do-not-disrupt": "true",
                                       "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


@pytest.mark.parametrize("variant", [v for v in sorted(VARIANTS) if "checkpoint" in v])
def test_a_run_with_the_checkpoint_contract_lets_scale_down_take_its_node(variant: str) -> None:
    """It saves on SIGTERM and resumes from its checkpoint: no annotation keeps its node."""
    main = VARIANTS[variant]()[0]
    metas = _gpu_pod_metadata(main)
    assert metas and all("annotations" not in meta for meta in metas)
