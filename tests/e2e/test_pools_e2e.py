"""Elastic pools with a real Celery worker (issue 52's proof): the API → admission → a ``celery worker -B`` on Redis
→ the sandbox's autoscaler and its ProvisioningRequests → the reconciler's status and the ledger.

The sandbox's one cluster has an atomic pool of up to 4 A100 nodes of 8, none up, each coming up after a couple of
seconds (median 2 s, tail 4 s) and going after a minute idle:

* a 4-node gang waits, admitted, with ``reason_code`` ``provisioning``; nothing of it runs and nothing is billed
  until all 4 nodes are up; then it runs on them, and once it has ended its idle nodes go;
* with every provisioning failing, the next gang is queued again with the autoscaler's words and a backoff (the
  worker's is 10 s, ``SLIPWAY_PROVISIONING_BACKOFF_SECONDS``, where Kueue's default is a minute of waiting),
  billed nothing; once the cloud has capacity again it runs, admitted no earlier than its backoff's end.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import UsageRecord
from fleet import services as fleet
from fleet.models import GpuFlavor, NodePool
from jobs.models import TrainingRun
from quotas.demo import seed_flavors, seed_team_quotas
from quotas.models import QueuedRequest
from sandbox import pools as sandbox_pools
from sandbox.models import SimNode, SimObject, SimPod
from tests.e2e.conftest import lend, module_worker, wait_for
from tests.jobs.conftest import post_run

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(420)]

INVENTORY = """
pools:
  - prefix: a100
    cpu: "96"
    memory: 1152Gi
    gpu: {product: NVIDIA-A100-SXM4-80GB, count: 8}
    elastic: {min: 0, max: 4, mode: atomic, delay_median_seconds: 2, delay_tail_seconds: 4,
              failure_probability: 0, revoke_probability: 0, unneeded_minutes: 1}
"""
GANG = {"workers": 4, "gpus_per_worker": 8}
#: The worker's backoff after a failed provisioning (seconds): the test waits it out.
BACKOFF = 10


@pytest.fixture(scope="module")
def inventory(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("inventory") / "elastic.yaml"
    path.write_text(INVENTORY)
    return str(path)


@pytest.fixture(scope="module")
def pool_worker(django_db_setup, tmp_path_factory, inventory):
    yield from module_worker(tmp_path_factory, SLIPWAY_SANDBOX_INVENTORY=inventory,
                             SLIPWAY_PROVISIONING_BACKOFF_SECONDS=str(BACKOFF))


@pytest.fixture
def worker(transactional_db, settings, inventory, pool_worker):
    settings.SLIPWAY_SANDBOX_INVENTORY = inventory  # this process reads the worker's cluster
    yield from lend(pool_worker)


@pytest.fixture
def api(team, member, api_client_for):
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 32}, Decimal("200000"))
    NodePool.objects.create(cluster=fleet.default_cluster(), flavor=GpuFlavor.objects.get(name="a100-80gb"),
                            min_nodes=0, max_nodes=4, mode="atomic", unneeded_minutes=1)
    return api_client_for(member)


def run_of(api, run_id: int) -> dict:
    return api.get(f"/api/v1/runs/{run_id}/").json()


def test_a_gang_starts_only_on_all_its_nodes_billed_from_then_and_its_idle_nodes_go(worker, api):
    run_id = post_run(api, "6s", name="gang", **GANG)["id"]
    waiting = wait_for(lambda: (body := run_of(api, run_id))["reason_code"] == "provisioning" and body,
                       timeout=60, what="the gang to wait for its nodes")
    assert waiting["reason"].startswith("pool a100-80gb on default growing: node "), waiting["reason"]
    kinds = [o["kind"] for o in api.get(f"/api/v1/runs/{run_id}/manifest/").json()]
    assert "ProvisioningRequest" in kinds and "PodTemplate" in kinds

    def started() -> bool:
        """True once its pods exist; until then nothing of it runs, nothing is billed, the pool is not all up."""
        if SimPod.objects.filter(workload=f"run-{run_id}").exists():
            return True
        assert not UsageRecord.objects.filter(ref=f"run:{run_id}").exists()
        assert not SimObject.objects.filter(workload=f"run-{run_id}", resource_kind="PyTorchJob").exists() or \
            SimNode.objects.filter(state=SimNode.READY).count() == 4
        return False

    wait_for(started, timeout=90, interval=0.2, what="the gang's pods")
    assert SimNode.objects.filter(state=SimNode.READY).count() == 4  # all four were up before any pod
    body = wait_for(lambda: (b := run_of(api, run_id))["state"] in ("succeeded", "failed") and b, timeout=120,
                    what="the gang to end")
    assert body["state"] == "succeeded", (body["reason"], worker.logs())
    assert {p.node for p in SimPod.objects.filter(workload=f"run-{run_id}")} == {f"a100-{i}" for i in range(4)}
    assert Decimal(body["cost_to_date"]) > 0 and NodePool.objects.get().history_seconds
    # Idle for a minute and one cycle more, its nodes go (the sandbox's scale-down takes only empty nodes).
    wait_for(lambda: not SimNode.objects.exists(), timeout=150, interval=1, what="the idle nodes to go")


def test_a_failed_provisioning_queues_the_gang_again_after_its_backoff_and_bills_nothing(worker, api):
    sandbox_pools.change("default", "a100", {"failure_probability": 1.0}, timezone.now())
    run_id = post_run(api, "3s", name="unlucky", workers=2, gpus_per_worker=8)["id"]
    body = wait_for(lambda: (b := run_of(api, run_id))["reason_code"] == "provisioning_failed" and b, timeout=90,
                    what="the failed provisioning to requeue the gang")
    assert body["state"] == "queued" and "its nodes could not be provisioned (pool a100-80gb on default: " in \
        body["reason"] and "(try 2 of 3)" in body["reason"], body["reason"]
    assert not UsageRecord.objects.filter(ref=f"run:{run_id}").exists()  # 0 GPU-minutes for a failed gang
    sandbox_pools.change("default", "a100", {"failure_probability": 0.0}, timezone.now())  # before its next try
    not_before = QueuedRequest.objects.get(ref=f"run:{run_id}").not_before
    assert (not_before - timezone.now()).total_seconds() <= BACKOFF  # the worker's backoff, not Kueue's minute
    body = wait_for(lambda: (b := run_of(api, run_id))["state"] in ("succeeded", "failed") and b, timeout=200,
                    interval=1, what="the gang to run after its backoff")
    assert body["state"] == "succeeded", (body["reason"], worker.logs())
    assert body["attempt"] == 1  # a failed provisioning spends no attempt
    assert TrainingRun.objects.get(pk=run_id).admitted_at >= not_before  # not before its backoff
