"""The rules every builder's objects keep, checked by each builder's tests: the shared pieces' in
tests/cluster/test_manifests.py, each kind's in its own test package (tests/jobs, tests/inference).

Slipway's labels on every object, hardened pods, the user's argv never wrapped in a shell, and
custom resources validated against their CRD's schema rather than kubernetes-validate's.
"""

from __future__ import annotations

from typing import Any

from cluster.nvidia import gfd_selector
from tests.cluster import samples

#: Kinds a CRD defines: validated against its schema (tests/cluster/schemas/), not kubernetes-validate's.
CUSTOM_KINDS = ("PyTorchJob", "TrainJob", "ScaledObject", "TriggerAuthentication", "ProvisioningRequest")
#: The product label each sample flavor's pods select: GFD's on its nodes (``-SHARED`` on shared, not renamed GPUs).
SAMPLE_PRODUCTS = {gfd_selector(f.gpu_model, f.resource_name, f.sharing, f.replicas)["nvidia.com/gpu.product"]
                   for f in (samples.A100, samples.MIG_1G, samples.T4_TS4, samples.A10G_MPS2, samples.A10G_MPS2_RENAMED)}
SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/env"}


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of a Job, of every PyTorchJob replica or of a Deployment ([] for other objects)."""
    if obj["kind"] == "PyTorchJob":
        return [r["template"]["spec"] for r in obj["spec"]["pytorchReplicaSpecs"].values()]
    if obj["kind"] in ("Job", "Deployment"):
        return [obj["spec"]["template"]["spec"]]
    return []


def check_labels(label: str, obj: dict[str, Any]) -> None:
    """Slipway's three labels, on the object and its pods (and only the pod labels its kind adds)."""
    labels = obj["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "slipway"
    assert labels["slipway.dev/team"] == "vision"
    # A workload's env Secret (run-42-env) carries its workload's label, so deleting the workload finds it.
    expected_workload = ("team-vision" if label.startswith("team") else
                         obj["metadata"]["name"].removesuffix("-env") if obj["kind"] == "Secret" else
                         obj["metadata"]["name"].removesuffix("-checkpoints") if obj["kind"] == "PersistentVolumeClaim"
                         # an endpoint's candidate (ep-7-canary) is its endpoint's: observed and deleted with it
                         else obj["metadata"]["name"].removesuffix("-canary"))
    assert labels["slipway.dev/workload"] == expected_workload
    for spec_holder in [obj["spec"]["template"]] if obj["kind"] in ("Job", "Deployment") else []:
        pod_labels = dict(spec_holder["metadata"]["labels"])
        # A one-team MPS flavor's pods name their flavor too: their anti-affinity looks for it.
        flavor = pod_labels.pop("slipway.dev/flavor", None)
        assert (flavor is not None) == ("podAntiAffinity" in spec_holder["spec"].get("affinity", {}))
        # An endpoint's pods are serving pods: the team's endpoint policy (the gateway only) selects them and
        # its isolation policy leaves them out.
        serving = {k: pod_labels.pop(k, None) for k in ("slipway.dev/serving", "slipway.dev/isolated")}
        assert serving == ({"slipway.dev/serving": "true", "slipway.dev/isolated": "true"}
                           if label.startswith("endpoint") else {"slipway.dev/serving": None, "slipway.dev/isolated": None})
        # An endpoint's pods say which revision track they serve; the candidate's selector asks for its own.
        track = pod_labels.pop("slipway.dev/track", None)
        assert (track is not None) == label.startswith("endpoint")
        if track is not None:
            assert track == ("canary" if obj["metadata"]["name"].endswith("-canary") else "stable")
            assert obj["spec"]["selector"]["matchLabels"].get("slipway.dev/track") == (
                "canary" if track == "canary" else None)
        assert pod_labels == {
            k: labels[k] for k in ("app.kubernetes.io/managed-by", "slipway.dev/team", "slipway.dev/workload")
        }


def check_hardened(obj: dict[str, Any]) -> None:
    """Every pod of ``obj`` escalates nothing, asks for one GPU resource and lands on a sample flavor's nodes."""
    for pod in pod_specs(obj):
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert not any("hostPath" in v for v in pod.get("volumes", []))
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
        for container in pod["containers"]:
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False
            assert ctx["privileged"] is False
            assert ctx["capabilities"] == {"drop": ["ALL"]}
            limits, requests = container["resources"]["limits"], container["resources"]["requests"]
            gpu = [k for k in limits if k.startswith("nvidia.com/")]
            assert len(gpu) == 1 and limits[gpu[0]] == requests[gpu[0]] and limits[gpu[0]].isdigit()
            assert {"cpu", "memory", "ephemeral-storage"} <= set(requests) and {
                "cpu",
                "memory",
                "ephemeral-storage",
            } <= set(limits)
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        assert pod["nodeSelector"]["nvidia.com/gpu.product"] in SAMPLE_PRODUCTS


def check_argv(label: str, obj: dict[str, Any]) -> None:
    """The user's argv is the container's argv: no "sh -c" around it, nothing joined into one string."""
    for pod in pod_specs(obj):
        for container in pod["containers"]:
            argv = container.get("command", []) + container.get("args", [])
            assert not SHELLS & set(argv) and "-c" not in argv, label
            if obj["kind"] == "Job":
                assert container["command"] == ["python", "train.py"] and container.get("args", []) in (["--epochs", "10"], [])
            if obj["kind"] == "PyTorchJob":
                assert container["command"][0] == "torchrun" and container["command"][-2:] == ["python", "train.py"]
