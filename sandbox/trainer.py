"""What Kubeflow Trainer v2 makes of a TrainJob on a sandbox cluster (pure): the runtimes installed there,
its admission webhook's verdict, and the JobSet it builds — one pod template per replicated job.

**The runtimes.** A ``trainjob`` cluster (``training:`` in sandbox/inventory.yaml) has exactly the
ClusterTrainingRuntimes Slipway ships, built by :func:`cluster.manifests.training_runtimes.build_runtimes`
for the sandbox's gang scheduler (:data:`GANG_SCHEDULER`: the sandbox's scheduler places gangs all or
nothing, as coscheduling does). They are read from the builder, not stored as objects: nobody applies or
deletes runtimes in the sandbox, so a table of them would only ever hold the builder's output, and the
builder is the one truth the real clusters' ``deploy/training-runtimes/`` comes from too.

**A missing runtime** is refused at admission, as upstream's validating webhook refuses it (its
``ClusterTrainingRuntime.ValidateObjects``: "specified clusterTrainingRuntime must be created before the
TrainJob is created", a 422): a TrainJob never exists without its runtime, so the controller never meets
one. (Upstream's controller, meeting a runtime deleted later, only sets ``Created=False``,
``JobsBuildFailed``, and retries; the sandbox's runtimes are never deleted, so that path cannot happen.)

**The JobSet** (:func:`replicated_jobs`): each replicated job of the runtime's template, its pod template
with the TrainJob's ``trainer`` applied to the trainer container (image, command, args, env,
``resourcesPerNode`` as its resources), the torch plugin's rendezvous env (``PET_NNODES``,
``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` from the completion index, ``PET_MASTER_ADDR`` rank 0's
headless-service name), then the TrainJob's ``runtimePatches`` (labels and annotations, node selector, tolerations,
affinity, security, grace, volumes, the container's env and mounts). ``numNodes`` pods in all: an MPI
runtime's launcher is node 0 (``runLauncherAsNode``), its ``node`` job has the other ``numNodes - 1``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from cluster.manifests.training_runtimes import ANCESTOR_LABEL, build_runtimes
from cluster.training import NODE_JOB, TRAINER_CONTAINER, TRAINJOB

Manifest = dict[str, Any]

#: The gang scheduler the sandbox's runtimes name (their ``podGroupPolicy``): its scheduler gangs as coscheduling.
GANG_SCHEDULER = "scheduler-plugins"
#: The annotation the Job controller puts each indexed pod's completion index in (``PET_NODE_RANK`` reads it).
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
#: The torch plugin's rendezvous port (upstream's ``constants.ContainerTrainerPort``).
MASTER_PORT = 29400


def installed_runtimes(training_api: str) -> dict[str, Manifest]:
    """The ClusterTrainingRuntimes of a sandbox cluster of ``training_api``, by name: Slipway's on Trainer v2."""
    if training_api != TRAINJOB:
        return {}
    return {runtime["metadata"]["name"]: runtime for runtime in build_runtimes(GANG_SCHEDULER)}


def runtime_refusal(trainjob: Manifest, runtimes: Mapping[str, Manifest]) -> str:
    """The webhook's field error for a TrainJob whose runtime the cluster lacks ("" when it has it)."""
    ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
    name = ref.get("name")
    if not name or name in runtimes:
        return ""  # no name at all: the schema's "Required value" says so
    return (f'spec.RuntimeRef: Invalid value: "{name}": clustertrainingruntimes.trainer.kubeflow.org "{name}" not '
            "found: not found ClusterTrainingRuntime specified in TrainJob: specified clusterTrainingRuntime must be "
            "created before the TrainJob is created")


def _merge_named(base: list, patch: list) -> list:
    """A strategic merge of lists keyed by ``name`` (env, volumes, mounts): the patch's entry wins."""
    out = [item for item in base if item.get("name") not in {p.get("name") for p in patch}]
    return out + [copy.deepcopy(p) for p in patch]


def _torch_env(trainjob: Manifest, num_nodes: int) -> list[Manifest]:
    """The rendezvous env Trainer's torch plugin gives each node: torchrun reads ``PET_*``."""
    trainer = (trainjob.get("spec") or {}).get("trainer") or {}
    name = trainjob["metadata"]["name"]
    return [
        {"name": "PET_NNODES", "value": str(num_nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(trainer.get("numProcPerNode", "auto"))},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE_JOB}-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(MASTER_PORT)},
    ]


def _patches(trainjob: Manifest) -> dict[str, Manifest]:
    """The runtime patches' replicated jobs by name (later patches win)."""
    found: dict[str, Manifest] = {}
    for patch in (trainjob.get("spec") or {}).get("runtimePatches") or []:
        template = ((patch or {}).get("trainingRuntimeSpec") or {}).get("template") or {}
        for job in (template.get("spec") or {}).get("replicatedJobs") or []:
            if isinstance(job, dict) and job.get("name"):
                found[job["name"]] = job
    return found


def _apply_patch(pod: Manifest, patch: Manifest) -> None:
    """A replicated job's patch onto its pod template (``pod``: metadata and spec, changed in place)."""
    template = ((patch.get("template") or {}).get("spec") or {}).get("template") or {}
    meta = template.get("metadata") or {}
    for key in ("labels", "annotations"):  # annotations: a ProvisioningRequest's consume annotation, say
        if meta.get(key):
            pod.setdefault("metadata", {}).setdefault(key, {}).update(meta[key])
    spec, patched = pod["spec"], template.get("spec") or {}
    for key, value in patched.items():
        if key == "containers":
            continue
        spec[key] = _merge_named(spec.get(key) or [], value) if key == "volumes" else copy.deepcopy(value)
    for change in patched.get("containers") or []:
        container = next((c for c in spec["containers"] if c.get("name") == change.get("name")), None)
        if container is None:
            continue
        for key, value in change.items():
            if key in ("env", "volumeMounts"):
                container[key] = _merge_named(container.get(key) or [], value)
            elif key != "name":
                container[key] = copy.deepcopy(value)


def replicated_jobs(trainjob: Manifest, runtime: Manifest) -> list[tuple[str, int, Manifest]]:
    """The JobSet the Trainer builds: (replicated job, its pods, their template) in the runtime's order."""
    spec = trainjob.get("spec") or {}
    trainer = spec.get("trainer") or {}
    policy = (runtime.get("spec") or {}).get("mlPolicy") or {}
    num_nodes = int(trainer.get("numNodes") or policy.get("numNodes") or 1)
    launcher_is_node = bool((policy.get("mpi") or {}).get("runLauncherAsNode"))
    patches = _patches(trainjob)
    jobs = []
    for job in ((runtime.get("spec") or {}).get("template") or {}).get("spec", {}).get("replicatedJobs") or []:
        job_template = job.get("template") or {}
        pod = copy.deepcopy((job_template.get("spec") or {}).get("template") or {})
        pod.setdefault("spec", {}).setdefault("containers", [])
        is_trainer = ((job_template.get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL) == "trainer"
        count = 1
        if job["name"] == NODE_JOB:
            count = num_nodes - 1 if launcher_is_node else num_nodes
        if is_trainer:
            for container in pod["spec"]["containers"]:
                if container.get("name") != TRAINER_CONTAINER:
                    continue
                for key in ("image", "command", "args"):
                    if key in trainer:
                        container[key] = copy.deepcopy(trainer[key])
                env = _merge_named(container.get("env") or [], trainer.get("env") or [])
                if "torch" in policy:
                    env = _merge_named(env, _torch_env(trainjob, num_nodes))
                container["env"] = env
                if "resourcesPerNode" in trainer:
                    container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
        if job["name"] in patches:
            _apply_patch(pod, patches[job["name"]])
        if count > 0:
            jobs.append((job["name"], count, pod))
    return jobs


def gang(runtime: Manifest) -> bool:
    """Whether the runtime's pods start as one gang (it names a gang scheduler's ``podGroupPolicy``)."""
    return bool((runtime.get("spec") or {}).get("podGroupPolicy"))


def max_restarts(runtime: Manifest) -> int:
    """The JobSet's restarts before it fails (``failurePolicy.maxRestarts``; none: it fails at once)."""
    policy = (((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}).get("failurePolicy") or {}
    return int(policy.get("maxRestarts") or 0)


def fails_on_disruption(runtime: Manifest) -> bool:
    """Whether a disrupted pod fails the whole set at once: its Job's pod failure policy fails the Job on
    ``DisruptionTarget`` (reason ``PodFailurePolicy``) and a ``FailJobSet`` rule of the JobSet's failure policy
    names that reason (Slipway's runtimes do)."""
    template = ((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}
    rules = (template.get("failurePolicy") or {}).get("rules") or []
    fails_set = any(r.get("action") == "FailJobSet" and "PodFailurePolicy" in (r.get("onJobFailureReasons") or [])
                    for r in rules)
    job_rules = [rule for job in template.get("replicatedJobs") or []
                 for rule in ((((job.get("template") or {}).get("spec") or {}).get("podFailurePolicy") or {})
                              .get("rules") or [])]
    fails_job = any(rule.get("action") == "FailJob"
                    and any(c.get("type") == "DisruptionTarget" for c in rule.get("onPodConditions") or [])
                    for rule in job_rules)
    return fails_set and fails_job


def success_jobs(runtime: Manifest) -> list[str]:
    """The replicated jobs whose success is the JobSet's (its ``successPolicy``); []: every one of them."""
    policy = (((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}).get("successPolicy") or {}
    return list(policy.get("targetReplicatedJobs") or [])
