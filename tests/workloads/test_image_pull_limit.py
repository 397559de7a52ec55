"""Work whose image cannot be pulled fails after ``SLIPWAY_IMAGE_PULL_TIMEOUT_SECONDS``, on the
simulated cluster through the real apply task and reconcile cycle (``SLIPWAY_SIM_OUTCOME=image-pull``,
the demo's ``vit-typo-image``): it no longer holds its quota forever, says what to check, and its
cluster objects — pods holding a node while the kubelet retries forever — are deleted."""

from __future__ import annotations

import pytest

from billing.models import QuotaHold
from cluster.backends.base import ClusterAddress
from inference import services as endpoints
from inference.constants import EndpointState
from inference.models import InferenceEndpoint
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import submit_run
from tests.inference.conftest import endpoint_payload
from tests.inference.sandbox_cluster import Cluster
from tests.jobs.conftest import run_payload
from workloads.registry import resource_kinds

# Real commits: the tasks the portal publishes after commit are run as a worker would run them.
pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 120
HINT = "check the image name and tag"
IMAGE = "registry.example.com/vision/vit:does-not-exist"


@pytest.fixture
def cluster(published, monkeypatch, settings) -> Cluster:
    settings.SLIPWAY_IMAGE_PULL_TIMEOUT_SECONDS = LIMIT
    return Cluster.installed(published, settings)


def held(ref: str) -> bool:
    return QuotaHold.objects.held().filter(ref=ref).exists()


def on_cluster(cluster: Cluster, workload) -> bool:
    return any(o.object_name == workload.object_name for o in cluster.backend.observe(resource_kinds()))


def test_a_run_whose_image_cannot_be_pulled_fails_after_the_limit_and_gives_its_quota_back(
        cluster, member, team, quota, api, client):
    data = {k: v for k, v in run_payload().items() if k != "team"}
    run = submit_run(member, team, {**data, "image": IMAGE, "env": {"SLIPWAY_SIM_OUTCOME": "image-pull"}})

    # Within the limit it waits with the kubelet's words, holding its quota.
    for _ in range(LIMIT // 10 - 2):
        cluster.cycle(10)
    run.refresh_from_db()
    assert run.state == RunState.PENDING and run.reason.startswith("ImagePullBackOff")
    assert held(run.ref) and on_cluster(cluster, run)

    # Past it: failed, with what to check; quota back; its pod no longer holds a node.
    for _ in range(4):
        cluster.cycle(10)
    run = TrainingRun.objects.get(pk=run.pk)
    assert run.state == RunState.FAILED
    assert run.reason == f'ImagePullBackOff: image "{IMAGE}" not found (or its registry refused the pull) — {HINT}'
    assert run.finished_at is not None
    assert not held(run.ref)
    assert not on_cluster(cluster, run)
    assert not cluster.backend.pods(ClusterAddress(run.namespace, run.object_name))
    assert HINT in api.get(f"/api/v1/runs/{run.pk}/").json()["reason"]
    client.force_login(member)
    assert HINT in client.get(f"/runs/{run.pk}/").content.decode()


def test_an_endpoint_that_cannot_pull_its_image_fails_after_the_limit(cluster, member, team, ep_quota):
    created = endpoints.create_endpoint(member, team, endpoint_payload(
        image=IMAGE, env={"SLIPWAY_SIM_OUTCOME": "image-pull"}))
    for _ in range(LIMIT // 10 - 2):
        cluster.cycle(10)
    ep = InferenceEndpoint.objects.get(pk=created.pk)
    assert ep.state == EndpointState.DEPLOYING and held(ep.ref)
    for _ in range(4):
        cluster.cycle(10)
    ep = InferenceEndpoint.objects.get(pk=created.pk)
    assert ep.state == EndpointState.FAILED
    assert ep.reason == f'ImagePullBackOff: image "{IMAGE}" not found (or its registry refused the pull) — {HINT}'
    assert not held(ep.ref)
    assert not on_cluster(cluster, ep)
