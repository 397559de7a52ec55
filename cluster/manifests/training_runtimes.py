"""The Kubeflow Trainer v2 ``ClusterTrainingRuntime``s Slipway's TrainJobs refer to (pure; docs/training.md).

A TrainJob names a runtime (:func:`cluster.training.runtime_for`) and patches its JobSet template (the
training runs' builder does); the runtime says the rest: the framework's ``mlPolicy``, the gang
scheduler's ``podGroupPolicy`` and the JobSet to run. Slipway ships one runtime per framework of
:data:`cluster.training.FRAMEWORKS`, named ``slipway-<framework>`` and built here, so the replicated jobs and the
container its TrainJobs patch are the names :data:`cluster.training.TRAINER_JOBS` and
:data:`cluster.training.TRAINER_CONTAINER` say. The sandbox installs the same runtimes on its Trainer v2 clusters.

What every runtime holds, and why:

* each replicated job runs pods that never restart in place (``restartPolicy: Never``, ``backoffLimit: 0``):
  a failed node fails its Job, and the JobSet restarts the whole set (``failurePolicy.maxRestarts``) — the gang
  restarts as one, as a PyTorchJob's does;
* a pod **disrupted** by the cluster (its spot node reclaimed, its node drained: the condition
  ``DisruptionTarget``) fails its Job by the pod failure policy, and the JobSet fails at once for it
  (``failurePolicy.rules``: ``FailJobSet`` on ``PodFailurePolicy``) instead of restarting in place: the portal
  sees the disrupted pod and sends the run back to its queue, to resume from its checkpoint on capacity that
  is there (docs/training.md "Status, logs and progress") — a restart would wait, holding GPUs, for a node
  that is gone;
* pods get no service-account token and no service links (the run's pods never talk to the API server);
* the gang policy matches the cluster's gang scheduler (scheduler-plugins' coscheduling, or Volcano), so a run
  starts all of its nodes or none; without one, none is set.
"""

from __future__ import annotations

from cluster.manifests.common import Manifest
from cluster.training import (
    FRAMEWORK_LABEL,
    FRAMEWORKS,
    NODE_JOB,
    RUNTIME_PREFIX,
    TRAINER_CONTAINER,
    TRAINJOB_API,
    trainer_jobs,
)

#: The label that marks the replicated jobs running the trainer (upstream's runtimes carry it; the Trainer
#: applies a TrainJob's ``trainer`` to them).
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
#: Each framework's ``mlPolicy`` member (upstream calls PyTorch ``torch``; DeepSpeed runs under MPI).
ML_POLICY = {"pytorch": "torch", "deepspeed": "mpi", "jax": "jax", "mpi": "mpi", "xgboost": "xgboost"}
#: The label value upstream's runtimes use for a framework (what :func:`cluster.training.runtime_of` reads back).
FRAMEWORK_LABEL_VALUE = {"pytorch": "torch"}
#: The default image of each runtime's trainer container: a TrainJob always sets its own (``trainer.image``).
DEFAULT_IMAGES = {
    "pytorch": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
    "deepspeed": "ghcr.io/kubeflow/trainer/deepspeed-runtime:v2.3.0",
    "jax": "nvcr.io/nvidia/jax:25.04-py3",
    "mpi": "ghcr.io/kubeflow/trainer/mlx-runtime:v2.3.0",
    "xgboost": "ghcr.io/kubeflow/trainer/xgboost-runtime:v2.3.0",
}
#: The gang schedulers a runtime can name (``podGroupPolicy``), by the word ``SLIPWAY_GANG_SCHEDULER`` uses.
GANG_POLICIES = {"scheduler-plugins": "coscheduling", "volcano": "volcano"}
#: How long coscheduling waits for a whole gang before it gives the nodes back (upstream's default is 60 s;
#: a run of many large nodes on a busy cluster needs longer to be placed at once).
SCHEDULE_TIMEOUT_SECONDS = 120
#: The JobSet restarts a runtime allows: Slipway's default ``max_retries`` (a TrainJob cannot set its own).
MAX_RESTARTS = 2


def runtime_name(framework: str) -> str:
    return f"{RUNTIME_PREFIX}{framework}"


def _replicated_job(name: str, framework: str) -> Manifest:
    pod: Manifest = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [{"name": TRAINER_CONTAINER, "image": DEFAULT_IMAGES[framework]}],
    }
    return {
        "name": name,
        "replicas": 1,
        "template": {
            "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            "spec": {"backoffLimit": 0, "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
                     "template": {"spec": pod}},
        },
    }


def _ml_policy(framework: str) -> Manifest:
    member = ML_POLICY[framework]
    policy: Manifest = {"numNodes": 1}
    if member == "mpi":
        # The launcher is node 0 and runs the trainer too, so numNodes counts every GPU node.
        policy["mpi"] = {"mpiImplementation": "OpenMPI", "numProcPerNode": 1, "runLauncherAsNode": True}
    else:
        policy[member] = {}
    return policy


def build_runtime(framework: str, gang_scheduler: str | None = None) -> Manifest:
    """The ClusterTrainingRuntime ``slipway-<framework>`` for a cluster whose gang scheduler is ``gang_scheduler``
    (a word of :data:`GANG_POLICIES`, or None)."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}")
    spec: Manifest = {"mlPolicy": _ml_policy(framework)}
    if gang_scheduler:
        policy = GANG_POLICIES[gang_scheduler]
        spec["podGroupPolicy"] = {policy: {"scheduleTimeoutSeconds": SCHEDULE_TIMEOUT_SECONDS}
                                  if policy == "coscheduling" else {}}
    jobs = [_replicated_job(name, framework) for name in trainer_jobs(framework)]
    template: Manifest = {"failurePolicy": {"maxRestarts": MAX_RESTARTS, "rules": [
        {"name": "disrupted", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]},
        "replicatedJobs": jobs}
    if NODE_JOB in trainer_jobs(framework) and len(jobs) > 1:
        # MPI: the launcher finishing is the run finishing; its peers are reachable before they are ready.
        template["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["launcher"]}
        template["network"] = {"publishNotReadyAddresses": True}
    spec["template"] = {"spec": template}
    return {
        "apiVersion": TRAINJOB_API[0],
        "kind": "ClusterTrainingRuntime",
        "metadata": {
            "name": runtime_name(framework),
            "labels": {FRAMEWORK_LABEL: FRAMEWORK_LABEL_VALUE.get(framework, framework),
                       # Not managed-by: Slipway installs it once (deploy/), its cycle never observes or deletes it.
                       "app.kubernetes.io/part-of": "slipway"},
        },
        "spec": spec,
    }


def build_runtimes(gang_scheduler: str | None = None) -> list[Manifest]:
    """Every runtime Slipway relies on, one per framework."""
    return [build_runtime(framework, gang_scheduler) for framework in FRAMEWORKS]
