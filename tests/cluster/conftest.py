"""Fixtures of the cluster tests: the fake API server and a backend pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster.backends.kubernetes import KubernetesBackend
from tests.cluster.fakeapi import FakeKubeAPI


@pytest.fixture
def kube_api() -> Iterator[FakeKubeAPI]:
    fake = FakeKubeAPI().start()
    yield fake
    fake.stop()


@pytest.fixture
def backend(kube_api: FakeKubeAPI) -> KubernetesBackend:
    # A generous budget so the limiter never slows the tests; a short timeout for the fault tests.
    return KubernetesBackend(host=kube_api.url, qps=1000, burst=1000, timeout=1.0)
