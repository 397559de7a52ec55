"""The Django side of the cluster layer: which backend this process uses, and its config.

``cluster/`` cannot read Django settings, so this module turns settings into the plain
:class:`cluster.specs.ClusterConfig` the builders take, and builds the configured backend
once per process.
"""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from cluster.backends.base import ClusterBackend
from cluster.backends.kubernetes import KubernetesBackend
from cluster.metrics import Prometheus
from cluster.specs import ClusterConfig
from sandbox.backend import SandboxBackend


def cluster_config() -> ClusterConfig:
    """Settings the manifest builders need, as a frozen dataclass."""
    return ClusterConfig(
        gang_scheduler=settings.SLIPWAY_GANG_SCHEDULER or None,
        prometheus_url=settings.SLIPWAY_PROMETHEUS_URL,
        prometheus_proxy_url=settings.SLIPWAY_PROMETHEUS_PROXY_URL or None,
        run_as_non_root=settings.SLIPWAY_RUN_AS_NON_ROOT,
    )


@lru_cache(maxsize=1)
def _backend(name: str) -> ClusterBackend:
    if name == "sandbox":
        return SandboxBackend()
    if name == "kubernetes":
        return KubernetesBackend(
            kubeconfig=settings.SLIPWAY_KUBECONFIG or None,
            qps=settings.SLIPWAY_KUBE_QPS,
            burst=settings.SLIPWAY_KUBE_BURST,
            timeout=settings.SLIPWAY_KUBE_TIMEOUT,
            metrics=Prometheus(settings.SLIPWAY_METRICS_URL) if settings.SLIPWAY_METRICS_URL else None,
        )
    raise ImproperlyConfigured(f"SLIPWAY_CLUSTER_BACKEND must be 'sandbox' or 'kubernetes', got {name!r}")


def get_backend() -> ClusterBackend:
    """The backend named by ``SLIPWAY_CLUSTER_BACKEND`` (one instance per process)."""
    return _backend(settings.SLIPWAY_CLUSTER_BACKEND)
