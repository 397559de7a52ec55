"""The sandbox's simulated DCGM exporter: what dcgm-exporter would publish for the running pods (pure).

The figures a pod's GPUs show are decided as the pod is rebuilt (:func:`sandbox.pods.pod_manifest`)
and ride on it as annotations — its utilization (its phase's, and on a shared GPU its part of it)
and the GPU memory it holds. From those, its node and its container's GPU request this module
makes the exporter's samples, one per GPU and series, labelled as the real exporter labels them
(a GPU's UUID; a MIG instance's parent UUID and instance id) and named as it names them
(``DCGM_FI_DEV_GPU_UTIL`` for a whole or shared GPU, ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` — a ratio — for
a MIG instance, which has no GPU_UTIL), so the query's rule (:data:`cluster.metrics.METRIC_SERIES`)
and :func:`cluster.metrics.per_workload` turn them into readings exactly as they do Prometheus'
answer. Temperature and power follow the GPU's utilization; on a shared GPU the temperature is the
physical GPU's (all its pods' load), the memory free is what the GPU has left (time-slicing: its
pods' memory adds up) or the client's share has (MPS), and the power is the pod's part.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from cluster.specs import SHARING_MPS
from sandbox.inventory import MIG_PROFILES, GpuSharing, Node
from sandbox.simulation import stable_int

#: The DCGM metrics it publishes.
UTIL, ENGINE_ACTIVE = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED, FB_FREE, TEMP, POWER = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_TEMP", \
    "DCGM_FI_DEV_POWER_USAGE"
#: Board power limits (W) of the sandbox's GPU products; others draw :data:`DEFAULT_POWER_W`.
POWER_LIMIT_W = {"A100": 400.0, "H100": 700.0, "L4": 72.0, "T4": 70.0, "A10G": 300.0}
DEFAULT_POWER_W = 300.0
#: An idle GPU draws this fraction of its limit; a fully busy one all of it.
IDLE_POWER_FRACTION = 0.15
#: Temperature (°C) of an idle GPU, and how much each percent of utilization adds.
IDLE_TEMP_C, TEMP_PER_PCT = 33.0, 0.42
#: A GPU's memory (MiB) when its node's label does not say (an 80 GB part).
DEFAULT_MEMORY_MIB = 81920
#: One MIG memory slice of an A100-80GB (MiB): a profile's memory is its slices times this.
MIG_SLICE_MIB = 10240


@dataclass(frozen=True)
class PodGpus:
    """What the exporter needs of one running pod (read off its manifest by :func:`pod_gpus`)."""

    namespace: str
    name: str
    node: str
    resource: str  #: nvidia.com/gpu, nvidia.com/gpu.shared or nvidia.com/mig-<profile>
    count: int
    util: float
    held_mib: float  #: GPU memory it holds, per GPU
    shared_index: int | None = None  #: the physical GPU of a shared node it has


def pod_gpus(pod: dict, util_key: str, memory_key: str, gpu_key: str) -> PodGpus | None:
    """A running pod's GPU facts from its manifest (None: not running, or no GPU, or no figures yet)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    if (pod.get("status") or {}).get("phase") != "Running" or util_key not in annotations:
        return None
    resource, count = "", 0
    for container in spec.get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("limits") or {}).items():
            if name.startswith("nvidia.com/") and str(value).isdigit() and int(value) > 0:
                resource, count = name, count + int(value)
    if not count:
        return None
    try:
        util, held = float(annotations[util_key]), float(annotations.get(memory_key, 0))
    except ValueError:
        return None
    index = annotations.get(gpu_key)
    return PodGpus(meta.get("namespace", ""), meta.get("name", ""), spec.get("nodeName", ""), resource, count,
                   util, held, int(index) if index is not None and index.isdigit() else None)


def fake_uuid(*parts: object) -> str:
    """A GPU UUID as nvidia-smi prints one (``GPU-8c3f…``), stable for ``parts``."""
    return f"GPU-{uuid.UUID(int=stable_int(*parts) << 64 | stable_int(*parts, 'lo'))}"


def power_limit(node: Node | None) -> float:
    product = (node.labels.get("nvidia.com/gpu.product", "") if node is not None else "").upper()
    return next((watts for model, watts in POWER_LIMIT_W.items() if model in product), DEFAULT_POWER_W)


def memory_mib(node: Node | None) -> float:
    raw = node.labels.get("nvidia.com/gpu.memory", "") if node is not None else ""
    return float(raw) if raw.isdigit() and int(raw) > 0 else float(DEFAULT_MEMORY_MIB)


def temperature(util: float, gpu: str) -> float:
    """A GPU's temperature at ``util`` percent busy: each GPU a little warmer or cooler than its neighbours."""
    return round(IDLE_TEMP_C + TEMP_PER_PCT * util + (stable_int(gpu) % 50) / 10.0 - 2.5, 1)


def power(util: float, limit: float, share: float = 1.0) -> float:
    """Watts drawn at ``util`` percent busy; ``share``: the part of the GPU's idle draw that is this pod's."""
    return round(limit * (IDLE_POWER_FRACTION * share + (1 - IDLE_POWER_FRACTION) * util / 100.0), 1)


def samples(pods: Iterable[PodGpus], nodes: dict[str, Node],
            heat: dict[str, float] | None = None) -> list[tuple[tuple[str, str], str, str, float]]:
    """The exporter's samples for ``pods``: ``((namespace, pod), gpu id, DCGM metric, value)``.

    A shared GPU's pods are seen together first: its temperature follows their summed utilization
    and, time-sliced, its memory free is what all of them leave. ``heat``: degrees an overheated
    node's GPUs add to that (:func:`sandbox.faults.overheat_node`).
    """
    heat = heat or {}
    pods = list(pods)
    physical: dict[tuple[str, int], list[PodGpus]] = {}
    for pod in pods:
        if pod.shared_index is not None:
            physical.setdefault((pod.node, pod.shared_index), []).append(pod)
    found: list[tuple[tuple[str, str], str, str, float]] = []
    for pod in pods:
        node = nodes.get(pod.node)
        key = (pod.namespace, pod.name)
        limit = power_limit(node)
        if pod.shared_index is not None and node is not None and node.sharing is not None:
            found += _shared(key, pod, node.sharing, physical[(pod.node, pod.shared_index)], limit,
                             heat.get(pod.node, 0.0))
            continue
        profile = pod.resource.removeprefix("nvidia.com/mig-") if pod.resource.startswith("nvidia.com/mig-") else None
        for i in range(pod.count):
            if profile in MIG_PROFILES:
                compute, memory_slices = MIG_PROFILES[profile]
                parent = fake_uuid(pod.node, pod.name, i)
                gpu = f"{parent}/{stable_int(pod.name, i) % 7 + 1}"
                total, watts, heat_gpu = memory_slices * MIG_SLICE_MIB, power(pod.util, limit * compute / 7), parent
            else:
                gpu = fake_uuid(pod.node, pod.name, i)
                total, watts, heat_gpu = memory_mib(node), power(pod.util, limit), gpu
            used = min(pod.held_mib, total)
            busy = (ENGINE_ACTIVE, pod.util / 100) if profile in MIG_PROFILES else (UTIL, pod.util)
            found += [(key, gpu, *busy), (key, gpu, FB_USED, used), (key, gpu, FB_FREE, total - used),
                      (key, gpu, TEMP, temperature(pod.util, heat_gpu) + heat.get(pod.node, 0.0)),
                      (key, gpu, POWER, watts)]
    return found


def _shared(key: tuple[str, str], pod: PodGpus, sharing: GpuSharing, tenants: list[PodGpus],
            limit: float, extra_heat: float) -> list[tuple[tuple[str, str], str, str, float]]:
    """One pod's samples on a time-sliced or MPS GPU: its own part, the physical GPU's heat and room."""
    gpu = fake_uuid(pod.node, pod.shared_index)
    if sharing.strategy == SHARING_MPS:
        total = sharing.memory_mib / sharing.replicas  # the client's limit is its whole world
        free = max(total - pod.held_mib, 0.0)
    else:
        free = max(sharing.memory_mib - sum(t.held_mib for t in tenants), 0.0)
    busy = min(sum(t.util for t in tenants), 100.0)
    return [(key, gpu, UTIL, pod.util), (key, gpu, FB_USED, pod.held_mib), (key, gpu, FB_FREE, free),
            (key, gpu, TEMP, temperature(busy, gpu) + extra_heat),
            (key, gpu, POWER, power(pod.util, limit, 1 / sharing.replicas))]
