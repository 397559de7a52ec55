"""Training runs: a ``batch/v1 Job`` on one node; across nodes a ``kubeflow.org/v1 PyTorchJob`` on a cluster with
the v1 Training Operator, a ``trainer.kubeflow.org/v1alpha1 TrainJob`` on a cluster with Kubeflow Trainer v2
(docs/training.md). Which one is the spec's ``training_api``: the API of the cluster the run lands on."""

from __future__ import annotations

from cluster.manifests.common import (
    SHM_PATH,
    Manifest,
    container_security,
    default_memory_gb,
    env_list,
    metadata,
    pod_labels,
    pod_spec,
    resources,
    shm_volume,
    volume_entries,
)
from cluster.manifests.secrets import secret_env_refs
from cluster.pools import disruption_annotations
from cluster.specs import SHARING_MPS, ClusterConfig
from cluster.training import PYTORCH, TRAINER_CONTAINER, TRAINJOB, TRAINJOB_API, trainer_jobs
from jobs.checkpoint_contract import build_checkpoint_claim, contract_env, contract_volumes
from jobs.specs import TrainingSpec

#: The training-operator requires the PyTorch container to have this name.
PYTORCH_CONTAINER = "pytorch"
#: schedulerName per gang scheduler (scheduler-plugins' default deployment name).
SCHEDULER_NAMES = {"volcano": "volcano", "scheduler-plugins": "scheduler-plugins-scheduler"}
#: NCCL defaults for pod networking. Users' env comes after these, so they can override them.
NCCL_ENV: tuple[tuple[str, str], ...] = (
    ("NCCL_DEBUG", "WARN"),
    # Turn a hung collective into an error (and a restart) instead of a job stuck forever.
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    # The pod network; without it NCCL may pick loopback or a docker bridge.
    ("NCCL_SOCKET_IFNAME", "eth0"),
)


def _shm_gb(spec: TrainingSpec) -> float:
    """Explicit shm, else a quarter of the container memory (it counts against the memory limit)."""
    if spec.shm_gb is not None:
        return float(spec.shm_gb)
    memory = (
        float(spec.memory_gb) if spec.memory_gb is not None else default_memory_gb(spec.gpus_per_worker, spec.flavor)
    )
    return max(1.0, memory / 4)


def _pod_template(spec: TrainingSpec, config: ClusterConfig, *, container: Manifest, restart_policy: str) -> Manifest:
    """The pod template of the run's Job or PyTorchJob replicas around ``container`` (completed here: the
    contract's env, the mounts, resources and security)."""
    volumes, mounts, env = _pod_storage(spec)
    container["env"] = [*container.get("env", []), *env]
    if not container["env"]:
        del container["env"]
    container["volumeMounts"] = mounts
    container["resources"] = resources(spec.flavor, spec.gpus_per_worker, spec.cpu, spec.memory_gb)
    container["securityContext"] = container_security(config)
    pod = pod_spec(
        container=container,
        flavor=spec.flavor,
        config=config,
        restart_policy=restart_policy,
        volumes=volumes,
        team=spec.team,
        spot=spec.spot,
    )
    if spec.checkpoint is not None:
        # SIGTERM, then this long to save before SIGKILL (a preemption deletes with the same grace).
        pod["terminationGracePeriodSeconds"] = spec.checkpoint.grace_seconds
    return {"metadata": _pod_metadata(spec), "spec": pod}


def _pod_metadata(spec: TrainingSpec) -> Manifest:
    """A pod template's metadata: the workload's labels (pod templates are named by their controller), and the
    annotations that keep an autoscaler's scale-down from evicting the pod — unless the run has the checkpoint
    contract, so saves and resumes: its node may go (docs/pools.md)."""
    meta: Manifest = {"labels": pod_labels(spec.flavor, spec.team, spec.object_name)}
    if annotations := disruption_annotations(preemptible=spec.checkpoint is not None):
        meta["annotations"] = annotations
    return meta


def _pod_storage(spec: TrainingSpec) -> tuple[list[Manifest], list[Manifest], list[Manifest]]:
    """The run's pod volumes, its container's mounts and the env the checkpoint contract adds (one rule for
    every controller: the Job, the PyTorchJob's replicas and the TrainJob's nodes)."""
    volumes, mounts = volume_entries(spec.volumes)
    env: list[Manifest] = []
    if spec.checkpoint is not None:
        contract_vols, contract_mounts = contract_volumes(spec.checkpoint)
        volumes, mounts = [*volumes, *contract_vols], [*mounts, *contract_mounts]
        env = contract_env(spec.object_name, spec.checkpoint)
    # An MPS pod's /dev/shm is the MPS daemon's: the device plugin mounts the node's MPS shm
    # directory there (its clients talk to the daemon through it), and a volume of ours on the
    # same path would hide one of the two mounts.
    if spec.flavor.sharing != SHARING_MPS:
        volumes, mounts = [shm_volume(_shm_gb(spec)), *volumes], [{"name": "dshm", "mountPath": SHM_PATH}, *mounts]
    return volumes, mounts, env


def build_job(spec: TrainingSpec, config: ClusterConfig) -> Manifest:
    """Single-node training as a Job.

    ``restartPolicy: Never`` makes every failed attempt a new pod, so ``backoffLimit``
    counts attempts and a failed pod keeps its termination reason for the status mapping.
    """
    container: Manifest = {"name": "main", "image": spec.image, "command": list(spec.command)}
    if spec.args:
        container["args"] = list(spec.args)
    env = env_list(spec.env) + secret_env_refs(spec.object_name, spec.secret_env)
    if env:
        container["env"] = env
    job_spec: Manifest = {
        "backoffLimit": spec.max_retries,
        "completions": 1,
        "parallelism": 1,
        # A pod disrupted from outside (its node drained or reclaimed, a preemption: the condition
        # DisruptionTarget) is no failure of the run's: it spends no retry (Slipway requeues a
        # spot run whose node went, workloads.cycle.preemption.interrupt).
        "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
    }
    if spec.active_deadline_seconds:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds
    job_spec["template"] = _pod_template(spec, config, container=container, restart_policy="Never")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(spec.object_name, spec.namespace, spec.team, spec.object_name, spec.name),
        "spec": job_spec,
    }


def _torchrun_command(spec: TrainingSpec) -> list[str]:
    """``torchrun`` in front of the user's argv.

    ``--no-python`` runs the argv as given (``python train.py`` or a console script) once
    per local rank; the training-operator injects the rendezvous (PET_MASTER_ADDR,
    PET_NODE_RANK …), which torchrun reads from the environment.
    """
    return [
        "torchrun",
        f"--nnodes={spec.workers}",
        f"--nproc_per_node={spec.gpus_per_worker}",
        "--no-python",
        *spec.command,
    ]


def build_pytorchjob(spec: TrainingSpec, config: ClusterConfig) -> Manifest:
    """Distributed training as a PyTorchJob: one Master and ``workers - 1`` Workers."""
    replica_specs: Manifest = {}
    for role, replicas in (("Master", 1), ("Worker", spec.workers - 1)):
        if replicas < 1:
            continue
        container: Manifest = {
            "name": PYTORCH_CONTAINER,
            "image": spec.image,
            "command": _torchrun_command(spec),
        }
        if spec.args:
            container["args"] = list(spec.args)
        container["env"] = env_list(NCCL_ENV + spec.env) + secret_env_refs(spec.object_name, spec.secret_env)
        # OnFailure restarts a crashed container in place; runPolicy.backoffLimit caps the restarts.
        template = _pod_template(spec, config, container=container, restart_policy="OnFailure")
        if config.gang_scheduler:
            template["spec"]["schedulerName"] = SCHEDULER_NAMES[config.gang_scheduler]
        replica_specs[role] = {"replicas": replicas, "restartPolicy": "OnFailure", "template": template}
    run_policy: Manifest = {
        "backoffLimit": spec.max_retries,
        # Finished jobs must not keep straggler pods (and their GPUs); failed pods stay for reasons.
        "cleanPodPolicy": "Running",
    }
    if spec.active_deadline_seconds:
        run_policy["activeDeadlineSeconds"] = spec.active_deadline_seconds
    if config.gang_scheduler:
        # All-or-nothing: a half-scheduled job would hold GPUs while waiting for its peers.
        run_policy["schedulingPolicy"] = {"minAvailable": spec.workers}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata(spec.object_name, spec.namespace, spec.team, spec.object_name, spec.name),
        "spec": {
            "nprocPerNode": str(spec.gpus_per_worker),
            "pytorchReplicaSpecs": replica_specs,
            "runPolicy": run_policy,
        },
    }


#: Who writes the TrainJob's runtime patch (its ``manager``, the key the patches are merged by).
PATCH_MANAGER = "slipway.dev/portal"


def build_trainjob(spec: TrainingSpec, config: ClusterConfig) -> Manifest:
    """Distributed training as a Trainer v2 TrainJob on the cluster's runtime for the run's framework.

    The trainer (image, command, every env variable — the secret env and the checkpoint contract's too —, nodes,
    resources per node) is the TrainJob's own: Trainer's admission refuses a runtime patch that sets env on the
    trainer's container (``node``). What the CRD does not let a trainer say — the checkpoint contract's volumes,
    dshm, node selector, tolerations, affinity, security, the grace period and the labels the portal observes
    pods by — goes through ``runtimePatches`` to every replicated job that runs the trainer
    (:func:`cluster.training.trainer_jobs`).
    Gang scheduling is the runtime's (its ``podGroupPolicy``: deploy/training-runtimes/), as are the
    restarts (its JobSet's ``failurePolicy``): a TrainJob cannot set either.
    """
    trainer: Manifest = {"image": spec.image}
    trainer["command"] = _torchrun_command(spec) if spec.framework == PYTORCH else list(spec.command)
    if spec.args:
        trainer["args"] = list(spec.args)
    volumes, mounts, contract = _pod_storage(spec)
    trainer["env"] = env_list(NCCL_ENV + spec.env) + secret_env_refs(spec.object_name, spec.secret_env) + contract
    trainer["numNodes"] = spec.workers
    if spec.framework in (PYTORCH, "mpi", "deepspeed"):
        trainer["numProcPerNode"] = spec.gpus_per_worker  # a process (an MPI slot) per GPU
    trainer["resourcesPerNode"] = resources(spec.flavor, spec.gpus_per_worker, spec.cpu, spec.memory_gb)
    container: Manifest = {"name": TRAINER_CONTAINER, "volumeMounts": mounts}
    container["securityContext"] = container_security(config)
    pod = pod_spec(container=container, flavor=spec.flavor, config=config, restart_policy="", volumes=volumes,
                   team=spec.team, spot=spec.spot)
    for unpatchable in ("restartPolicy", "automountServiceAccountToken", "enableServiceLinks"):
        del pod[unpatchable]  # the runtime's template sets them (deploy/training-runtimes/)
    if spec.checkpoint is not None:
        pod["terminationGracePeriodSeconds"] = spec.checkpoint.grace_seconds
    meta = metadata(spec.object_name, spec.namespace, spec.team, spec.object_name, spec.name)
    # The labels the portal observes by go on the pods only: the JobSet's child Jobs must not look like a run's
    # own Job (the cycle lists Jobs by them), and the TrainJob carries them itself.
    jobs = [{"name": name, "template": {"spec": {"template": {"metadata": _pod_metadata(spec), "spec": pod}}}}
            for name in trainer_jobs(spec.framework)]
    body: Manifest = {
        "runtimeRef": {"apiGroup": TRAINJOB_API[0].split("/")[0], "kind": "ClusterTrainingRuntime",
                       "name": spec.runtime},
        "trainer": trainer,
        "runtimePatches": [{"manager": PATCH_MANAGER,
                            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}}}],
    }
    if spec.active_deadline_seconds:
        body["activeDeadlineSeconds"] = spec.active_deadline_seconds
    return {"apiVersion": TRAINJOB_API[0], "kind": "TrainJob", "metadata": meta, "spec": body}


def build_training(spec: TrainingSpec, config: ClusterConfig) -> list[Manifest]:
    """One Job when ``workers == 1``, else one TrainJob on a Trainer v2 cluster (``spec.training_api``), else
    one PyTorchJob; named ``spec.object_name``.

    With the checkpoint contract and no claim of the team's, the claim Slipway provides follows
    it: an apply stops at the first object the API server refuses, so a refused run leaves no
    claim behind (its pods wait the moment until the claim exists).
    """
    claim = build_checkpoint_claim(spec)
    if spec.workers <= 1:
        main = build_job(spec, config)
    elif spec.training_api == TRAINJOB:
        main = build_trainjob(spec, config)
    else:
        main = build_pytorchjob(spec, config)
    return [main] if claim is None else [main, claim]
