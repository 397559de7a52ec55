"""How a test chooses the cluster backend: through the product's one seam, the setting.

``SLIPWAY_CLUSTER_BACKEND`` holds a dotted path (``core.backend``); :func:`use_backend` points it
at :func:`installed`, which hands back the instance the test built (a :class:`tests.fakes.FakeBackend`,
a sandbox on a scripted clock, the Kubernetes backend on the API fake). Django's
``setting_changed`` makes the portal build it afresh, so nothing leaks into the next test.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.test import override_settings

from cluster.backends.base import ClusterBackend

#: The backends a test chose, by cluster name; ``None``: the one backend of every cluster.
_chosen: dict[str | None, ClusterBackend] = {}


def installed(cluster: str = "") -> ClusterBackend:
    """The backend factory the setting names while a test has chosen one: the cluster's own, else the one."""
    return _chosen.get(cluster) or _chosen[None]


def use_backend(settings, backend: ClusterBackend) -> ClusterBackend:
    """Make ``backend`` the portal's for this test (``settings`` is pytest-django's fixture)."""
    _chosen.clear()
    _chosen[None] = backend
    settings.SLIPWAY_CLUSTER_BACKEND = f"{__name__}.installed"
    return backend


def use_backends(settings, backends: dict[str, ClusterBackend]) -> dict[str, ClusterBackend]:
    """One backend per cluster name (several clusters); the clusters themselves are ``fleet.Cluster`` rows."""
    _chosen.clear()
    _chosen.update(backends)
    _chosen[None] = next(iter(backends.values()))
    settings.SLIPWAY_CLUSTER_BACKEND = f"{__name__}.installed"
    return backends


@contextmanager
def backend_in(backend: ClusterBackend) -> Iterator[ClusterBackend]:
    """:func:`use_backend` for a scope wider than one test (a module's fixture): the setting points at ``backend``
    until the block ends."""
    _chosen.clear()
    _chosen[None] = backend
    with override_settings(SLIPWAY_CLUSTER_BACKEND=f"{__name__}.installed"):
        yield backend
