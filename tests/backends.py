"""How a test chooses the cluster backend: through the product's one seam, the setting.

``SLIPWAY_CLUSTER_BACKEND`` holds a dotted path (``core.backend``); :func:`use_backend` points it
at :func:`installed`, which hands back the instance the test built (a :class:`tests.fakes.FakeBackend`,
a sandbox on a scripted clock, the Kubernetes backend on the API fake). Django's
``setting_changed`` makes the portal build it afresh, so nothing leaks into the next test.
"""

from __future__ import annotations

from cluster.backends.base import ClusterBackend

_chosen: list[ClusterBackend] = []


def installed() -> ClusterBackend:
    """The backend factory the setting names while a test has chosen one."""
    return _chosen[-1]


def use_backend(settings, backend: ClusterBackend) -> ClusterBackend:
    """Make ``backend`` the portal's for this test (``settings`` is pytest-django's fixture)."""
    _chosen[:] = [backend]
    settings.SLIPWAY_CLUSTER_BACKEND = f"{__name__}.installed"
    return backend
