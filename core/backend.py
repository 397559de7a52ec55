"""The Django side of the cluster layer: which backend talks to which cluster, and its config.

``cluster/`` cannot read Django settings, so this module turns settings into the plain
:class:`cluster.specs.ClusterConfig` the builders take, and builds each cluster's backend once
per process.

A backend is named by a word or a dotted path: ``sandbox`` (the default), ``kubernetes``, or the
dotted path of any callable that takes ``cluster=<name>`` and returns a
:class:`~cluster.backends.base.ClusterBackend`. ``SLIPWAY_CLUSTER_BACKEND`` is the default for every
cluster that does not name its own (``fleet.Cluster.backend``). Tests choose their fake by setting
it (``tests/backends.py``); nothing patches this module.

Which clusters exist is the fleet app's business (it stores them); this module only knows how to
reach one, given a :class:`BackendSpec`, and which clusters a backend offers by itself
(:func:`offered_clusters`: the sandbox's inventory lists several; any other backend is one).

Every backend built here reports the cluster errors it raises to ``/metrics``, labelled with its
cluster (``slipway_cluster_api_errors_total``, through :attr:`ClusterBackend.on_error`), and is handed
what the gateways see of endpoints (:attr:`ClusterBackend.demand`): the app that owns the gateway's
tables registers its reader here (:func:`register_demand_reader`, from its AppConfig), so a backend
that stands in for KEDA (the sandbox) reads them without importing an app above it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache, partial

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from cluster.backends.base import ClusterAddress, ClusterBackend, DemandReader, EndpointDemand
from cluster.specs import ClusterConfig
from core import metrics

#: The backends a deployment names by a word (README, docs/operations.md); anything else is a dotted path.
BACKENDS = {
    "sandbox": "sandbox.backend.SandboxBackend",
    "kubernetes": "core.kubernetes.kubernetes_backend",  # a module of its own: see there
}


@dataclass(frozen=True)
class BackendSpec:
    """How to reach one cluster: plain data, so the fleet app can hand it over (and it can be cached on)."""

    cluster: str
    backend: str = ""  #: a word of :data:`BACKENDS` or a dotted path; empty: ``SLIPWAY_CLUSTER_BACKEND``
    kubeconfig: str = ""
    context: str = ""


@dataclass(frozen=True)
class OfferedCluster:
    """A cluster a backend offers without configuration (what a fresh install starts with)."""

    name: str
    region: str = ""
    labels: dict = field(default_factory=dict, hash=False)
    #: Flavor name → its price per unit-hour there (and spot), where the backend knows one.
    prices: dict = field(default_factory=dict, hash=False)
    spot_prices: dict = field(default_factory=dict, hash=False)


def cluster_config() -> ClusterConfig:
    """Settings the manifest builders need, as a frozen dataclass."""
    return ClusterConfig(
        gang_scheduler=settings.SLIPWAY_GANG_SCHEDULER or None,
        prometheus_url=settings.SLIPWAY_PROMETHEUS_URL,
        prometheus_proxy_url=settings.SLIPWAY_PROMETHEUS_PROXY_URL or None,
        run_as_non_root=settings.SLIPWAY_RUN_AS_NON_ROOT,
        gateway_namespace=settings.SLIPWAY_GATEWAY_NAMESPACE,
        metrics_namespace=settings.SLIPWAY_ENDPOINT_SCRAPER_NAMESPACE or None,
    )


def _factory(name: str):
    try:
        return import_string(BACKENDS.get(name, name))
    except ImportError:
        raise ImproperlyConfigured(
            f"A cluster backend must be 'sandbox', 'kubernetes' or the dotted path of a backend factory, "
            f"got {name!r}") from None


#: The registered reader of the gateways' demand (None: none registered).
_DEMAND: list[DemandReader] = []


def register_demand_reader(reader: DemandReader) -> None:
    """Hand every backend ``reader`` of the endpoints' demand (the serving app's, at start-up; a second
    registration replaces the first)."""
    _DEMAND[:] = [reader]


def read_demand(addresses) -> dict[ClusterAddress, EndpointDemand]:
    """What the registered reader says of ``addresses`` (nothing without one): every backend's ``demand``."""
    return _DEMAND[0](list(addresses)) if _DEMAND else {}


@lru_cache(maxsize=64)
def _backend(spec: BackendSpec, default: str) -> ClusterBackend:
    name = spec.backend or default
    kwargs = {"cluster": spec.cluster}
    if name == "kubernetes":
        kwargs.update(kubeconfig=spec.kubeconfig, context=spec.context)
    backend = _factory(name)(**kwargs)
    backend.on_error = partial(metrics.count_cluster_error, metrics.cluster_label(spec.cluster))
    backend.demand = read_demand
    return backend


def backend_for(spec: BackendSpec) -> ClusterBackend:
    """The backend of one cluster (one instance per cluster and process)."""
    return _backend(spec, settings.SLIPWAY_CLUSTER_BACKEND)


def offered_clusters() -> list[OfferedCluster]:
    """The clusters ``SLIPWAY_CLUSTER_BACKEND`` offers by itself: its factory's ``offered_clusters()``
    when it has one (the sandbox: its inventory's clusters), else one cluster named
    ``SLIPWAY_CLUSTER_NAME``."""
    factory = _factory(settings.SLIPWAY_CLUSTER_BACKEND)
    offered = getattr(factory, "offered_clusters", None)
    if offered is None:
        return [OfferedCluster(settings.SLIPWAY_CLUSTER_NAME)]
    return [OfferedCluster(c.name, c.region, dict(c.labels), dict(c.prices), dict(c.spot_prices)) for c in offered()]


@receiver(setting_changed, dispatch_uid="slipway-cluster-backend-changed")
def _forget_backend(setting: str, **kwargs) -> None:
    # A changed setting the backend is built from (tests, override_settings): a new one on next use.
    if setting in ("SLIPWAY_CLUSTER_BACKEND", "SLIPWAY_METRICS_URL", "SLIPWAY_SANDBOX_INVENTORY") or setting.startswith(
            "SLIPWAY_KUBE"):
        _backend.cache_clear()
