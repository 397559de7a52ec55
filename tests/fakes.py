"""The one fake cluster backend every test shares: scriptable, in memory.

It stores what is applied (so tests see exactly the rendered objects) and lets a test say
what the cluster does next with Kubernetes-shaped status payloads, which then go through
the real status mappings (each kind's, on :mod:`cluster.status`).
"""

from __future__ import annotations

import copy
from collections import defaultdict

from cluster.backends.base import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    TEAM_LABEL,
    WORKLOAD_LABEL,
    ClusterAddress,
    ClusterBackend,
    ClusterEvent,
    GpuReading,
    NodeCapacity,
    ObservedWorkload,
    WorkloadTelemetry,
    env_secret_name,
)
from cluster.errors import ClusterError, NotFound
from sandbox.training_metrics import lines_since


class FakeBackend(ClusterBackend):
    name = "fake"

    def __init__(self, nodes: list[NodeCapacity] | None = None, cluster: str = "") -> None:
        #: What :meth:`capacity` reports (default: one idle 8-GPU A100 node).
        self.nodes = nodes if nodes is not None else [NodeCapacity("gpu-a100-0", "nvidia.com/gpu", 8, 0)]
        self.capacity_error: ClusterError | None = None  # raised by capacity()
        self.applied: list[list[dict]] = []  # each apply() call's objects, in order
        self.objects: dict[tuple[str, str, str], dict] = {}  # (namespace, kind, name) -> object
        self.pod_lists: dict[tuple[str, str], list[dict]] = defaultdict(list)  # (namespace, workload) -> pods
        self.log_lines: dict[str, list[str]] = {}  # pod name -> its whole log (default: three lines)
        self.log_reads: list[tuple[str, object]] = []  # (pod, since) of every log read, in order
        self.calls: list[str] = []
        self.secrets: dict[tuple[str, str], list[str]] = {}  # (namespace, name) -> keys
        self.secret_values_seen: set[str] = set()  # base64 values handed to apply_secret
        self.fail_with: ClusterError | None = None  # raised by the next apply/delete calls
        self.observe_error: ClusterError | None = None  # raised by observe(): a cluster that does not answer
        self.ticks = 0
        self.warnings: dict[tuple[str, str], list[ClusterEvent]] = defaultdict(list)  # (namespace, workload)
        self.events_error: ClusterError | None = None  # raised by events()
        #: GPU utilization per workload name (or its whole telemetry), or an error the metrics query raises.
        self.utilization: dict[str, float | WorkloadTelemetry] | ClusterError = {}

    # -- the interface ------------------------------------------------------------------------
    def apply(self, objects, resources=()):
        self.calls.append("apply")
        if self.fail_with is not None:
            raise self.fail_with
        self.applied.append(copy.deepcopy(list(objects)))
        for obj in objects:
            meta = obj["metadata"]
            key = (meta.get("namespace", ""), obj["kind"], meta["name"])
            stored = copy.deepcopy(obj)
            stored.setdefault("status", self.objects.get(key, {}).get("status", {}))
            self.objects[key] = stored
        return objects

    def apply_secret(self, secret):
        """Recorded with its keys only (what :attr:`secrets` holds), as the sandbox does."""
        self.calls.append("apply_secret")
        if self.fail_with is not None:
            raise self.fail_with
        meta = secret["metadata"]
        self.secrets[(meta["namespace"], meta["name"])] = sorted(secret["data"])
        self.secret_values_seen.update(secret["data"].values())

    def delete(self, address: ClusterAddress, resources, *, grace_seconds: int | None = None) -> int:
        self.calls.append("delete")
        if self.fail_with is not None:
            raise self.fail_with
        kinds = {(r.api_version, r.kind) for r in resources if r.deleted}
        doomed = [k for k, o in self.objects.items()
                  if k[0] == address.namespace and _workload(o) == address.object_name and (o["apiVersion"], k[1]) in kinds]
        for key in doomed:
            del self.objects[key]
        if self.secrets.pop((address.namespace, env_secret_name(address.object_name)), None) is not None:
            doomed.append(("", "Secret", env_secret_name(address.object_name)))
        self.pod_lists.pop((address.namespace, address.object_name), None)
        return len(doomed)

    def delete_objects(self, namespace: str, objects) -> int:
        self.calls.append("delete_objects")
        if self.fail_with is not None:
            raise self.fail_with
        doomed = [(namespace, kind.kind, name) for kind, name in objects if (namespace, kind.kind, name) in self.objects]
        for key in doomed:
            del self.objects[key]
        return len(doomed)

    def annotate_pods(self, address: ClusterAddress, annotations) -> int:
        """Merged onto the workload's pods not finished, as a merge patch would; None removes a key."""
        self.calls.append("annotate_pods")
        if self.fail_with is not None:
            raise self.fail_with
        count = 0
        for pod in self.pod_lists.get((address.namespace, address.object_name), []):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            meta = pod.setdefault("metadata", {})
            merged = {**(meta.get("annotations") or {}), **annotations}
            meta["annotations"] = {k: v for k, v in merged.items() if v is not None}
            count += 1
        return count

    def observe(self, resources):
        """Managed objects of the observed kinds, and (as KEDA's are) autoscalers by their workload label."""
        self.calls.append("observe")
        if self.observe_error is not None:
            raise self.observe_error
        kinds = {(r.api_version, r.kind) for r in resources if r.observed}
        grouped: dict[tuple[str, str], ObservedWorkload] = {}
        for (namespace, kind, _name), obj in self.objects.items():
            workload = _workload(obj)
            labels = obj["metadata"].get("labels") or {}
            if not workload or labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE or (obj["apiVersion"], kind) not in kinds:
                continue
            entry = grouped.setdefault(
                (namespace, workload),
                ObservedWorkload(namespace=namespace, object_name=workload, team=labels.get(TEAM_LABEL, "")),
            )
            entry.objects.append(copy.deepcopy(obj))
        for (namespace, kind, _name), obj in self.objects.items():
            if kind == "HorizontalPodAutoscaler" and (namespace, _workload(obj)) in grouped:
                grouped[(namespace, _workload(obj))].objects.append(copy.deepcopy(obj))
        for (namespace, workload), pods in self.pod_lists.items():
            if (namespace, workload) in grouped:
                grouped[(namespace, workload)].pods.extend(copy.deepcopy(pods))
        return list(grouped.values())

    def pods(self, address):
        return copy.deepcopy(self.pod_lists.get((address.namespace, address.object_name), []))

    def logs(self, address, pod, tail=200, previous=False, since=None):
        pods = self.pod_lists.get((address.namespace, address.object_name), [])
        if pod not in self.log_lines and all(p["metadata"]["name"] != pod for p in pods):
            raise NotFound(f'pods "{pod}" not found', status=404)
        self.log_reads.append((pod, since))
        if previous:  # the container's run before its last restart: [] when it never restarted
            lines = self.log_lines.get(f"{pod}:previous", [])
            return lines[-tail:] if tail is not None else list(lines)
        lines = self.log_lines.get(pod, [f"log line {i}" for i in range(3)])
        if since is not None:  # the lines given begin with their times, as timestamps=true makes them
            lines = lines_since(lines, since)
        return lines[-tail:] if tail is not None else list(lines)

    def events(self, address):
        self.calls.append("events")
        if self.events_error is not None:
            raise self.events_error
        # A workload's pods were scheduled once it has any.
        scheduled = [ClusterEvent("Normal", "Scheduled", "assigned", f"Pod/{address.object_name}-0", "2026-11-22T10:00:00Z")
                     ] if self.pod_lists.get((address.namespace, address.object_name)) else []
        return [*scheduled, *self.warnings[(address.namespace, address.object_name)]]

    def capacity(self):
        if self.capacity_error is not None:
            raise self.capacity_error
        return list(self.nodes)

    def tick(self):
        self.ticks += 1

    def gpu_telemetry(self, observed):
        """One GPU per workload scripted in ``utilization`` (a percent, or a whole WorkloadTelemetry)."""
        self.calls.append("gpu_telemetry")
        if isinstance(self.utilization, ClusterError):
            raise self.utilization
        return {o.address: _telemetry(self.utilization[o.object_name]) for o in observed
                if o.object_name in self.utilization}

    # -- scripting what the cluster does --------------------------------------------------------
    def main_object(self, namespace: str, workload: str) -> dict:
        for (ns, kind, _name), obj in self.objects.items():
            if ns == namespace and kind in ("Job", "PyTorchJob", "TrainJob") and _workload(obj) == workload:
                return obj
        raise KeyError(workload)

    def set_running(self, namespace: str, workload: str, units: int, started: str = "2026-11-22T10:00:00Z") -> None:
        job = self.main_object(namespace, workload)
        job["status"] = {"startTime": started, "active": 1}
        self.pod_lists[(namespace, workload)] = [pod(workload, "Running", units, started)]

    def set_pending(self, namespace: str, workload: str, message: str) -> None:
        job = self.main_object(namespace, workload)
        job["status"] = {"active": 1}
        p = pod(workload, "Pending", 1)
        p["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ]
        self.pod_lists[(namespace, workload)] = [p]

    def set_finished(self, namespace: str, workload: str, *, ok: bool, started: str, finished: str,
                     oom: bool = False) -> None:
        job = self.main_object(namespace, workload)
        cond_type = "Complete" if ok else "Failed"
        job["status"] = {
            "startTime": started, "completionTime": finished if ok else None,
            "succeeded" if ok else "failed": 1,
            "conditions": [{"type": cond_type, "status": "True", "lastTransitionTime": finished,
                            **({} if ok else {"reason": "BackoffLimitExceeded",
                                               "message": "Job has reached the specified backoff limit"})}],
        }
        p = pod(workload, "Succeeded" if ok else "Failed", 1, started)
        if oom:
            p["status"]["containerStatuses"] = [{"name": "trainer", "ready": False, "restartCount": 0,
                                                 "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]
        self.pod_lists[(namespace, workload)] = [p]


def _telemetry(scripted: float | WorkloadTelemetry) -> WorkloadTelemetry:
    """A scripted utilization as one GPU's reading (80 GB, a quarter used, 60 °C, 250 W)."""
    if isinstance(scripted, WorkloadTelemetry):
        return scripted
    return WorkloadTelemetry((GpuReading("GPU-fake-0", scripted, 20480.0, 61440.0, 60.0, 250.0),))


def _workload(obj: dict) -> str:
    return obj["metadata"].get("labels", {}).get(WORKLOAD_LABEL, "")


def pod(workload: str, phase: str, units: int, started: str | None = None) -> dict:
    """A pod of ``workload``; ``started``: when its container started running (what a run's start is)."""
    status: dict = {"phase": phase}
    if started:
        state = {"running": {"startedAt": started}} if phase == "Running" else {
            "terminated": {"startedAt": started, "reason": "Completed", "exitCode": 0}}
        status["containerStatuses"] = [{"name": "trainer", "ready": phase == "Running", "state": state}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{workload}-abcde", "labels": {WORKLOAD_LABEL: workload}},
        "spec": {"containers": [{"name": "trainer", "resources": {
            "limits": {"nvidia.com/gpu": str(units)}, "requests": {"nvidia.com/gpu": str(units)}}}]},
        "status": status,
    }
