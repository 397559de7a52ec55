"""The one seam for the cluster backend: ``SLIPWAY_CLUSTER_BACKEND`` names it by word or dotted path."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from cluster.backends.kubernetes import KubernetesBackend
from core.backend import get_backend
from sandbox.backend import SandboxBackend
from tests.fakes import FakeBackend


def test_the_default_word_names_the_sandbox_built_once_per_process(settings):
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    backend = get_backend()
    assert isinstance(backend, SandboxBackend)
    assert get_backend() is backend


def test_a_dotted_path_names_any_factory_and_a_changed_setting_builds_anew(settings):
    settings.SLIPWAY_CLUSTER_BACKEND = "tests.fakes.FakeBackend"
    first = get_backend()
    assert isinstance(first, FakeBackend) and get_backend() is first
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    assert isinstance(get_backend(), SandboxBackend)
    settings.SLIPWAY_CLUSTER_BACKEND = "tests.fakes.FakeBackend"
    assert get_backend() is not first


@pytest.mark.parametrize("name", ["kubernetess", "tests.fakes.NoSuchBackend", "no.such.module.Backend"])
def test_a_name_that_is_neither_says_what_it_must_be(settings, name):
    settings.SLIPWAY_CLUSTER_BACKEND = name
    with pytest.raises(ImproperlyConfigured, match=rf"'sandbox', 'kubernetes' or the dotted path.*{name!r}"):
        get_backend()


def test_the_kubernetes_word_builds_the_real_backend_from_its_settings(settings):
    settings.SLIPWAY_CLUSTER_BACKEND = "kubernetes"
    settings.SLIPWAY_KUBECONFIG = "/etc/slipway/kubeconfig"
    settings.SLIPWAY_KUBE_QPS, settings.SLIPWAY_KUBE_BURST, settings.SLIPWAY_KUBE_TIMEOUT = 7.0, 11, 3.5
    backend = get_backend()
    assert isinstance(backend, KubernetesBackend)  # built lazily: no connection is made here
    assert backend.kubeconfig == "/etc/slipway/kubeconfig"
    assert (backend.limiter.qps, backend.limiter.burst, backend.timeout) == (7.0, 11, 3.5)
    settings.SLIPWAY_METRICS_URL = ""
    assert get_backend().metrics is None  # no metrics URL: utilization is not measured
