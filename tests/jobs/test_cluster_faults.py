"""Cluster API faults during run creation, over real HTTP against the Kubernetes API fake.

5xx, 429 and timeouts are retried by the task (with backoff; eager here, so no waiting) and
the run then proceeds with exactly one Job; a cluster that stays down leaves the run
admitted for the reconciler to re-drive; a 422 fails the run with the server's message.
"""

from __future__ import annotations

import pytest

from billing.models import QuotaHold
from cluster.backends.kubernetes import KubernetesBackend
from jobs.constants import RunState
from jobs.services import submit_run
from tests.backends import use_backend
from tests.cluster.fakeapi import FakeKubeAPI
from tests.jobs.conftest import run_payload
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def kube(settings):
    fake = FakeKubeAPI().start()
    backend = KubernetesBackend(host=fake.url, qps=1000, burst=1000, timeout=0.5)
    use_backend(settings, backend)
    yield fake
    fake.stop()


@pytest.fixture
def run(member, team, quota, published):
    data = run_payload()
    data.pop("team")
    return submit_run(member, team, data)


def jobs_named(fake: FakeKubeAPI, name: str) -> int:
    return sum(1 for obj in fake.of_kind("Job") if obj["metadata"]["name"] == name)


@pytest.mark.parametrize("fault", [{"status": 500}, {"status": 503}, {"status": 429}, {"delay": 1.5}])
def test_it_retries_transient_faults_then_proceeds(kube, run, fault):
    kube.fail(method="PATCH", path_contains="/jobs/", times=2, **fault)
    result = apply_workload.apply(args=("run", run.pk))
    assert result.get() == "applied"
    run.refresh_from_db()
    assert run.state == RunState.PENDING
    assert run.apply_attempts == 3
    assert jobs_named(kube, run.object_name) == 1


def test_it_leaves_the_run_admitted_for_the_reconciler_when_the_cluster_stays_down(kube, run):
    kube.fail(status=500, method="PATCH", times=100)
    result = apply_workload.apply(args=("run", run.pk))
    assert result.failed()
    run.refresh_from_db()
    assert run.state == RunState.ADMITTED
    assert run.apply_attempts == 6  # the first try and five retries
    assert QuotaHold.objects.held().filter(ref=run.ref).exists()


def test_it_fails_the_run_with_the_api_servers_message_on_422(kube, run):
    kube.fail(status=422, method="PATCH", path_contains="/jobs/", message="spec.template: Invalid value")
    assert apply_workload.apply(args=("run", run.pk)).get() == "failed"
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert "spec.template: Invalid value" in run.reason
    assert not QuotaHold.objects.held().filter(ref=run.ref).exists()
