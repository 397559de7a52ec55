"""Shared GPUs end to end (issue 37's proof): the API → admission → a real Celery worker on Redis → the
sandbox's device plugin and its time-sliced and MPS GPUs → the reconciler's status and the ledger.

Four endpoints of ``t4-ts4`` land on one physical T4 and are billed a quarter of it each; a fifth waits
for quota; a distributed run on it is refused saying why and what to use; a memory-hungry endpoint
beside three others on the time-sliced T4 is OOMKilled with the sharing named, and an MPS client over
its share of memory fails alone while its neighbour finishes.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.models import UsageRecord
from quotas.demo import seed_flavors, seed_team_quotas
from sandbox.models import SimPod
from tests.e2e.conftest import lend, module_worker, wait_for
from tests.shared_flavors import make_shared_flavors

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(300)]

#: One node with one Tesla T4 time-sliced x4, one with one A10G shared by MPS x2 (GFD's labels).
INVENTORY = """
pools:
  - prefix: t4
    cpu: "64"
    memory: 256Gi
    gpu: {product: Tesla-T4, count: 1, memory_mib: 15360, family: turing}
    sharing: {strategy: time-slicing, replicas: 4, config: t4-ts4}
  - prefix: a10g
    cpu: "64"
    memory: 256Gi
    gpu: {product: NVIDIA-A10G, count: 1, memory_mib: 23028, family: ampere}
    sharing: {strategy: mps, replicas: 2, config: a10g-mps2}
"""


@pytest.fixture(scope="module")
def inventory(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("inventory") / "shared.yaml"
    path.write_text(INVENTORY)
    return str(path)


@pytest.fixture(scope="module")
def shared_gpu_worker(django_db_setup, tmp_path_factory, inventory):
    yield from module_worker(tmp_path_factory, SLIPWAY_SANDBOX_INVENTORY=inventory)


@pytest.fixture
def worker(transactional_db, settings, inventory, shared_gpu_worker):
    settings.SLIPWAY_SANDBOX_INVENTORY = inventory  # this process reads the worker's cluster
    yield from lend(shared_gpu_worker)


@pytest.fixture
def api(team, member, api_client_for):
    seed_flavors()  # the whole-GPU flavors a refusal names instead
    make_shared_flavors()
    seed_team_quotas(team, {"t4-ts4": 4, "a10g-mps2": 2}, Decimal("100000"))
    return api_client_for(member)


def create_endpoint(api, name: str, **env: str) -> dict:
    response = api.post("/api/v1/endpoints/", {
        "team": "ml-research", "name": name, "image": "registry.example.com/serving/small:1", "flavor": "t4-ts4",
        "min_replicas": 1, "max_replicas": 1, "env": {"SLIPWAY_SIM_LOAD_SECONDS": "1", **env}}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def get(api, path: str) -> dict:
    return api.get(f"/api/v1/{path}/").json()


def gpu_of(body: dict) -> tuple[str, int | None]:
    """The node and physical GPU the workload's running pod holds a replica of (the sandbox's record)."""
    pod = SimPod.objects.filter(namespace=body["namespace"], workload=body["object_name"], phase="Running").get()
    return pod.node, pod.gpu


def test_four_endpoints_share_one_t4_billed_a_quarter_each_and_a_fifth_waits_for_quota(worker, api):
    endpoints = [create_endpoint(api, f"small-{i}") for i in range(4)]
    for ep in endpoints:
        wait_for(lambda ep=ep: get(api, f"endpoints/{ep['id']}")["state"] == "ready", timeout=90,
                 what=f"{ep['name']} to be ready")

    # One physical T4: four replicas of it, one per pod.
    assert {gpu_of(ep) for ep in endpoints} == {("t4-0", 0)}
    # A quarter of the T4's 0.40 an hour each: the unit's price.
    flavor = next(f for f in get(api, "flavors")["results"] if f["name"] == "t4-ts4")
    assert flavor["replicas"] == 4 and flavor["isolation"] == "none"
    for ep in endpoints:
        assert Decimal(get(api, f"endpoints/{ep['id']}")["cost_per_hour_now"]) == Decimal("0.10")

    # The fifth finds the team's four units held: it waits, saying so.
    fifth = create_endpoint(api, "small-4")
    assert fifth["state"] == "queued"
    assert "t4-ts4" in fifth["reason"] and "quota" in fifth["reason"]

    # Deleting one closes its ledger segment as a quarter of a GPU; the fifth takes the freed replica.
    assert api.delete(f"/api/v1/endpoints/{endpoints[0]['id']}/").status_code in (202, 204)
    wait_for(lambda: get(api, f"endpoints/{fifth['id']}")["state"] == "ready", timeout=90,
             what="the fifth endpoint to take the freed unit")
    assert gpu_of(get(api, f"endpoints/{fifth['id']}")) == ("t4-0", 0)
    rows = wait_for(lambda: list(UsageRecord.objects.filter(ref=f"ep:{endpoints[0]['id']}")), timeout=60,
                    what="the deleted endpoint's ledger rows")
    assert rows and all(r.units == 1 for r in rows)
    # The ledger's two figures of time (docs/money.md): unit-hours held, and physical GPU-hours a quarter
    # of them; each row rounds each to 1e-10, so the sums agree within that per row.
    unit_hours = sum(r.unit_hours for r in rows)
    assert unit_hours > 0
    slack = Decimal("1e-10") * len(rows)
    assert abs(sum(r.gpu_hours for r in rows) - unit_hours / 4) <= slack
    assert abs(sum(r.cost for r in rows) - unit_hours * Decimal("0.10")) <= slack


def test_a_distributed_run_on_a_time_sliced_flavor_is_refused_saying_what_to_use(worker, api):
    response = api.post("/api/v1/runs/", {
        "team": "ml-research", "name": "ddp", "image": "registry.example.com/ml/train:1", "command": ["python", "t.py"],
        "flavor": "t4-ts4", "workers": 2, "gpus_per_worker": 1}, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert "t4-ts4 is a time-sliced share of one GPU" in errors["workers"][0]
    assert "Use l4 (NVIDIA-L4, whole GPUs) instead." in errors["workers"][0]
    assert "does not take training runs" in errors["flavor"][0]
    assert not get(api, "runs")["results"]  # nothing written


def test_a_memory_hungry_endpoint_on_the_time_sliced_t4_is_oomkilled_naming_the_sharing(worker, api):
    others = [create_endpoint(api, f"small-{i}") for i in range(3)]
    for ep in others:
        wait_for(lambda ep=ep: get(api, f"endpoints/{ep['id']}")["state"] == "ready", timeout=90,
                 what=f"{ep['name']} to be ready")
    hungry = create_endpoint(api, "hungry", SLIPWAY_SIM_GPU_MEMORY_GB="12")
    body = wait_for(lambda: (lambda b: b if "OOMKilled" in b["reason"] else None)(get(api, f"endpoints/{hungry['id']}")),
                    timeout=90, what="the hungry endpoint's OOM kill")
    assert ("OOMKilled (exit 137): GPU memory is shared with 3 other pods on this time-sliced GPU: they hold "
            "6.0 GiB of its 15.0 GiB, this pod asked for 12.0 GiB") in body["reason"]
    assert body["replicas"] == 0
    for ep in others:  # the others serve on
        assert get(api, f"endpoints/{ep['id']}")["state"] == "ready"


def test_an_mps_client_over_its_share_of_memory_fails_alone(worker, api):
    def submit(name: str, **env: str) -> dict:
        response = api.post("/api/v1/runs/", {
            "team": "ml-research", "name": name, "image": "registry.example.com/ml/train:1",
            "command": ["python", "t.py"], "flavor": "a10g-mps2", "gpus_per_worker": 1, "max_retries": 0,
            "env": {"SLIPWAY_SIM_DURATION": "20s", **env}}, format="json")
        assert response.status_code == 201, response.content
        return response.json()

    small, large = submit("small"), submit("large", SLIPWAY_SIM_GPU_MEMORY_GB="16")
    failed = wait_for(lambda: (lambda b: b if b["state"] == "failed" else None)(get(api, f"runs/{large['id']}")),
                      timeout=90, what="the large MPS client to fail")
    assert ("OOMKilled (exit 137): MPS limits each of this GPU's 2 clients to 11.2 GiB of its 22.5 GiB; "
            "this pod asked for 16.0 GiB") in failed["reason"]
    wait_for(lambda: get(api, f"runs/{small['id']}")["state"] == "succeeded", timeout=90,
             what="its neighbour to finish")
