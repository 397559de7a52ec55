"""Scripting what the cluster shows of an endpoint, for reconcile tests on the fake backend.

:func:`show` sets the endpoint's Deployment (wanted and ready replicas), its pods (ready ones
and ones still loading the model) and KEDA's HPA (whether it wants more than the ceiling), as
the Kubernetes API would report them; the real :func:`inference.status.endpoint_status` maps them.
"""

from __future__ import annotations

from datetime import datetime

from cluster.backends.base import WORKLOAD_LABEL
from inference.models import InferenceEndpoint


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(endpoint: InferenceEndpoint, index: int, ready: bool, started: datetime) -> dict:
    units = endpoint.gpus_per_replica
    resource = endpoint.flavor.resource_name
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{endpoint.object_name}-7d9f-{index:05d}", "labels": {WORKLOAD_LABEL: endpoint.object_name},
                     "creationTimestamp": _iso(started)},
        "spec": {"containers": [{"name": "server", "resources": {"limits": {resource: str(units)},
                                                                 "requests": {resource: str(units)}}}]},
        "status": {"phase": "Running", "startTime": _iso(started),
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                   "containerStatuses": [{"name": "server", "ready": ready, "restartCount": 0,
                                          "state": {"running": {"startedAt": _iso(started)}}}]},
    }


def show(backend, endpoint: InferenceEndpoint, *, desired: int, ready: int, at: datetime, running: int | None = None,
         wants_more: bool = False) -> None:
    """The cluster now shows ``endpoint`` with ``desired`` replicas wanted, ``ready`` of them ready.

    ``running``: pods holding GPUs (ready or loading), ``desired`` when not given. ``wants_more``:
    the HPA wants more replicas than its maximum (``ScalingLimited``/``TooManyReplicas``).
    """
    namespace, name = endpoint.namespace, endpoint.object_name
    deployment = backend.objects[(namespace, "Deployment", name)]
    deployment["spec"]["replicas"] = desired
    available = "True" if ready else "False"
    deployment["status"] = {"replicas": desired, "readyReplicas": ready, "conditions": [
        {"type": "Available", "status": available, "lastTransitionTime": _iso(at)},
        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}
    running = desired if running is None else running
    backend.pod_lists[(namespace, name)] = [_pod(endpoint, i, i < ready, at) for i in range(running)]
    backend.objects[(namespace, "HorizontalPodAutoscaler", f"keda-hpa-{name}")] = {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": f"keda-hpa-{name}", "namespace": namespace, "labels": {WORKLOAD_LABEL: name}},
        "status": {"desiredReplicas": desired, "conditions": [
            {"type": "ScalingLimited", "status": "True" if wants_more else "False",
             "reason": "TooManyReplicas" if wants_more else "DesiredWithinRange"}]},
    }
