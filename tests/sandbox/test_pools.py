"""The sandbox's elastic pools: ProvisioningRequests of the atomic class provisioned all or nothing at their drawn
times, failed, revoked or expired; a pool of mode ``any`` growing for pending pods; idle nodes removed after their
unneeded minutes and one tick, never below ``min`` and never under a running pod; ``manage.py sandbox pool``."""

from __future__ import annotations

import random
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from cluster.manifests import labels
from cluster.manifests.provisioning import build_provisioning, consuming, pod_sets
from cluster.pools import ATOMIC_CLASS, CLASS_ANNOTATION, CONSUME_ANNOTATION, PROVISIONING_RESOURCES, provisioning_state
from cluster.training import TRAINJOB
from sandbox import pools
from sandbox.backend import SandboxBackend
from sandbox.controllers.provisioning import request_rng_for
from sandbox.inventory import InventoryError, parse_inventory
from sandbox.models import SimNode
from sandbox.scheduler import BOOKED
from sandbox.trainer import installed_runtimes
from sandbox.validation import compile_plan
from tests.sandbox.helpers import L4, NS, at, ref, run_until, team_objects, training
from tests.sandbox.test_trainjob import trainjob
from workloads.registry import resource_kinds

pytestmark = pytest.mark.django_db

#: A cloud cluster: H100 nodes an atomic pool adds (none to start with), L4 nodes a pool of mode any adds (one kept).
CLOUD = """
clusters:
  - name: cloud
    region: us-west1
    pools:
      - prefix: h100
        instance_type: a3-highgpu-8g
        cpu: "208"
        memory: 1872Gi
        gpu: {product: NVIDIA-H100-80GB-HBM3, count: 8}
        elastic: {min: 0, max: 6, mode: atomic, delay_median_seconds: 200, delay_tail_seconds: 800}
      - prefix: l4
        instance_type: g2-standard-8
        gpu: {product: NVIDIA-L4, count: 1}
        elastic: {min: 1, max: 3, mode: any, delay_median_seconds: 60, delay_tail_seconds: 120, unneeded_minutes: 10}
"""
RESOURCES = (*resource_kinds(), *PROVISIONING_RESOURCES)
REQUEST = "run-1-prov"


@pytest.fixture
def cloud(db, settings, tmp_path) -> SandboxBackend:
    path = tmp_path / "cloud.yaml"
    path.write_text(CLOUD)
    settings.SLIPWAY_SANDBOX_INVENTORY = str(path)
    return SandboxBackend("cloud")


def gang(workers: int = 4, name: str = "run-1", consume: str | None = REQUEST) -> list[dict]:
    """A PyTorchJob of ``workers`` pods of 8 H100s each, its pod templates consuming ``consume``."""
    objects = training(name, gpus=8, workers=workers, duration="600s")
    for obj in objects:
        if obj["kind"] == "PyTorchJob" and consume:
            for replica in obj["spec"]["pytorchReplicaSpecs"].values():
                meta = replica["template"].setdefault("metadata", {})
                meta["annotations"] = {**(meta.get("annotations") or {}), CONSUME_ANNOTATION: consume,
                                       CLASS_ANNOTATION: ATOMIC_CLASS}
    return objects


def request(workers: int = 4, name: str = REQUEST, valid: str | None = None) -> list[dict]:
    """A PodTemplate of the gang's worker and a ProvisioningRequest for ``workers`` of them."""
    job = next(o for o in gang(2) if o["kind"] == "PyTorchJob")
    template = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    labels = {"app.kubernetes.io/managed-by": "slipway", "slipway.dev/workload": "run-1"}
    spec = {"provisioningClassName": ATOMIC_CLASS,
            "podSets": [{"podTemplateRef": {"name": f"{name}-worker"}, "count": workers}]}
    if valid:
        spec["parameters"] = {"ValidUntilSeconds": valid}
    return [{"apiVersion": "v1", "kind": "PodTemplate",
             "metadata": {"name": f"{name}-worker", "namespace": NS, "labels": labels}, "template": template},
            {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
             "metadata": {"name": name, "namespace": NS, "labels": labels}, "spec": spec}]


def the_request(backend: SandboxBackend, name: str = REQUEST) -> dict:
    found = next(o for o in backend.observe(RESOURCES) if o.object_name == "run-1")
    return next(o for o in found.objects if o["kind"] == "ProvisioningRequest" and o["metadata"]["name"] == name)


def conditions(backend: SandboxBackend) -> dict[str, dict]:
    return {c["type"]: c for c in the_request(backend)["status"].get("conditions") or []}


def pool_nodes(backend: SandboxBackend, pool: str) -> dict[str, str]:
    """The pool's nodes that exist and their state, as capacity() reports them."""
    return {row.node: "provisioning" if row.provisioning else "ready"
            for row in backend.capacity() if row.node.startswith(f"{pool}-")}


def drawn_delays(backend: SandboxBackend, count: int, median: float = 200, tail: float = 800) -> list[float]:
    """The delays the request's own seeded draws give its nodes (the controller draws them first, in order)."""
    uid = the_request(backend)["metadata"]["uid"]
    rng = request_rng_for(backend.cluster, NS, REQUEST, uid)
    return [pools.provisioning_delay(rng, median, tail) for _ in range(count)]


def test_an_atomic_request_is_provisioned_only_when_all_its_nodes_are_ready_at_their_drawn_times(cloud):
    cloud.apply(team_objects() + request(4), RESOURCES, now=at(0))
    cloud.tick(at(1))
    assert set(conditions(cloud)) == {"Accepted"}
    assert pool_nodes(cloud, "h100") == {f"h100-{i}": "provisioning" for i in range(4)}
    delays = drawn_delays(cloud, 4)
    assert len(set(delays)) == 4 and all(0 < d <= 800 for d in delays)
    # The gang is applied early: its pods never bind on a provisioning node.
    cloud.apply(gang(4), RESOURCES, now=at(2))
    last = max(delays)
    t = 5.0
    while t < 1 + last:
        cloud.tick(at(t))
        ready = {n for n, state in pool_nodes(cloud, "h100").items() if state == "ready"}
        assert ready == {f"h100-{i}" for i, d in enumerate(delays) if 1 + d <= t}
        assert "Provisioned" not in conditions(cloud)
        assert not any(p["spec"].get("nodeName") for p in cloud.pods(ref("run-1")))
        t += 5
    cloud.tick(at(1 + last))
    provisioned = conditions(cloud)["Provisioned"]
    assert provisioned["status"] == "True"
    assert provisioned["lastTransitionTime"] == (at(1 + last)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert provisioning_state(the_request(cloud)).state == "provisioned"
    # The next tick binds the gang on its booked nodes, and the booking is over.
    cloud.tick(at(2 + last))
    assert {p["spec"]["nodeName"] for p in cloud.pods(ref("run-1"))} == {f"h100-{i}" for i in range(4)}
    cloud.tick(at(3 + last))
    assert not SimNode.objects.exclude(request="").exists()


def test_another_pod_does_not_take_a_booked_node(cloud):
    cloud.apply(team_objects() + request(1), RESOURCES, now=at(0))
    cloud.tick(at(1))
    [delay] = drawn_delays(cloud, 1)
    cloud.tick(at(1 + delay))
    assert "Provisioned" in conditions(cloud)
    cloud.apply(training("other", gpus=8, duration="60s"), RESOURCES, now=at(2 + delay))
    cloud.tick(at(3 + delay))
    [pod] = cloud.pods(ref("other"))
    assert not pod["spec"].get("nodeName")
    assert BOOKED in pod["status"]["conditions"][0]["message"]


def test_more_nodes_than_max_fail_at_once(cloud):
    cloud.apply(team_objects() + request(7), RESOURCES, now=at(0))
    cloud.tick(at(1))
    failed = conditions(cloud)["Failed"]
    assert failed["reason"] == "NotProvisioned"
    assert "needs 7 new node(s) of pool h100, which has 0 of at most 6" in failed["message"]
    assert pool_nodes(cloud, "h100") == {}


def test_a_failed_scale_up_fails_the_request_and_keeps_no_node(cloud):
    pools.change("cloud", "h100", {"failure_probability": 1.0}, at(0))
    cloud.apply(team_objects() + request(4), RESOURCES, now=at(0))
    cloud.tick(at(1))
    first = min(drawn_delays(cloud, 4))
    cloud.tick(at(1 + first - 1))
    assert "Failed" not in conditions(cloud) and len(pool_nodes(cloud, "h100")) == 4
    cloud.tick(at(1 + first))
    failed = conditions(cloud)["Failed"]
    assert failed["reason"] == "FailedToProvision"
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in failed["message"] and "by 4 node(s)" in failed["message"]
    assert pool_nodes(cloud, "h100") == {}
    assert "Provisioned" not in conditions(cloud)


def test_revoked_capacity_expires_the_booking_before_any_pod_binds(cloud):
    pools.change("cloud", "h100", {"revoke_probability": 1.0}, at(0))
    cloud.apply(team_objects() + request(2), RESOURCES, now=at(0))
    cloud.tick(at(1))
    last = max(drawn_delays(cloud, 2))
    cloud.tick(at(1 + last))
    assert conditions(cloud)["Provisioned"]["status"] == "True"
    cloud.apply(gang(2), RESOURCES, now=at(2 + last))  # the portal starts the work as soon as it sees it
    cloud.tick(at(3 + last))
    expired = conditions(cloud)["BookingExpired"]
    assert expired["reason"] == "CapacityRevoked"
    assert provisioning_state(the_request(cloud)).state == "booking_expired"
    assert pool_nodes(cloud, "h100") == {}
    assert not any(p["spec"].get("nodeName") for p in cloud.pods(ref("run-1")))


def test_an_unconsumed_booking_expires_after_valid_until_seconds_and_the_nodes_go_idle(cloud):
    cloud.apply(team_objects() + request(1, valid="120"), RESOURCES, now=at(0))
    cloud.tick(at(1))
    [delay] = drawn_delays(cloud, 1)
    cloud.tick(at(1 + delay))
    assert "Provisioned" in conditions(cloud)
    cloud.tick(at(1 + delay + 119))
    assert "BookingExpired" not in conditions(cloud)
    cloud.tick(at(1 + delay + 120))
    assert conditions(cloud)["BookingExpired"]["reason"] == "BookingExpired"
    assert SimNode.objects.get(node="h100-0").request == ""
    # Released, it is an idle node: gone after its unneeded minutes and one more tick (the pool's min is 0).
    run_until(cloud, 2 + delay + 120, 1 + delay + 120 + 600, step=30)
    assert "h100-0" in pool_nodes(cloud, "h100")
    cloud.tick(at(1 + delay + 120 + 631))
    cloud.tick(at(1 + delay + 120 + 632))
    assert pool_nodes(cloud, "h100") == {}


def test_a_pool_of_mode_any_adds_a_node_for_a_pending_pod_and_removes_it_when_idle(cloud):
    assert pool_nodes(cloud, "l4") == {"l4-0": "ready"}  # its min, from the start
    cloud.apply(team_objects() + training("a", flavor=L4, gpus=1, duration="60s"), RESOURCES, now=at(0))
    cloud.apply(training("b", flavor=L4, gpus=1, duration="60s"), RESOURCES, now=at(0))
    cloud.tick(at(1))  # a binds on l4-0, b is unschedulable
    assert {n for p in cloud.pods(ref("a")) + cloud.pods(ref("b")) if (n := p["spec"].get("nodeName"))} == {"l4-0"}
    cloud.tick(at(2))  # the autoscaler sees b pending and asks for a node
    assert pool_nodes(cloud, "l4") == {"l4-0": "ready", "l4-1": "provisioning"}
    row = SimNode.objects.get(node="l4-1")
    assert 0 < (row.ready_at - at(2)).total_seconds() <= 120
    assert any(e.reason == "TriggeredScaleUp" for e in cloud.events(ref("b")))
    run_until(cloud, 5, 130)
    [pod] = cloud.pods(ref("b"))
    assert pod["spec"]["nodeName"] == "l4-1"
    # Both runs end within a few minutes, a first (on l4-0): after 10 idle minutes and one tick, l4-0 goes and
    # l4-1 stays (the pool's min is 1), whichever came first.
    run_until(cloud, 135, 300, step=15)
    first = SimNode.objects.get(node="l4-0").idle_since
    assert first is not None and first < SimNode.objects.get(node="l4-1").idle_since
    idle_until = (first - at(0)).total_seconds() + 600
    run_until(cloud, 315, idle_until - 1, step=15)
    assert set(pool_nodes(cloud, "l4")) == {"l4-0", "l4-1"}
    cloud.tick(at(idle_until))  # found unneeded
    assert set(pool_nodes(cloud, "l4")) == {"l4-0", "l4-1"}
    cloud.tick(at(idle_until + 1))  # removed
    assert pool_nodes(cloud, "l4") == {"l4-1": "ready"}
    run_until(cloud, idle_until + 60, idle_until + 1800, step=300)
    assert pool_nodes(cloud, "l4") == {"l4-1": "ready"}  # never below min


def test_a_node_with_a_running_pod_is_never_removed(cloud):
    pools.change("cloud", "l4", {"min_nodes": 0, "unneeded_minutes": 1}, at(0))
    cloud.apply(team_objects() + training("long", flavor=L4, gpus=1, duration="3h"), RESOURCES, now=at(0))
    run_until(cloud, 1, 3 * 3600 - 60, step=300)
    [pod] = cloud.pods(ref("long"))
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] == "l4-0"
    assert pool_nodes(cloud, "l4") == {"l4-0": "ready"}


def test_the_pool_command_changes_a_pool_live_and_refuses_bad_values(cloud):
    out = StringIO()
    call_command("sandbox", "pool", "cloud", "l4", "--min", "2", "--median", "30", "--tail", "60", stdout=out)
    assert "pool l4 on cloud changed: min 2, max 3, mode any, provisioning delay median 30s tail 60s" in out.getvalue()
    assert "l4-0" in out.getvalue()
    cloud.tick(at(0))
    assert pool_nodes(cloud, "l4") == {"l4-0": "ready", "l4-1": "provisioning"}
    cloud.tick(at(61))
    assert pool_nodes(cloud, "l4") == {"l4-0": "ready", "l4-1": "ready"}
    for args, words in ((["--min", "4"], "0 <= min <= max"), (["--mode", "eager"], "mode must be atomic or any"),
                        (["--failure", "1.5"], "failure_probability must be between 0 and 1"),
                        (["--median", "100", "--tail", "50"], "delay_median_seconds <= delay_tail_seconds"),
                        (["--limit-units", "x"], "--limit-units must be a whole number"),
                        # int() refused 5,000 digits with a traceback of Python's own words.
                        (["--limit-units", "9" * 5000], "--limit-units must be a whole number"),
                        (["--limit-units", "²"], "--limit-units must be a whole number"),
                        (["--max", "9" * 5000], "--max"),
                        (["--max", "9" * 30], "max <= 100")):
        with pytest.raises(CommandError, match=words):
            call_command("sandbox", "pool", "cloud", "l4", *args, stdout=StringIO())
    with pytest.raises(CommandError, match="no elastic pool 'a100'"):
        call_command("sandbox", "pool", "cloud", "a100", stdout=StringIO())
    assert pools.pools("cloud", at(62))["l4"].settings.min_nodes == 2  # nothing changed by the refused ones


def test_limit_units_caps_the_pool_and_is_offered_as_a_node_pool_limit(cloud):
    pools.change("cloud", "h100", {"limit_units": 16}, at(0))
    [limit] = cloud.node_pools()
    assert (limit.name, limit.resource_name, limit.limit) == ("h100", "nvidia.com/gpu", 16)
    assert limit.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    cloud.apply(team_objects() + request(3), RESOURCES, now=at(0))
    cloud.tick(at(1))
    assert "of at most 6 (max, 16 units (limit_units))" in conditions(cloud)["Failed"]["message"]


def test_a_delay_law_has_its_median_and_tail():
    rng = random.Random(7)
    draws = sorted(pools.provisioning_delay(rng, 210, 900) for _ in range(20_000))
    assert 200 <= draws[len(draws) // 2] <= 220
    assert max(draws) == 900 and 0.005 <= sum(1 for d in draws if d >= 900) / len(draws) <= 0.015


def test_the_inventory_refuses_a_malformed_elastic_pool():
    base = {"prefix": "h", "gpu": {"product": "X", "count": 8}}
    for elastic, words in (({"min": 0}, "max is required"), ({"max": 2, "mode": "eager"}, "mode must be"),
                           ({"max": 2, "colour": 1}, "unknown key 'colour'"), ({"max": 2, "min": 3}, "min <= max")):
        with pytest.raises(InventoryError, match=words):
            parse_inventory({"clusters": [{"name": "c", "pools": [{**base, "elastic": elastic}]}]})
    with pytest.raises(InventoryError, match="has no count"):
        parse_inventory({"clusters": [{"name": "c", "pools": [{**base, "count": 2, "elastic": {"max": 2}}]}]})


def test_a_reset_starts_the_pools_again_from_the_inventory(cloud):
    pools.change("cloud", "l4", {"min_nodes": 2}, at(0))
    cloud.tick(at(0))
    cloud.reset()
    assert pool_nodes(cloud, "l4") == {"l4-0": "ready"}
    assert pools.pools("cloud", at(1))["l4"].settings.min_nodes == 1


def test_a_request_for_a_pool_of_mode_any_is_provisioned_at_once_and_books_nothing(cloud):
    objects = request(1)
    template = objects[0]["template"]["spec"]
    template["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-L4"}
    template["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    cloud.apply(team_objects() + objects, RESOURCES, now=at(0))
    cloud.tick(at(1))
    assert conditions(cloud)["Provisioned"]["message"].endswith("(mode any).")
    assert not SimNode.objects.exclude(request="").exists()


def test_the_demo_starts_with_no_west_h100_node_and_its_pool_as_the_inventory_says(db, settings):
    settings.SLIPWAY_SANDBOX_INVENTORY = str(settings.BASE_DIR / "sandbox" / "inventory.yaml")
    west = SandboxBackend("west")
    assert not [n for n in west.capacity() if n.node.startswith("west-h100")]
    live = pools.pools("west", at(0))["west-h100"]
    assert (live.settings.min_nodes, live.settings.max_nodes, live.settings.mode) == (0, 1, "atomic")
    out = StringIO()
    call_command("sandbox", "status", "--cluster", "west", stdout=out)
    assert "west-h100" not in out.getvalue()


def test_the_portals_own_objects_provision_a_gang_and_it_binds_on_its_booking(cloud):
    """cluster.manifests.provisioning's builders, as the portal's cycle uses them: the request and its templates,
    then the run consuming it once Provisioned."""
    run = training("run-1", gpus=8, workers=4, duration="600s")
    objects = build_provisioning(REQUEST, NS, labels("ml", "run-1"), pod_sets(run))
    cloud.apply(team_objects() + objects, RESOURCES, now=at(0))
    cloud.tick(at(1))
    last = max(drawn_delays(cloud, 4))
    cloud.tick(at(1 + last))
    assert provisioning_state(the_request(cloud)).state == "provisioned"
    cloud.apply(consuming(run, REQUEST), RESOURCES, now=at(2 + last))
    cloud.tick(at(3 + last))
    assert {p["spec"]["nodeName"] for p in cloud.pods(ref("run-1"))} == {f"h100-{i}" for i in range(4)}


def test_a_trainjobs_runtime_patches_carry_the_consume_annotation_to_its_pods():
    job = trainjob("tj-1", workers=2, gpus=8)
    trainjob_ = next(o for o in consuming(job, REQUEST) if o["kind"] == "TrainJob")
    plan = compile_plan(trainjob_, installed_runtimes(TRAINJOB))
    assert {pod.get("consume") for pod in plan["pods"] if pod["req"].get("nvidia.com/gpu")} == {REQUEST}
