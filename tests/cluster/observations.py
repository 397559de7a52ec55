"""Observed payloads for the status mappings' tests: trimmed copies of what the API server returns for
the situations a GPU platform meets every day (no capacity, bad image, OOM, crash loops, deadlines).

The pod-level mapping (:mod:`cluster.status`), a Deployment's (:mod:`cluster.deployments`) and each
kind's (tests/jobs/test_status.py, tests/inference/test_status.py) are tested on these.
"""

from __future__ import annotations

from typing import Any

from cluster.backends.base import ObservedWorkload
from tests.cluster.samples import pod, waiting

T0 = "2026-01-01T10:00:00Z"
T1 = "2026-01-01T11:30:00Z"
#: The pull limit the tests give the mappings, and what a run or replica given up on it says.
PULL_LIMIT = 600
PULL_HINT = ('ImagePullBackOff: image "img" not found (or its registry refused the pull) — '
             'check the image name and tag')


def observed(
    objects: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None, workload: str = "run-42"
) -> ObservedWorkload:
    return ObservedWorkload("team-vision", workload, "vision", objects=objects, pods=pods or [])


def condition(type_: str, reason: str = "", message: str = "", status: str = "True", when: str = T1) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": when}


def pulling(name: str = "run-42-abcde", workload: str = "run-42", code: str = "ImagePullBackOff",
            message: str = 'Back-off pulling image "img"', started: str = T0) -> dict[str, Any]:
    """A pending pod whose container waits for an image it cannot pull, since ``started``."""
    stuck = pod(name, workload, phase="Pending", container_statuses=[waiting(code, message)])
    stuck["status"]["startTime"] = started
    return stuck


def deployment(desired: int | None, ready: int = 0, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The Deployment ``ep-7`` wanting ``desired`` replicas (None: the field left to the server), ``ready`` of them ready."""
    spec: dict[str, Any] = {} if desired is None else {"replicas": desired}
    status: dict[str, Any] = {"replicas": max(desired or 0, ready), "conditions": conditions or []}
    if ready:
        status["readyReplicas"] = ready
        status["availableReplicas"] = ready
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ep-7"}, "spec": spec, "status": status}


def scaled_object(ready: str = "True", reason: str = "ScaledObjectReady", message: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "ep-7"},
        "status": {"conditions": [condition("Ready", reason, message, status=ready),
                                  condition("Active", status="True")]},
    }
