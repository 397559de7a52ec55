"""The factory of the real cluster backend, in a module of its own that :mod:`core.backend` names by its dotted path
(``BACKENDS["kubernetes"]``) and loads only when a cluster uses it.

Importing the ``kubernetes`` package costs a process about 1.3 s of CPU: its ``dynamic`` module imports
kubernetes-validate when that is installed (the suite's dev dependency), whose jsonschema builds an IRI grammar at
import (1.0 s alone). That was 40 % of a Django start, paid by every service of ``make run`` and every process the suite
starts, for a backend they never build (tests/core/test_backend.py keeps it so).
"""

from __future__ import annotations

from django.conf import settings

from cluster.backends.base import ClusterBackend
from cluster.backends.kubernetes import KubernetesBackend
from cluster.metrics import Prometheus


def kubernetes_backend(cluster: str = "", kubeconfig: str = "", context: str = "") -> ClusterBackend:
    """A real cluster, configured from its kubeconfig (else ``SLIPWAY_KUBECONFIG``, else in-cluster)
    and the ``SLIPWAY_KUBE*`` and ``SLIPWAY_METRICS_URL`` settings."""
    return KubernetesBackend(
        kubeconfig=kubeconfig or settings.SLIPWAY_KUBECONFIG or None,
        context=context or None,
        qps=settings.SLIPWAY_KUBE_QPS,
        burst=settings.SLIPWAY_KUBE_BURST,
        timeout=settings.SLIPWAY_KUBE_TIMEOUT,
        metrics=Prometheus(settings.SLIPWAY_METRICS_URL) if settings.SLIPWAY_METRICS_URL else None,
    )
