"""Specs and Kubernetes-shaped payloads shared by the cluster tests (realistic, trimmed)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cluster.specs import ClusterConfig, FlavorSpec, TeamSpec, VolumeSpec
from inference.specs import EndpointSpec
from jobs.specs import CheckpointSpec, TrainingSpec

A100 = FlavorSpec(
    name="a100-80gb",
    resource_name="nvidia.com/gpu",
    gpu_model="NVIDIA-A100-SXM4-80GB",
    node_selector=(("node.kubernetes.io/instance-type", "p4de.24xlarge"),),
    tolerations=(("dedicated", "Equal", "ml", "NoSchedule"),),
)
MIG_1G = FlavorSpec(
    name="a100-1g.10gb",
    resource_name="nvidia.com/mig-1g.10gb",
    gpu_model="NVIDIA-A100-SXM4-80GB",
    mig_profile="1g.10gb",
    gpu_fraction=1 / 7,
)
#: Shared GPUs (issue 37): a T4 time-sliced into 4 units, an A10G shared by MPS into 2 kept to one
#: team per node, and the same A10G where the device plugin renames shared GPUs (renameByDefault).
T4_TS4 = FlavorSpec(
    name="t4-ts4",
    resource_name="nvidia.com/gpu",
    gpu_model="Tesla-T4",
    gpu_fraction=0.25,
    sharing="time-slicing",
    replicas=4,
)
A10G_MPS2 = FlavorSpec(
    name="a10g-mps2",
    resource_name="nvidia.com/gpu",
    gpu_model="NVIDIA-A10G",
    node_selector=(("node.kubernetes.io/instance-type", "g5.12xlarge"),),
    gpu_fraction=0.5,
    sharing="mps",
    replicas=2,
    one_team_per_gpu=True,
)
A10G_MPS2_RENAMED = replace(A10G_MPS2, name="a10g-mps2-shared", resource_name="nvidia.com/gpu.shared")
CONFIG = ClusterConfig()
VOLCANO = ClusterConfig(gang_scheduler="volcano")
PLUGINS = ClusterConfig(gang_scheduler="scheduler-plugins")


def training(**overrides: Any) -> TrainingSpec:
    values: dict[str, Any] = {
        "object_name": "run-42",
        "team": "vision",
        "namespace": "team-vision",
        "name": "resnet baseline",
        "image": "registry.example.com/vision/train:1.4",
        "command": ("python", "train.py"),
        "args": ("--epochs", "10"),
        "env": (("SLIPWAY_SIM_DURATION", "30"), ("SLIPWAY_SIM_OUTCOME", "succeed")),
        "flavor": A100,
        "gpus_per_worker": 2,
        "cpu": 16,
        "memory_gb": 64,
        "shm_gb": 16,
        "active_deadline_seconds": 7200,
        "volumes": (VolumeSpec("datasets", "/data", read_only=True), VolumeSpec("checkpoints", "/ckpt")),
    }
    values.update(overrides)
    return TrainingSpec(**values)


def checkpoint(**overrides: Any) -> CheckpointSpec:
    """The checkpoint contract of :func:`training`'s run-42 (Slipway's claim, first attempt, unless overridden)."""
    values: dict[str, Any] = {"claim": "run-42-checkpoints"}
    values.update(overrides)
    return CheckpointSpec(**values)


def endpoint(**overrides: Any) -> EndpointSpec:
    values: dict[str, Any] = {
        "object_name": "ep-7",
        "team": "vision",
        "namespace": "team-vision",
        "name": "detector",
        "image": "registry.example.com/vision/serve:2.0",
        "flavor": A100,
        "args": ("--model", "/models/detector"),
        "env": (("LOG_LEVEL", "info"),),
        "min_replicas": 1,
        "max_replicas": 4,
    }
    values.update(overrides)
    return EndpointSpec(**values)


def team(**overrides: Any) -> TeamSpec:
    values: dict[str, Any] = {
        "slug": "vision",
        "namespace": "team-vision",
        "quotas": (("nvidia.com/gpu", 8), ("nvidia.com/mig-1g.10gb", 7)),
    }
    values.update(overrides)
    return TeamSpec(**values)


LABELS = {"app.kubernetes.io/managed-by": "slipway", "slipway.dev/team": "vision"}


def pod(
    name: str,
    workload: str,
    *,
    phase: str = "Running",
    gpus: int = 1,
    resource: str = "nvidia.com/gpu",
    node: str | None = "gpu-node-1",
    namespace: str = "team-vision",
    conditions: list[dict[str, Any]] | None = None,
    container_statuses: list[dict[str, Any]] | None = None,
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "img",
                "resources": {
                    "limits": {resource: str(gpus), "cpu": "4"},
                    "requests": {resource: str(gpus), "cpu": "4"},
                },
            }
        ]
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**LABELS, "slipway.dev/workload": workload, **(extra_labels or {})},
            "creationTimestamp": "2026-01-01T10:00:00Z",
        },
        "spec": spec,
        "status": {"phase": phase, "conditions": conditions or [], "containerStatuses": container_statuses or []},
    }


UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
    "lastTransitionTime": "2026-01-01T10:00:01Z",
}


def waiting(reason: str, message: str = "", last: dict[str, Any] | None = None, restarts: int = 0) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": "main",
        "ready": False,
        "restartCount": restarts,
        "image": "img",
        "state": {"waiting": {"reason": reason, **({"message": message} if message else {})}},
    }
    if last:
        status["lastState"] = {"terminated": last}
    return status


def terminated(reason: str, exit_code: int) -> dict[str, Any]:
    return {
        "name": "main",
        "ready": False,
        "restartCount": 0,
        "image": "img",
        "state": {
            "terminated": {
                "reason": reason,
                "exitCode": exit_code,
                "startedAt": "2026-01-01T10:01:00Z",
                "finishedAt": "2026-01-01T10:05:00Z",
            }
        },
    }


def running_container() -> dict[str, Any]:
    return {
        "name": "main",
        "ready": True,
        "restartCount": 0,
        "image": "img",
        "state": {"running": {"startedAt": "2026-01-01T10:01:00Z"}},
    }
