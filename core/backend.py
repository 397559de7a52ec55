"""The Django side of the cluster layer: which backend this process uses, and its config.

``cluster/`` cannot read Django settings, so this module turns settings into the plain
:class:`cluster.specs.ClusterConfig` the builders take, and builds the configured backend once
per process.

``SLIPWAY_CLUSTER_BACKEND`` is the one seam: ``sandbox`` (the default), ``kubernetes``, or the
dotted path of any callable that returns a :class:`~cluster.backends.base.ClusterBackend`. Tests
choose their fake by setting it (``tests/backends.py``); nothing patches this module.

Every backend built here reports the cluster errors it raises to ``/metrics``
(``slipway_cluster_api_errors_total``, through :attr:`ClusterBackend.on_error`).
"""

from __future__ import annotations

from functools import lru_cache, partial

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from cluster.backends.base import ClusterBackend
from cluster.backends.kubernetes import KubernetesBackend
from cluster.metrics import Prometheus
from cluster.specs import ClusterConfig
from core import metrics

#: The backends a deployment names by a word (README, docs/operations.md); anything else is a dotted path.
BACKENDS = {
    "sandbox": "sandbox.backend.SandboxBackend",
    "kubernetes": "core.backend.kubernetes_backend",
}


def cluster_config() -> ClusterConfig:
    """Settings the manifest builders need, as a frozen dataclass."""
    return ClusterConfig(
        gang_scheduler=settings.SLIPWAY_GANG_SCHEDULER or None,
        prometheus_url=settings.SLIPWAY_PROMETHEUS_URL,
        prometheus_proxy_url=settings.SLIPWAY_PROMETHEUS_PROXY_URL or None,
        run_as_non_root=settings.SLIPWAY_RUN_AS_NON_ROOT,
    )


def kubernetes_backend() -> ClusterBackend:
    """The real cluster, configured from the ``SLIPWAY_KUBE*`` and ``SLIPWAY_METRICS_URL`` settings."""
    return KubernetesBackend(
        kubeconfig=settings.SLIPWAY_KUBECONFIG or None,
        qps=settings.SLIPWAY_KUBE_QPS,
        burst=settings.SLIPWAY_KUBE_BURST,
        timeout=settings.SLIPWAY_KUBE_TIMEOUT,
        metrics=Prometheus(settings.SLIPWAY_METRICS_URL) if settings.SLIPWAY_METRICS_URL else None,
    )


@lru_cache(maxsize=1)
def _backend(name: str) -> ClusterBackend:
    try:
        factory = import_string(BACKENDS.get(name, name))
    except ImportError:
        raise ImproperlyConfigured(
            f"SLIPWAY_CLUSTER_BACKEND must be 'sandbox', 'kubernetes' or the dotted path of a backend factory, "
            f"got {name!r}") from None
    backend = factory()
    backend.on_error = partial(metrics.count_cluster_error, metrics.cluster_label())
    return backend


def get_backend() -> ClusterBackend:
    """The backend ``SLIPWAY_CLUSTER_BACKEND`` names (one instance per process)."""
    return _backend(settings.SLIPWAY_CLUSTER_BACKEND)


@receiver(setting_changed, dispatch_uid="slipway-cluster-backend-changed")
def _forget_backend(setting: str, **kwargs) -> None:
    # A changed setting the backend is built from (tests, override_settings): a new one on next use.
    if setting in ("SLIPWAY_CLUSTER_BACKEND", "SLIPWAY_METRICS_URL") or setting.startswith("SLIPWAY_KUBE"):
        _backend.cache_clear()
