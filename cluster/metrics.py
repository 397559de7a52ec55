"""GPU telemetry of workloads, from the DCGM exporter's series in Prometheus.

NVIDIA's dcgm-exporter publishes, per GPU and (with its Kubernetes pod mapping on) labelled
with the ``namespace`` and ``pod`` using it:

* ``DCGM_FI_DEV_GPU_UTIL`` — percent of time the GPU was busy (0–100), for full GPUs;
* ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` — the graphics engine's active ratio (0–1), the metric
  that exists per MIG instance (GPU_UTIL is not reported for MIG slices);
* ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE`` — frame buffer memory used and free (MiB);
* ``DCGM_FI_DEV_GPU_TEMP`` — the GPU's temperature (°C);
* ``DCGM_FI_DEV_POWER_USAGE`` — the power it draws (W).

The reconciler asks once per cycle for every workload it observed: **one** instant query to
Prometheus' HTTP API (:func:`telemetry_query`), each series averaged over a short window per pod
and GPU and tagged with a ``series`` label, the six joined with ``or`` (GPU_UTIL before
GR_ENGINE_ACTIVE under the one ``series="util"``, so a full GPU that reports both is counted
once); :func:`per_workload` groups the samples into a :class:`WorkloadTelemetry` per workload,
one :class:`GpuReading` per GPU. Nothing here imports Django; the backends call it.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from urllib.parse import urlencode

import urllib3

from cluster.backends.base import ClusterAddress, GpuReading, ObservedWorkload, WorkloadTelemetry
from cluster.errors import Transient

#: How far back each instant query averages (a few scrape intervals of the exporter).
WINDOW = "2m"


#: The labels a reading is grouped by: the pod using the GPU, and the GPU (dcgm-exporter's names).
GPU_LABELS = ("namespace", "pod", "Hostname", "gpu", "UUID", "GPU_I_ID")
#: ``(series, DCGM metric, scale)`` in the query's order: the first of a series that answers wins.
SERIES = (
    ("util", "DCGM_FI_DEV_GPU_UTIL", 1),
    ("util", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", 100),  # a ratio (0–1) on MIG instances
    ("fb_used", "DCGM_FI_DEV_FB_USED", 1),
    ("fb_free", "DCGM_FI_DEV_FB_FREE", 1),
    ("temp", "DCGM_FI_DEV_GPU_TEMP", 1),
    ("power", "DCGM_FI_DEV_POWER_USAGE", 1),
)


#: Each DCGM metric's series and the factor to its unit (what the query multiplies by).
METRIC_SERIES = {metric: (series, scale) for series, metric, scale in SERIES}


def telemetry_query(namespaces: Iterable[str], window: str = WINDOW) -> str:
    """The one PromQL query for the pods of ``namespaces``: every series, per pod and GPU, labelled ``series``."""
    # Namespaces are DNS-1123 labels (no regex metacharacters but "-", harmless outside []).
    selector = f'namespace=~"{"|".join(sorted(set(namespaces)))}"'
    by = ", ".join(GPU_LABELS)
    parts = []
    for series, metric, scale in SERIES:
        scaled = f" * {scale}" if scale != 1 else ""
        parts.append(f'label_replace(avg by ({by}) (avg_over_time({metric}{{{selector}}}[{window}])){scaled}, '
                     f'"series", "{series}", "", "")')
    return " or ".join(parts)


def gpu_id(labels: dict[str, str]) -> str:
    """A GPU's id from the exporter's labels: its UUID (a MIG instance's ``<uuid>/<instance>``), else ``<node>/<index>``."""
    uuid, instance = labels.get("UUID", ""), labels.get("GPU_I_ID", "")
    if uuid:
        return f"{uuid}/{instance}" if instance else uuid
    return f"{labels.get('Hostname', '')}/{labels.get('gpu', '')}" + (f"/{instance}" if instance else "")


def running_pods(observed: Iterable[ObservedWorkload]) -> dict[tuple[str, str], ClusterAddress]:
    """``(namespace, pod name) -> workload`` for the running pods of ``observed``."""
    pods = {}
    for workload in observed:
        for pod in workload.pods:
            if (pod.get("status") or {}).get("phase") == "Running":
                pods[(workload.namespace, pod["metadata"]["name"])] = workload.address
    return pods


#: The range each series is kept in (a value outside it, or NaN, is not a reading).
BOUNDS = {"util": (0.0, 100.0), "fb_used": (0.0, None), "fb_free": (0.0, None), "temp": (None, None),
          "power": (0.0, None)}


def _value(series: str, value: float) -> float | None:
    """``value`` clamped to its series' range; None for NaN or infinity (Prometheus writes NaN for 0/0)."""
    if not math.isfinite(value):
        return None
    low, high = BOUNDS[series]
    if low is not None:
        value = max(value, low)
    return min(value, high) if high is not None else value


def per_workload(samples: Iterable[tuple[tuple[str, str], str, str, float]],
                 pods: dict[tuple[str, str], ClusterAddress]) -> dict[ClusterAddress, WorkloadTelemetry]:
    """Each workload's readings from ``((namespace, pod), gpu id, series, value)`` samples.

    Pods not in ``pods`` are ignored; a GPU two pods of one workload report (a time-sliced one)
    is one reading, each figure the mean of theirs; a workload whose samples are all NaN is
    unmeasured (absent).
    """
    figures: dict[ClusterAddress, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(
        lambda: defaultdict(list)))
    for key, gpu, series, raw in samples:
        address = pods.get(key)
        value = _value(series, raw) if series in BOUNDS else None
        if address is not None and value is not None:
            figures[address][gpu][series].append(value)

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    return {address: WorkloadTelemetry(tuple(
        GpuReading(gpu, mean(f["util"]), mean(f["fb_used"]), mean(f["fb_free"]), mean(f["temp"]), mean(f["power"]))
        for gpu, f in sorted(gpus.items()))) for address, gpus in figures.items()}


class Prometheus:
    """A minimal client of Prometheus' HTTP API (``/api/v1/query``): one GET per query, a timeout."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = urllib3.PoolManager(retries=False)
        #: Queries sent so far (tests read it: one per cycle).
        self.query_count = 0

    def instant(self, query: str) -> list[tuple[dict[str, str], float]]:
        """The instant vector of ``query`` as ``(labels, value)`` pairs. Raises ``Transient`` on any fault."""
        self.query_count += 1
        try:
            response = self._http.request("GET", f"{self.url}/api/v1/query?{urlencode({'query': query})}",
                                          timeout=self.timeout)
            body = json.loads(response.data)
        except (urllib3.exceptions.HTTPError, ValueError) as exc:
            raise Transient(f"Prometheus unreachable: {exc}") from exc
        if response.status != 200 or body.get("status") != "success":
            raise Transient(f"Prometheus refused the query ({response.status}): {body.get('error', '')}"[:300])
        data = body.get("data") or {}
        if data.get("resultType") != "vector":
            raise Transient(f"Prometheus answered a {data.get('resultType')}, not a vector")
        samples = []
        for item in data.get("result") or []:
            try:
                samples.append((item.get("metric") or {}, float(item["value"][1])))
            except (KeyError, IndexError, TypeError, ValueError):
                continue  # a malformed sample measures nothing
        return samples

    def gpu_telemetry(self, observed: list[ObservedWorkload]) -> dict[ClusterAddress, WorkloadTelemetry]:
        """Every observed workload's GPU readings (one query; unmeasured ones absent)."""
        pods = running_pods(observed)
        if not pods:
            return {}
        samples = self.instant(telemetry_query(namespace for namespace, _pod in pods))
        return per_workload((((m.get("namespace", ""), m.get("pod", "")), gpu_id(m), m.get("series", ""), value)
                             for m, value in samples), pods)
