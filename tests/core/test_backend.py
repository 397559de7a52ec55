"""The one seam for cluster backends: a cluster names its backend by word or dotted path, and
``SLIPWAY_CLUSTER_BACKEND`` is the default for clusters that name none."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from cluster.backends.kubernetes import KubernetesBackend
from core.backend import BackendSpec, backend_for, offered_clusters
from sandbox.backend import SandboxBackend
from tests.fakes import FakeBackend

DEFAULT = BackendSpec("default")


def test_the_default_word_names_the_sandbox_built_once_per_process_and_cluster(settings):
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    backend = backend_for(DEFAULT)
    assert isinstance(backend, SandboxBackend)
    assert backend_for(BackendSpec("default")) is backend and backend.cluster == "default"


def test_each_sandbox_cluster_of_the_inventory_has_its_own_backend(settings):
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    settings.SLIPWAY_SANDBOX_INVENTORY = str(settings.BASE_DIR / "sandbox" / "inventory.yaml")  # the demo's two
    assert [c.name for c in offered_clusters()] == ["east", "west"]
    east, west = backend_for(BackendSpec("east")), backend_for(BackendSpec("west"))
    assert (east.cluster, west.cluster) == ("east", "west") and east is not west


def test_a_dotted_path_names_any_factory_and_a_changed_setting_builds_anew(settings):
    settings.SLIPWAY_CLUSTER_BACKEND = "tests.fakes.FakeBackend"
    first = backend_for(DEFAULT)
    assert isinstance(first, FakeBackend) and backend_for(DEFAULT) is first
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    assert isinstance(backend_for(DEFAULT), SandboxBackend)
    settings.SLIPWAY_CLUSTER_BACKEND = "tests.fakes.FakeBackend"
    assert backend_for(DEFAULT) is not first


def test_a_cluster_may_name_its_own_backend_over_the_setting(settings):
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    assert isinstance(backend_for(BackendSpec("lab", backend="tests.fakes.FakeBackend")), FakeBackend)


@pytest.mark.parametrize("name", ["kubernetess", "tests.fakes.NoSuchBackend", "no.such.module.Backend"])
def test_a_name_that_is_neither_says_what_it_must_be(settings, name):
    settings.SLIPWAY_CLUSTER_BACKEND = name
    with pytest.raises(ImproperlyConfigured, match=rf"'sandbox', 'kubernetes' or the dotted path.*{name!r}"):
        backend_for(DEFAULT)


def test_the_kubernetes_word_builds_the_real_backend_from_its_settings(settings):
    settings.SLIPWAY_CLUSTER_BACKEND = "kubernetes"
    settings.SLIPWAY_KUBECONFIG = "/etc/slipway/kubeconfig"
    settings.SLIPWAY_KUBE_QPS, settings.SLIPWAY_KUBE_BURST, settings.SLIPWAY_KUBE_TIMEOUT = 7.0, 11, 3.5
    backend = backend_for(DEFAULT)
    assert isinstance(backend, KubernetesBackend)  # built lazily: no connection is made here
    assert backend.kubeconfig == "/etc/slipway/kubeconfig" and backend.context is None
    assert (backend.limiter.qps, backend.limiter.burst, backend.timeout) == (7.0, 11, 3.5)
    settings.SLIPWAY_METRICS_URL = ""
    assert backend_for(DEFAULT).metrics is None  # no metrics URL: utilization is not measured


def test_a_cluster_with_its_own_kubeconfig_and_context(settings):
    settings.SLIPWAY_CLUSTER_BACKEND = "kubernetes"
    backend = backend_for(BackendSpec("west", kubeconfig="/secrets/west/kubeconfig", context="west-admin"))
    assert (backend.kubeconfig, backend.context) == ("/secrets/west/kubeconfig", "west-admin")


def test_a_backend_without_an_inventory_offers_one_cluster_named_by_the_setting(settings):
    settings.SLIPWAY_CLUSTER_BACKEND = "tests.fakes.FakeBackend"
    settings.SLIPWAY_CLUSTER_NAME = "onprem"
    assert [c.name for c in offered_clusters()] == ["onprem"]


def test_a_process_on_the_sandbox_never_imports_the_kubernetes_client(tmp_path):
    """Importing ``kubernetes`` costs a process ~1.3 s of CPU (its ``dynamic`` module imports kubernetes-validate,
    whose jsonschema builds an IRI grammar), 40 % of a Django start: every service of ``make run`` and every process
    the suite starts paid it for a backend it never builds. Only :mod:`core.kubernetes` imports it."""
    code = ("import sys, django; django.setup(); from portal.celery import app; app.loader.import_default_modules(); "
            "from django.urls import resolve; resolve('/'); print(sorted(m for m in sys.modules if m.startswith('kubernetes')))")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "SLIPWAY_CLUSTER_BACKEND": "sandbox",
           "SLIPWAY_VAR_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], cwd=django_settings.BASE_DIR, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
