"""Pieces every builder shares: names, labels, quantities, and the hardened pod template.

Everything here is a pure function of its arguments (no clock, no randomness, no I/O), so a
spec always renders byte-identical manifests; that is what makes server-side apply of the
same spec a no-op and the golden-file tests meaningful.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from cluster.backends.base import MANAGED_BY_LABEL, MANAGED_BY_VALUE, TEAM_LABEL, WORKLOAD_LABEL
from cluster.nvidia import PRODUCT_LABEL, gfd_selector
from cluster.specs import REPLICATED_SHARINGS, SHARING_MPS, ClusterConfig, FlavorSpec, VolumeSpec

Manifest = dict[str, Any]

#: Node label the NVIDIA GPU Feature Discovery sets to the GPU model; flavors select on it
#: (on shared nodes as :func:`cluster.nvidia.gfd_selector` says).
GPU_PRODUCT_LABEL = PRODUCT_LABEL
#: The taint the GPU Operator (and most clouds) put on GPU nodes so CPU pods stay off them.
GPU_TAINT_KEY = "nvidia.com/gpu"
#: Label and taint key of spot/preemptible nodes (the cluster admin maps the cloud's own label
#: onto it, see deploy/README.md): spot work must land on them, other work must not.
SPOT_KEY = "slipway.dev/capacity-type"
SPOT_VALUE = "spot"
#: Annotation carrying the user's display name (names come from portal ids, never from users).
DISPLAY_NAME_ANNOTATION = "slipway.dev/name"
#: Pod label naming the flavor, on the pods of an MPS flavor kept to one team per node: their
#: anti-affinity selects it (:func:`one_team_affinity`).
FLAVOR_LABEL = "slipway.dev/flavor"
#: The topology of "one team per MPS GPU": Kubernetes cannot pin a pod to one physical GPU of a
#: node, so the rule it can enforce is one team on a node's MPS GPUs.
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"

#: Defaults when a spec leaves CPU / memory open: per requested GPU unit, times the flavor's
#: fraction of a physical GPU (a MIG 1g slice gets a seventh), with a floor so tiny slices
#: still get a usable container.
DEFAULT_CPU_PER_GPU = 8.0
DEFAULT_MEMORY_GB_PER_GPU = 32.0
MIN_CPU = 1.0
MIN_MEMORY_GB = 4.0
#: Scratch space (image layers excluded): requests what a typical run needs, limits what a
#: node can afford before it evicts the pod rather than running out of disk.
EPHEMERAL_REQUEST = "10Gi"
EPHEMERAL_LIMIT = "50Gi"

#: Where the shared-memory volume is mounted (not a temp file: the kernel's POSIX shm mount).
SHM_PATH = "/dev/shm"  # noqa: S108

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def dns_name(*parts: str, limit: int = 63) -> str:
    """Join ``parts`` into a DNS-1123 label of at most ``limit`` characters.

    Over-long names are cut and given a short digest of the full name, so two long ids
    never collide and the same input always yields the same name (idempotent apply).
    """
    raw = "-".join(p for p in parts if p).lower()
    name = re.sub(r"[^a-z0-9-]+", "-", raw).strip("-") or "x"
    if len(name) <= limit and _DNS_LABEL.fullmatch(name):
        return name
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-')}-{digest}"


def labels(team: str, workload: str) -> dict[str, str]:
    """The three labels every Slipway object and pod carries."""
    return {MANAGED_BY_LABEL: MANAGED_BY_VALUE, TEAM_LABEL: team, WORKLOAD_LABEL: workload}


def one_team_per_node(flavor: FlavorSpec) -> bool:
    """Whether the flavor's pods keep other teams' pods of it off their node (MPS isolation is partial)."""
    return flavor.sharing == SHARING_MPS and flavor.one_team_per_gpu


def pod_labels(flavor: FlavorSpec, team: str, workload: str) -> dict[str, str]:
    """A workload's pod labels: the three of :func:`labels`, plus the flavor on one-team MPS pods.

    Controllers select pods by the three alone (a Deployment's selector is immutable); the flavor
    label is what :func:`one_team_affinity` of other pods looks for.
    """
    out = labels(team, workload)
    if one_team_per_node(flavor):
        out[FLAVOR_LABEL] = flavor.name
    return out


def metadata(name: str, namespace: str | None, team: str, workload: str, display_name: str = "") -> Manifest:
    meta: Manifest = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = labels(team, workload)
    if display_name:
        meta["annotations"] = {DISPLAY_NAME_ANNOTATION: display_name}
    return meta


#: The port of the Service in front of a workload's pods (an endpoint's server, a workspace's notebook).
SERVICE_PORT = 80


def cluster_ip_service(name: str, namespace: str, team: str, display_name: str, target_port: str) -> Manifest:
    """The ClusterIP Service ``name`` in front of the workload ``name``'s pods: :data:`SERVICE_PORT` to their
    container port named ``target_port`` (one builder for every kind that serves over HTTP)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name, namespace, team, name, display_name),
        "spec": {
            "type": "ClusterIP",
            "selector": labels(team, name),
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": target_port, "protocol": "TCP"}],
        },
    }


def cpu_quantity(cores: float) -> str:
    """Kubernetes CPU quantity: whole cores as "4", fractions in millicores ("1500m")."""
    millis = round(cores * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def memory_quantity(gb: float) -> str:
    """Binary memory quantity: whole GiB as "16Gi", else MiB ("1536Mi")."""
    mib = round(gb * 1024)
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def default_cpu(units: int, flavor: FlavorSpec) -> float:
    """Default cores, rounded up to half a core (a MIG slice's share is not a round number)."""
    return max(MIN_CPU, math.ceil(DEFAULT_CPU_PER_GPU * units * flavor.gpu_fraction * 2) / 2)


def default_memory_gb(units: int, flavor: FlavorSpec) -> float:
    """Default memory, rounded up to whole GiB."""
    return max(MIN_MEMORY_GB, float(math.ceil(DEFAULT_MEMORY_GB_PER_GPU * units * flavor.gpu_fraction)))


def resources(flavor: FlavorSpec, units: int, cpu: float | None, memory_gb: float | None) -> Manifest:
    """Requests and limits of a GPU container.

    GPU: limits equal requests (extended resources cannot be overcommitted) in whole units; a
    time-sliced or MPS unit exactly one (the device plugin's ``failRequestsGreaterThanOne``
    fails a pod asking for more: two replicas of one GPU are not two GPUs), so a spec asking
    for more is one the builders cannot render (``ValueError``; the portal refuses it first).
    Memory: limit equals request, so the pod is never OOM-killed for memory the scheduler
    promised. CPU: no limit above the request would be throttled anyway under contention,
    but a limit keeps one noisy pod from starving data loaders of its neighbours.
    """
    if flavor.sharing in REPLICATED_SHARINGS and int(units) != 1:
        raise ValueError(f"a pod of the {flavor.sharing} flavor {flavor.name} asks for exactly 1 unit, not {units}")
    # float(): the portal may hand over Decimals from model fields.
    cores = float(cpu) if cpu is not None else default_cpu(units, flavor)
    mem = float(memory_gb) if memory_gb is not None else default_memory_gb(units, flavor)
    request = {
        "cpu": cpu_quantity(cores),
        "memory": memory_quantity(mem),
        "ephemeral-storage": EPHEMERAL_REQUEST,
        flavor.resource_name: str(int(units)),
    }
    limit = dict(request, **{"ephemeral-storage": EPHEMERAL_LIMIT})
    return {"requests": request, "limits": limit}


def container_security(config: ClusterConfig) -> Manifest:
    """Container-level hardening required by the pod-security "restricted" profile."""
    ctx: Manifest = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if config.run_as_non_root:
        ctx["runAsNonRoot"] = True
    return ctx


def pod_security(config: ClusterConfig) -> Manifest:
    ctx: Manifest = {"seccompProfile": {"type": "RuntimeDefault"}}
    if config.run_as_non_root:
        ctx["runAsNonRoot"] = True
    return ctx


def env_list(pairs: tuple[tuple[str, str], ...]) -> list[Manifest]:
    """User env passed through unchanged, in the user's order (later duplicates win in Kubernetes)."""
    return [{"name": k, "value": v} for k, v in pairs]


def tolerations(flavor: FlavorSpec, spot: bool) -> list[Manifest]:
    out: list[Manifest] = [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    for key, operator, value, effect in flavor.tolerations:
        tol: Manifest = {"key": key, "operator": operator}
        if operator != "Exists":
            tol["value"] = value
        if effect:
            tol["effect"] = effect
        out.append(tol)
    if spot:
        out.append({"key": SPOT_KEY, "operator": "Equal", "value": SPOT_VALUE, "effect": "NoSchedule"})
    return out


def node_selector(flavor: FlavorSpec) -> dict[str, str]:
    """The labels GPU Feature Discovery gives the flavor's nodes (:func:`cluster.nvidia.gfd_selector`),
    then the flavor's own node labels (its model's ``clean()`` refuses any that contradict GFD's)."""
    selector = gfd_selector(flavor.gpu_model, flavor.resource_name, flavor.sharing, flavor.replicas)
    selector.update(dict(flavor.node_selector))
    return selector


def spot_affinity() -> Manifest:
    """Spot work must run on spot nodes: it is billed at the spot price."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": SPOT_KEY, "operator": "In", "values": [SPOT_VALUE]}]}
                ]
            }
        }
    }


def one_team_affinity(flavor: FlavorSpec, team: str) -> Manifest:
    """Never on a node where another team's pod of this MPS flavor runs (and, as Kubernetes keeps
    required anti-affinity both ways, no other team's pod of it joins this one's node).

    ``namespaceSelector: {}`` makes the term look at every namespace: each team's pods live in
    its own, and a term without it would only ever see pods of this pod's namespace, of its team.
    """
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchExpressions": [
                    {"key": FLAVOR_LABEL, "operator": "In", "values": [flavor.name]},
                    {"key": TEAM_LABEL, "operator": "NotIn", "values": [team]},
                ]},
                "namespaceSelector": {},
                "topologyKey": HOSTNAME_TOPOLOGY,
            }]
        }
    }


def shm_volume(shm_gb: float) -> Manifest:
    """Shared memory as a RAM-backed emptyDir (mounted at :data:`SHM_PATH`).

    The container runtime's 64 MiB default is far too small for PyTorch DataLoader workers
    and NCCL's shared-memory transport.
    """
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": memory_quantity(shm_gb)}}


def volume_entries(volumes: tuple[VolumeSpec, ...]) -> tuple[list[Manifest], list[Manifest]]:
    """(pod volumes, container mounts) for the spec's PVCs; never hostPath."""
    pod_volumes: list[Manifest] = []
    mounts: list[Manifest] = []
    for index, vol in enumerate(volumes):
        name = f"data-{index}"
        claim: Manifest = {"claimName": vol.claim}
        if vol.read_only:
            claim["readOnly"] = True
        pod_volumes.append({"name": name, "persistentVolumeClaim": claim})
        mount: Manifest = {"name": name, "mountPath": vol.mount_path}
        if vol.read_only:
            mount["readOnly"] = True
        mounts.append(mount)
    return pod_volumes, mounts


def pod_spec(
    *,
    container: Manifest,
    flavor: FlavorSpec,
    config: ClusterConfig,
    restart_policy: str,
    volumes: list[Manifest],
    team: str,
    spot: bool = False,
) -> Manifest:
    """A hardened pod spec around one container, placed on the flavor's nodes (kept off other
    teams' nodes of a one-team MPS flavor)."""
    spec: Manifest = {
        "restartPolicy": restart_policy,
        # Workloads never talk to the API server; a mounted token would only be a liability.
        "automountServiceAccountToken": False,
        # Service env vars of every Service in the namespace are noise and slow pod start.
        "enableServiceLinks": False,
        "securityContext": pod_security(config),
        "nodeSelector": node_selector(flavor),
        "tolerations": tolerations(flavor, spot),
        "containers": [container],
    }
    affinity: Manifest = {}
    if spot:
        affinity.update(spot_affinity())
    if one_team_per_node(flavor):
        affinity.update(one_team_affinity(flavor, team))
    if affinity:
        spec["affinity"] = affinity
    if volumes:
        spec["volumes"] = volumes
    return spec
