"""GPU utilization of workloads, from the DCGM exporter's series in Prometheus.

NVIDIA's dcgm-exporter publishes, per GPU and (with its Kubernetes pod mapping on) labelled
with the ``namespace`` and ``pod`` using it:

* ``DCGM_FI_DEV_GPU_UTIL`` — percent of time the GPU was busy (0–100), for full GPUs;
* ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` — the graphics engine's active ratio (0–1), the metric
  that exists per MIG instance (GPU_UTIL is not reported for MIG slices).

The reconciler asks once per cycle for every workload it observed: **one** instant query to
Prometheus' HTTP API, the two metrics joined with ``or`` (full GPUs first, so a pod on a full
GPU is never counted twice), averaged per pod over a short window, then averaged per
workload here. Nothing here imports Django; the backends call it.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from urllib.parse import urlencode

import urllib3

from cluster.backends.base import ClusterAddress, ObservedWorkload
from cluster.errors import Transient

#: How far back each instant query averages (a few scrape intervals of the exporter).
WINDOW = "2m"


def utilization_query(namespaces: Iterable[str], window: str = WINDOW) -> str:
    """The one PromQL query for the pods of ``namespaces``: percent busy per (namespace, pod)."""
    # Namespaces are DNS-1123 labels (no regex metacharacters but "-", harmless outside []).
    selector = f'namespace=~"{"|".join(sorted(set(namespaces)))}"'
    return (f"avg by (namespace, pod) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{{{selector}}}[{window}]))"
            f" or avg by (namespace, pod) (avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{selector}}}[{window}]) * 100)")


def running_pods(observed: Iterable[ObservedWorkload]) -> dict[tuple[str, str], ClusterAddress]:
    """``(namespace, pod name) -> workload`` for the running pods of ``observed``."""
    pods = {}
    for workload in observed:
        for pod in workload.pods:
            if (pod.get("status") or {}).get("phase") == "Running":
                pods[(workload.namespace, pod["metadata"]["name"])] = workload.address
    return pods


def per_workload(samples: Iterable[tuple[tuple[str, str], float]],
                 pods: dict[tuple[str, str], ClusterAddress]) -> dict[ClusterAddress, float]:
    """Average the per-pod samples of each workload (pods not in ``pods`` are ignored)."""
    values: dict[ClusterAddress, list[float]] = defaultdict(list)
    for key, value in samples:
        address = pods.get(key)
        if address is not None and math.isfinite(value):  # Prometheus writes NaN for 0/0
            values[address].append(min(max(value, 0.0), 100.0))
    return {address: sum(v) / len(v) for address, v in values.items()}


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

    def gpu_utilization(self, observed: list[ObservedWorkload]) -> dict[ClusterAddress, float]:
        """Percent busy of each observed workload's running pods (one query; unmeasured ones absent)."""
        pods = running_pods(observed)
        if not pods:
            return {}
        samples = self.instant(utilization_query(namespace for namespace, _pod in pods))
        return per_workload((((m.get("namespace", ""), m.get("pod", "")), value) for m, value in samples), pods)
