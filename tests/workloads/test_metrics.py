"""The cluster figures of ``/metrics``: each reconcile cycle's time and whether it reached its
cluster, and the errors cluster backends raise, by cluster and class (real backends: the
Kubernetes backend over the HTTP API fake, the sandbox)."""

from __future__ import annotations

import time

import pytest

import core.backend
from cluster.backends.kubernetes import KubernetesBackend
from cluster.errors import Invalid
from tests.backends import use_backend
from tests.cluster.fakeapi import FakeKubeAPI
from tests.portal.test_metrics import scrape, value
from workloads.tasks import reconcile_cluster

pytestmark = pytest.mark.django_db

DEFAULT = {"cluster": "default"}


@pytest.fixture
def kube(settings):
    fake = FakeKubeAPI().start()
    use_backend(settings, KubernetesBackend(host=fake.url, qps=1000, burst=1000, timeout=0.5))
    yield fake
    fake.stop()


def test_a_cycle_records_its_time_and_that_it_observed_its_cluster(client, kube):
    before = scrape(client)
    started = time.time()
    assert reconcile_cluster("default").startswith("observed=")
    after = scrape(client)
    count = "slipway_reconcile_duration_seconds_count"
    assert value(after, count, **DEFAULT) - value(before, count, **DEFAULT) == 1
    assert value(after, "slipway_reconcile_duration_seconds_sum", **DEFAULT) > value(
        before, "slipway_reconcile_duration_seconds_sum", **DEFAULT)
    assert value(after, "slipway_cluster_up", **DEFAULT) == 1
    assert value(after, "slipway_reconcile_last_success_timestamp_seconds", **DEFAULT) >= started


def test_a_cycle_that_cannot_reach_its_cluster_marks_it_down_and_counts_the_error(client, kube):
    assert reconcile_cluster("default").startswith("observed=")
    before = scrape(client)
    kube.fail(status=503, method="GET", times=100)
    assert reconcile_cluster("default").startswith("cluster default unavailable")
    after = scrape(client)
    assert value(after, "slipway_cluster_up", **DEFAULT) == 0
    count = "slipway_reconcile_duration_seconds_count"
    assert value(after, count, **DEFAULT) - value(before, count, **DEFAULT) == 1
    errors = "slipway_cluster_api_errors_total"
    assert value(after, errors, error="Transient", **DEFAULT) - value(before, errors, error="Transient", **DEFAULT) == 1
    # The last success stays where it was: "reconcile lagging" alerts on its age.
    last = "slipway_reconcile_last_success_timestamp_seconds"
    assert value(after, last, **DEFAULT) == value(before, last, **DEFAULT)
    kube.faults.clear()
    assert reconcile_cluster("default").startswith("observed=")
    assert value(scrape(client), "slipway_cluster_up", **DEFAULT) == 1


def test_the_sandbox_counts_what_it_rejects(client, settings):
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    before = scrape(client)
    with pytest.raises(Invalid):
        # A Secret without its kind: the simulated API server rejects it, as a real one would.
        core.backend.backend_for(core.backend.BackendSpec("default")).apply_secret({"apiVersion": "v1", "metadata": {"name": "x"}})
    after = scrape(client)
    errors = "slipway_cluster_api_errors_total"
    assert value(after, errors, error="Invalid", **DEFAULT) - value(before, errors, error="Invalid", **DEFAULT) == 1
