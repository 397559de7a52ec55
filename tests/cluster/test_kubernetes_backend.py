"""KubernetesBackend over real HTTP against the in-repo fake API server (tests/cluster/fakeapi.py)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
import urllib3
import yaml

from cluster import training
from cluster.backends.base import ClusterAddress
from cluster.backends.kubernetes import KubernetesBackend, TokenBucket, map_error
from cluster.errors import ClusterError, Conflict, Invalid, NotFound, Transient
from cluster.manifests import build_env_secret, build_team, labels
from cluster.manifests.provisioning import build_provisioning, consuming, pod_sets
from cluster.pools import PROVISIONED, provisioning_state
from inference.kind import EndpointKind
from inference.manifests import build_endpoint
from inference.status import endpoint_status
from jobs.kind import TrainingKind
from jobs.manifests import build_training
from tests.cluster import samples
from tests.cluster.fakeapi import FakeKubeAPI
from tests.test_import_cycles import REPO

#: What the two product kinds declare (the portal hands the backend every registered kind's).
RESOURCES = TrainingKind.resources + EndpointKind.resources


def _job(name: str, namespace: str = "team-vision", team: str = "vision", managed: bool = True) -> dict:
    labels = {"slipway.dev/team": team, "slipway.dev/workload": name}
    if managed:
        labels["app.kubernetes.io/managed-by"] = "slipway"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"template": {"spec": {"containers": []}}},
        "status": {"active": 1},
    }


def test_it_does_not_contact_the_server_when_constructed() -> None:
    backend = KubernetesBackend(host="http://127.0.0.1:9")  # nothing listens there
    assert backend.request_count == 0
    assert backend._api is None


def test_it_applies_with_server_side_apply_as_slipway(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    backend.apply(build_training(samples.training(), samples.CONFIG), RESOURCES)

    patch = next(r for r in kube_api.requests if r.method == "PATCH")
    assert patch.path == "/apis/batch/v1/namespaces/team-vision/jobs/run-42"
    assert patch.query == {"fieldManager": ["slipway"], "force": ["true"]}
    assert patch.headers["Content-Type"] == "application/apply-patch+yaml"


def test_it_applies_twice_into_one_object(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    objects = build_team(samples.team(), samples.CONFIG) + build_endpoint(samples.endpoint(), samples.CONFIG)
    first = backend.apply(objects, RESOURCES)
    second = backend.apply(objects, RESOURCES)

    assert len(kube_api.objects) == len(objects) == 8
    assert [o["metadata"]["uid"] for o in first] == [o["metadata"]["uid"] for o in second]
    # Nothing changed, so the generation did not move either.
    assert {o["metadata"]["generation"] for o in second} == {1}


def test_it_keeps_status_when_reapplying(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    backend.apply(build_training(samples.training(), samples.CONFIG), RESOURCES)
    stored = kube_api.get("batch/v1", "Job", "team-vision", "run-42")
    stored["status"] = {"active": 1}
    backend.apply(build_training(samples.training(), samples.CONFIG), RESOURCES)
    assert kube_api.get("batch/v1", "Job", "team-vision", "run-42")["status"] == {"active": 1}


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (404, NotFound),
        (409, Conflict),
        (422, Invalid),
        (400, Invalid),
        (429, Transient),
        (500, Transient),
        (503, Transient),
        (403, ClusterError),
    ],
)
def test_it_maps_http_errors_to_cluster_errors(
    backend: KubernetesBackend, kube_api: FakeKubeAPI, status: int, error: type
) -> None:
    kube_api.fail(status, method="PATCH", message=f"server says {status}")
    with pytest.raises(error) as caught:
        backend.apply(build_training(samples.training(), samples.CONFIG), RESOURCES)
    assert type(caught.value) is error
    assert caught.value.status == status
    assert caught.value.message == f"server says {status}"
    assert caught.value.retryable is (error is Transient)


def test_it_maps_a_timeout_to_transient(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    kube_api.fail(delay=2.5, method="GET")  # the backend's timeout is 1 s
    with pytest.raises(Transient, match=r"timed out|cannot reach"):
        backend.observe(RESOURCES)


def test_it_maps_connection_refused_to_transient() -> None:
    backend = KubernetesBackend(host="http://127.0.0.1:9", timeout=1)
    with pytest.raises(Transient):
        backend.observe(RESOURCES)


def test_it_maps_client_exceptions_with_one_function() -> None:
    from kubernetes.client.exceptions import ApiException

    api_error = ApiException(status=409, reason="Conflict")
    api_error.body = b'{"kind":"Status","message":"jobs \\"run-1\\" already exists"}'
    assert isinstance(map_error(api_error), Conflict)
    assert map_error(api_error).message == 'jobs "run-1" already exists'
    assert isinstance(map_error(urllib3.exceptions.ReadTimeoutError(None, "/x", "read timed out")), Transient)
    assert isinstance(map_error(urllib3.exceptions.NewConnectionError(None, "refused")), Transient)
    assert type(map_error(RuntimeError("boom"))) is ClusterError


def test_it_stops_a_batch_at_the_first_rejected_object(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    objects = build_endpoint(samples.endpoint(), samples.CONFIG)
    kube_api.fail(422, method="PATCH", path_contains="/deployments/")
    with pytest.raises(Invalid):
        backend.apply(objects, RESOURCES)
    assert kube_api.objects == {}


def test_it_rejects_objects_of_unknown_kind_before_sending(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    with pytest.raises(Invalid):
        backend.apply([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x", "namespace": "team-vision"}}], RESOURCES)
    assert kube_api.requests == []


def test_it_observes_only_managed_objects_grouped_by_workload(
    backend: KubernetesBackend, kube_api: FakeKubeAPI
) -> None:
    kube_api.put(_job("run-1"))
    kube_api.put(_job("run-2", namespace="team-nlp", team="nlp"))
    kube_api.put(_job("stranger", managed=False))
    kube_api.put(samples.pod("run-1-abcde", "run-1"))
    kube_api.put(samples.pod("run-3-worker-0", "run-3", extra_labels={"training.kubeflow.org/replica-type": "worker"}))
    kube_api.put(samples.pod("run-3-master-0", "run-3", extra_labels={"training.kubeflow.org/replica-type": "master"}))

    observed = {(o.namespace, o.object_name): o for o in backend.observe(RESOURCES)}

    assert set(observed) == {("team-vision", "run-1"), ("team-nlp", "run-2"), ("team-vision", "run-3")}
    run1 = observed[("team-vision", "run-1")]
    assert run1.team == "vision"
    assert run1.first("Job")["apiVersion"] == "batch/v1"  # filled in from the LIST's kind
    assert [p["metadata"]["name"] for p in run1.pods] == ["run-1-abcde"]
    # The master pod comes first whatever the listing order.
    assert [p["metadata"]["name"] for p in observed[("team-vision", "run-3")].pods] == [
        "run-3-master-0",
        "run-3-worker-0",
    ]
    lists = [r for r in kube_api.requests if r.method == "GET"]
    # KEDA's HPAs by the workload label alone (KEDA may set its own managed-by); the rest by managed-by.
    assert sorted(r.query["labelSelector"][0] for r in lists) == sorted(
        ["app.kubernetes.io/managed-by=slipway"] * (len(lists) - 1) + ["slipway.dev/workload"])
    assert all("/namespaces/" not in r.path for r in lists)  # cluster-wide


def test_it_observes_with_a_constant_number_of_calls(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    def calls_for(count: int) -> int:
        for i in range(count):
            kube_api.put(_job(f"run-{i}"))
            kube_api.put(samples.pod(f"run-{i}-pod", f"run-{i}"))
        kube_api.reset_requests()
        observed = backend.observe(RESOURCES)
        assert len(observed) == count
        return len(kube_api.requests)

    small = calls_for(3)
    large = calls_for(120)
    # Jobs, PyTorchJobs, TrainJobs, PersistentVolumeClaims, ProvisioningRequests, Deployments, ScaledObjects, HPAs, Pods
    assert small == large == 9


def test_it_reads_a_missing_crd_as_none_of_that_kind(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    kube_api.uninstalled |= {"pytorchjobs", "scaledobjects"}
    kube_api.put(_job("run-1"))
    assert [o.object_name for o in backend.observe(RESOURCES)] == ["run-1"]


def test_it_does_not_hide_a_missing_core_kind(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    kube_api.fail(404, method="GET", path_contains="/jobs")
    with pytest.raises(NotFound):
        backend.observe(RESOURCES)


def test_it_deletes_a_workload_in_the_background(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    backend.apply(build_endpoint(samples.endpoint(), samples.CONFIG), RESOURCES)
    backend.apply(build_endpoint(samples.endpoint(object_name="ep-8"), samples.CONFIG), RESOURCES)

    assert backend.delete(ClusterAddress("team-vision", "ep-7"), RESOURCES) == 3
    assert {d[0] for d in kube_api.deletions} == {"ScaledObject", "Deployment", "Service"}
    assert {d[3] for d in kube_api.deletions} == {"Background"}
    assert kube_api.deletions[0][0] == "ScaledObject"  # stop autoscaling first
    assert {o["metadata"]["name"] for o in kube_api.objects.values()} == {"ep-8"}
    assert backend.delete(ClusterAddress("team-vision", "ep-7"), RESOURCES) == 0


def test_it_lists_the_pods_of_one_workload_and_reads_any_of_their_logs(backend: KubernetesBackend,
                                                                        kube_api: FakeKubeAPI) -> None:
    kube_api.put(samples.pod("run-3-worker-0", "run-3", extra_labels={"training.kubeflow.org/replica-type": "worker"}))
    kube_api.put(samples.pod("run-3-master-0", "run-3", extra_labels={"training.kubeflow.org/replica-type": "master"}))
    kube_api.put(samples.pod("run-4-abcde", "run-4"))
    kube_api.logs[("team-vision", "run-3-master-0")] = [f"step {i}" for i in range(10)]
    kube_api.logs[("team-vision", "run-3-worker-0")] = ["worker line"]
    ref = ClusterAddress("team-vision", "run-3")

    assert sorted(p["metadata"]["name"] for p in backend.pods(ref)) == ["run-3-master-0", "run-3-worker-0"]
    assert backend.pods(ClusterAddress("team-vision", "run-404")) == []
    assert backend.logs(ref, "run-3-master-0", tail=3) == ["step 7", "step 8", "step 9"]
    assert backend.logs(ref, "run-3-worker-0") == ["worker line"]
    # The whole log for a download: no tailLines, a byte cap instead.
    assert backend.logs(ref, "run-3-master-0", tail=None) == [f"step {i}" for i in range(10)]


def test_a_read_since_a_time_asks_for_the_lines_from_then_with_their_time_stamps(backend: KubernetesBackend,
                                                                                  kube_api: FakeKubeAPI) -> None:
    """The training metrics reader's read (jobs.metrics): from the last line's time, stamped by the
    kubelet, the newest ``tail`` lines and a byte cap."""
    kube_api.put(samples.pod("run-3-master-0", "run-3"))
    kube_api.logs[("team-vision", "run-3-master-0")] = ["2026-11-22T10:00:05.000000001Z step=1 loss=2"]
    ref = ClusterAddress("team-vision", "run-3")
    since = datetime(2026, 11, 22, 11, 0, 4, 500000, tzinfo=timezone(timedelta(hours=1)))
    assert backend.logs(ref, "run-3-master-0", tail=2000, since=since) == ["2026-11-22T10:00:05.000000001Z step=1 loss=2"]
    query = kube_api.requests[-1].query
    assert query["sinceTime"] == ["2026-11-22T10:00:04Z"] and query["timestamps"] == ["true"]
    assert query["tailLines"] == ["2000"] and "limitBytes" in query


def test_it_reads_a_restarted_replicas_previous_run_and_nothing_when_there_is_none(backend: KubernetesBackend,
                                                                                   kube_api: FakeKubeAPI) -> None:
    """A PyTorchJob replica restarts in place (OnFailure): its earlier attempt is ``previous=true``."""
    kube_api.put(samples.pod("run-3-master-0", "run-3", extra_labels={"training.kubeflow.org/replica-type": "master"}))
    kube_api.logs[("team-vision", "run-3-master-0")] = ["attempt 2 line"]
    kube_api.previous_logs[("team-vision", "run-3-master-0")] = ["attempt 1 line", "RuntimeError: NCCL error"]
    ref = ClusterAddress("team-vision", "run-3")
    assert backend.logs(ref, "run-3-master-0", previous=True) == ["attempt 1 line", "RuntimeError: NCCL error"]
    assert ("previous", ["true"]) in kube_api.requests[-1].query.items()
    assert backend.logs(ref, "run-3-master-0", tail=None) == ["attempt 2 line"]
    del kube_api.previous_logs[("team-vision", "run-3-master-0")]
    assert backend.logs(ref, "run-3-master-0", previous=True) == []  # the API's 400: it never restarted


def test_it_lists_events_of_the_workload_and_its_children(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    def event(name: str, involved: str, reason: str, when: str) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": "team-vision"},
            "involvedObject": {"kind": "Pod", "name": involved},
            "reason": reason,
            "message": f"{reason} happened",
            "type": "Warning" if reason == "FailedScheduling" else "Normal",
            "lastTimestamp": when,
            "count": 2,
        }

    kube_api.put(event("e1", "run-4-abc", "Pulled", "2026-01-01T10:02:00Z"))
    kube_api.put(event("e2", "run-4-abc", "FailedScheduling", "2026-01-01T10:01:00Z"))
    kube_api.put(event("e3", "run-42-xyz", "Pulled", "2026-01-01T10:00:00Z"))  # another workload

    events = backend.events(ClusterAddress("team-vision", "run-4"))
    assert [(e.reason, e.type, e.object, e.count) for e in events] == [
        ("FailedScheduling", "Warning", "Pod/run-4-abc", 2),
        ("Pulled", "Normal", "Pod/run-4-abc", 2),
    ]


def test_it_computes_capacity_from_allocatable_minus_requests(
    backend: KubernetesBackend, kube_api: FakeKubeAPI
) -> None:
    def node(name: str, allocatable: dict[str, str]) -> dict:
        return _node(name, allocatable)

    kube_api.put(node("a100-1", {"nvidia.com/gpu": "8"}))
    kube_api.put(node("a100-mig", {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "0"}))
    kube_api.put(node("cpu-1", {}))
    kube_api.put(samples.pod("a", "run-1", gpus=2, node="a100-1"))
    kube_api.put(
        samples.pod("b", "other", gpus=1, node="a100-1", namespace="someone-else")
    )  # not Slipway's: still counts
    kube_api.put(samples.pod("c", "run-2", gpus=4, node="a100-1", phase="Succeeded"))  # finished: frees its GPUs
    kube_api.put(samples.pod("d", "ep-1", gpus=3, node="a100-mig", resource="nvidia.com/mig-1g.10gb"))
    kube_api.put(samples.pod("e", "run-5", gpus=8, node=None, phase="Pending"))  # not bound yet

    capacity = {(c.node, c.resource_name): (c.allocatable, c.in_use, c.free) for c in backend.capacity()}
    assert capacity == {
        ("a100-1", "nvidia.com/gpu"): (8, 3, 5),
        ("a100-mig", "nvidia.com/mig-1g.10gb"): (7, 3, 4),
    }


def _node(name: str, allocatable: dict[str, str], ready: str | None = "True") -> dict:
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
        "status": {"allocatable": {"cpu": "96", "memory": "1Ti", **allocatable}, "conditions": conditions},
    }


def test_a_node_that_is_not_ready_is_provisioning(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    """An autoscaler's new node exists before its kubelet says Ready: its GPUs are on their way, not free now."""
    kube_api.put(_node("up", {"nvidia.com/gpu": "8"}))
    kube_api.put(_node("booting", {"nvidia.com/gpu": "8"}, ready="False"))
    kube_api.put(_node("unknown", {"nvidia.com/gpu": "8"}, ready="Unknown"))
    kube_api.put(_node("registered", {"nvidia.com/gpu": "8"}, ready=None))  # no Ready condition reported yet

    provisioning = {row.node: row.provisioning for row in backend.capacity()}
    assert provisioning == {"up": False, "booting": True, "unknown": True, "registered": True}


def _nodepool(name: str, limits: dict, labels: dict | None = None, requirements: list | None = None) -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"limits": limits, "template": {"metadata": {"labels": labels or {}},
                                                    "spec": {"requirements": requirements or []}}}}


def test_it_reads_karpenters_gpu_limits_with_the_labels_their_nodes_get(backend: KubernetesBackend,
                                                                        kube_api: FakeKubeAPI) -> None:
    kube_api.put(_nodepool("h100", {"cpu": "1000", "memory": "4000Gi", "nvidia.com/gpu": "32"},
                           labels={"team": "ml"},
                           requirements=[
                               {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]},
                               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                               {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-east-1e"]},
                           ]))
    kube_api.put(_nodepool("mig", {"nvidia.com/mig-1g.10gb": 56, "nvidia.com/gpu": "8"}))
    kube_api.put(_nodepool("cpu", {"cpu": "500"}))  # no GPU limit: no pool of Slipway's

    pools = backend.node_pools()

    assert [(p.name, p.resource_name, p.limit) for p in pools] == [
        ("h100", "nvidia.com/gpu", 32), ("mig", "nvidia.com/gpu", 8), ("mig", "nvidia.com/mig-1g.10gb", 56)]
    # Its template's labels, and the requirements that pin a key to one value; the others say no one label.
    assert pools[0].labels == {"team": "ml", "node.kubernetes.io/instance-type": "p5.48xlarge"}
    [listing] = [r for r in kube_api.requests if r.method == "GET"]
    assert listing.path == "/apis/karpenter.sh/v1/nodepools"  # cluster-scoped, one call


def test_a_cluster_without_karpenter_has_no_node_pools(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    kube_api.uninstalled.add("nodepools")
    assert backend.node_pools() == []


def test_it_applies_observes_and_deletes_an_atomic_pools_request_with_its_run(backend: KubernetesBackend,
                                                                            kube_api: FakeKubeAPI) -> None:
    """The request and its PodTemplates are the run's (its labels): the run observes the request's conditions
    and deletes both with the rest of its objects, the request before its templates."""
    objects = build_training(samples.training(workers=3), samples.CONFIG)
    request = build_provisioning("run-42", "team-vision", labels("vision", "run-42"), pod_sets(objects))
    backend.apply(request, RESOURCES)
    stored = kube_api.get("autoscaling.x-k8s.io/v1", "ProvisioningRequest", "team-vision", "run-42")
    stored["status"] = {"conditions": [{"type": "Provisioned", "status": "True", "reason": "Provisioned",
                                        "message": "capacity is ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    kube_api.put(stored)

    [run] = backend.observe(RESOURCES)
    assert [o["kind"] for o in run.objects] == ["ProvisioningRequest"]  # the PodTemplates are not observed
    assert provisioning_state(run.first("ProvisioningRequest")).state == PROVISIONED

    backend.apply(consuming(objects, "run-42"), RESOURCES)
    assert backend.delete(ClusterAddress("team-vision", "run-42"), RESOURCES) == 3
    assert [d[0] for d in kube_api.deletions] == ["PyTorchJob", "ProvisioningRequest", "PodTemplate"]
    assert kube_api.objects == {}


def test_every_call_it_makes_is_one_the_cluster_role_grants(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    """deploy/rbac.yaml against what the backend really sends: each request as the verb the API server
    authorizes it as (a LIST, a GET, a PATCH that may create, a DELETE), for runs on an atomic pool, endpoints,
    capacity and Karpenter's pools."""
    role = next(doc for doc in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text())
                if doc["kind"] == "ClusterRole")
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    kube_api.install(TRAINJOB)
    run = build_training(samples.training(workers=2), samples.CONFIG)
    backend.apply(build_provisioning("run-42", "team-vision", labels("vision", "run-42"), pod_sets(run)), RESOURCES)
    backend.apply(consuming(run, "run-42"), RESOURCES)
    backend.apply(build_endpoint(samples.endpoint(), samples.CONFIG), RESOURCES)
    backend.observe(RESOURCES)
    backend.capacity()
    backend.node_pools()
    backend.delete(ClusterAddress("team-vision", "run-42"), RESOURCES)
    backend.delete(ClusterAddress("team-vision", "ep-7"), RESOURCES)

    used = set()
    for request in kube_api.requests:
        segments = [s for s in request.path.split("/") if s]
        group = "" if segments[0] == "api" else segments[1]
        rest = segments[2:] if segments[0] == "api" else segments[3:]
        if rest[:1] == ["namespaces"] and len(rest) > 2:
            rest = rest[2:]
        named = len(rest) > 1
        verb = {"GET": "get" if named else "list", "PATCH": "patch", "DELETE": "delete"}[request.method]
        used.add((group, rest[0], verb))
        if request.method == "PATCH":
            used.add((group, rest[0], "create"))  # server-side apply of a new object is authorized as create too
    assert {(g, r) for g, r, _v in used} >= {("", "podtemplates"), ("autoscaling.x-k8s.io", "provisioningrequests"),
                                              ("karpenter.sh", "nodepools"), ("", "services")}
    assert used - granted == set()


def test_it_limits_its_request_rate_with_a_token_bucket() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)

    bucket = TokenBucket(qps=10, burst=3, clock=lambda: now[0], sleep=sleep)
    waits = [bucket.acquire() for _ in range(5)]
    assert waits[:3] == [0, 0, 0]  # the burst is free
    assert waits[3] == pytest.approx(0.1)  # then one token per 1/qps
    assert waits[4] == pytest.approx(0.2)
    now[0] = 10.0  # a long pause refills to the burst, not beyond
    assert [bucket.acquire() for _ in range(4)][:3] == [0, 0, 0]


def test_it_shares_the_token_bucket_safely_between_threads() -> None:
    bucket = TokenBucket(qps=1000, burst=5, clock=lambda: 0.0, sleep=lambda s: None)
    waits: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(50):
            w = bucket.acquire()
            with lock:
                waits.append(w)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # With a frozen clock every token is reserved exactly once: 5 free, then 1 ms apart.
    assert sorted(waits) == pytest.approx([0.0] * 5 + [i / 1000 for i in range(1, 396)])


def test_it_sends_every_request_through_the_limiter(kube_api: FakeKubeAPI) -> None:
    backend = KubernetesBackend(host=kube_api.url, qps=1000, burst=1000)
    calls: list[int] = []
    original = backend.limiter.acquire
    backend.limiter.acquire = lambda: calls.append(1) or original()  # type: ignore[method-assign]
    backend.observe(RESOURCES)
    backend.capacity()
    assert len(calls) == backend.request_count == len(kube_api.requests) == 11  # 9 for observe, 2 for capacity


def test_it_authenticates_with_the_kubeconfig_it_is_given(kube_api: FakeKubeAPI, tmp_path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        f"""
apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{kube_api.url}"}}}}]
users: [{{name: slipway, user: {{token: test-token-123}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: slipway}}}}]
current-context: fake
"""
    )
    backend = KubernetesBackend(kubeconfig=str(kubeconfig))
    assert kube_api.requests == []  # configuration is loaded lazily
    backend.observe(RESOURCES)
    sent = [{k.lower(): v for k, v in r.headers.items()} for r in kube_api.requests]
    assert {h.get("authorization") for h in sent} == {"Bearer test-token-123"}


def test_it_reports_a_broken_kubeconfig_as_a_cluster_error(tmp_path) -> None:
    backend = KubernetesBackend(kubeconfig=str(tmp_path / "missing"))
    with pytest.raises(ClusterError):
        backend.observe(RESOURCES)



def test_it_attaches_kedas_autoscaler_to_its_endpoint(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    deployment, service, scaled = build_endpoint(samples.endpoint(), samples.CONFIG)
    backend.apply([deployment, service, scaled], RESOURCES)
    labels = {**scaled["metadata"]["labels"], "app.kubernetes.io/managed-by": "keda-operator"}
    kube_api.put({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                  "metadata": {"name": "keda-hpa-ep-7", "namespace": "team-vision", "labels": labels},
                  "status": {"conditions": [{"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas"}]}})
    kube_api.put({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                  "metadata": {"name": "someone-elses", "namespace": "team-vision",
                               "labels": {"slipway.dev/workload": "not-ours"}}})
    [observed] = backend.observe(RESOURCES)
    assert [o["kind"] for o in observed.objects].count("HorizontalPodAutoscaler") == 1
    assert endpoint_status(observed).scaling_limited is True


def test_it_applies_a_secret_one_way_and_deletes_it_with_its_workload(
    backend: KubernetesBackend, kube_api: FakeKubeAPI
) -> None:
    secret = build_env_secret("team-vision", "vision", "run-42", (("HF_TOKEN", "hf_example"),))
    backend.apply(build_training(samples.training(secret_env=("HF_TOKEN",)), samples.CONFIG), RESOURCES)
    assert backend.apply_secret(secret) is None  # the stored Secret (values included) is not handed back

    patch = kube_api.requests[-1]
    assert (patch.method, patch.path) == ("PATCH", "/api/v1/namespaces/team-vision/secrets/run-42-env")
    assert patch.query == {"fieldManager": ["slipway"], "force": ["true"]}
    assert patch.headers["Content-Type"] == "application/apply-patch+yaml"
    assert kube_api.get("v1", "Secret", "team-vision", "run-42-env")["data"] == {"HF_TOKEN": "aGZfZXhhbXBsZQ=="}

    # Deleting the workload deletes its Secret by name: Slipway may not list Secrets (the fake refuses, as RBAC).
    assert backend.delete(ClusterAddress("team-vision", "run-42"), RESOURCES) == 2
    assert ("Secret", "team-vision", "run-42-env", "Background") in kube_api.deletions
    assert kube_api.of_kind("Secret") == [] and kube_api.of_kind("Job") == []
    assert not [r for r in kube_api.requests if "/secrets" in r.path and r.method == "GET"]
    assert backend.delete(ClusterAddress("team-vision", "run-42"), RESOURCES) == 0  # gone already: not an error


def test_it_never_applies_a_secret_through_the_generic_apply(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    secret = build_env_secret("team-vision", "vision", "run-42", (("HF_TOKEN", "hf_example"),))
    with pytest.raises(Invalid):
        backend.apply([secret], RESOURCES)
    assert kube_api.requests == []


def test_it_annotates_the_running_pods_of_one_workload_with_a_merge_patch(
    backend: KubernetesBackend, kube_api: FakeKubeAPI
) -> None:
    running = samples.pod("run-3-master-0", "run-3")
    running["metadata"]["annotations"] = {"example.com/kept": "yes", "example.com/dropped": "x"}
    kube_api.put(running)
    kube_api.put(samples.pod("run-3-worker-0", "run-3"))
    kube_api.put(samples.pod("run-3-old", "run-3", phase="Failed"))  # finished: nothing to tell it
    kube_api.put(samples.pod("run-4-abcde", "run-4"))
    kube_api.reset_requests()

    notice = {"slipway.dev/notice": "2026-11-22T10:05:00Z", "example.com/dropped": None}
    assert backend.annotate_pods(ClusterAddress("team-vision", "run-3"), notice) == 2

    [listing] = [r for r in kube_api.requests if r.method == "GET"]
    assert listing.query["labelSelector"] == ["app.kubernetes.io/managed-by=slipway,slipway.dev/workload=run-3"]
    patches = [r for r in kube_api.requests if r.method == "PATCH"]
    assert sorted(r.path for r in patches) == ["/api/v1/namespaces/team-vision/pods/run-3-master-0",
                                               "/api/v1/namespaces/team-vision/pods/run-3-worker-0"]
    assert {r.headers["Content-Type"] for r in patches} == {"application/merge-patch+json"}
    assert kube_api.get("v1", "Pod", "team-vision", "run-3-master-0")["metadata"]["annotations"] == {
        "example.com/kept": "yes", "slipway.dev/notice": "2026-11-22T10:05:00Z"}
    assert kube_api.get("v1", "Pod", "team-vision", "run-3-worker-0")["metadata"]["annotations"] == {
        "slipway.dev/notice": "2026-11-22T10:05:00Z"}
    assert "annotations" not in kube_api.get("v1", "Pod", "team-vision", "run-3-old")["metadata"]
    assert "annotations" not in kube_api.get("v1", "Pod", "team-vision", "run-4-abcde")["metadata"]


def test_it_skips_a_pod_deleted_while_it_annotates(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    kube_api.put(samples.pod("run-3-master-0", "run-3"))
    kube_api.put(samples.pod("run-3-worker-0", "run-3"))
    kube_api.fail(404, method="PATCH", path_contains="/pods/run-3-worker-0")
    assert backend.annotate_pods(ClusterAddress("team-vision", "run-3"), {"slipway.dev/notice": "soon"}) == 1


#: The Trainer v2 TrainJob the training kind declares; the fake serves it once installed (its CRD is the platform's).
TRAINJOB = next(r for r in RESOURCES if r.kind == "TrainJob")


def _trainjob_run() -> list[dict]:
    """A two-node PyTorch run rendered for a Trainer v2 cluster offering Slipway's runtime."""
    return build_training(samples.training(workers=2, framework="pytorch", training_api=training.TRAINJOB,
                                           runtime="slipway-pytorch"), samples.CONFIG)


def test_it_applies_a_trainjob_with_server_side_apply(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    kube_api.install(TRAINJOB)
    [trainjob] = _trainjob_run()
    backend.apply([trainjob], RESOURCES)

    [patch] = [r for r in kube_api.requests if r.method == "PATCH"]
    assert patch.path == "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-vision/trainjobs/run-42"
    assert patch.query == {"fieldManager": ["slipway"], "force": ["true"]}
    assert patch.headers["Content-Type"] == "application/apply-patch+yaml"
    stored = kube_api.get("trainer.kubeflow.org/v1alpha1", "TrainJob", "team-vision", "run-42")
    assert stored["spec"] == trainjob["spec"] and stored["metadata"]["labels"] == trainjob["metadata"]["labels"]


def test_it_observes_a_trainjob_with_its_pods(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    kube_api.install(TRAINJOB)
    backend.apply(_trainjob_run(), RESOURCES)
    # The JobSet's pods carry the workload label the TrainJob's runtime patch gives them.
    jobset = {"jobset.sigs.k8s.io/replicatedjob-name": "node"}
    kube_api.put(samples.pod("run-42-node-0-1-xyz12", "run-42", extra_labels=jobset))
    kube_api.put(samples.pod("run-42-node-0-0-abc34", "run-42", extra_labels=jobset))
    kube_api.put(samples.pod("run-43-node-0-0-def56", "run-43", extra_labels=jobset))

    observed = {o.object_name: o for o in backend.observe(RESOURCES)}

    run = observed["run-42"]
    assert (run.namespace, run.team) == ("team-vision", "vision")
    trainjob = run.first("TrainJob")
    assert trainjob["apiVersion"] == "trainer.kubeflow.org/v1alpha1"  # filled in from the LIST's kind
    assert trainjob["spec"]["runtimeRef"]["name"] == "slipway-pytorch"
    assert [p["metadata"]["name"] for p in run.pods] == ["run-42-node-0-0-abc34", "run-42-node-0-1-xyz12"]
    listing = next(r for r in kube_api.requests if r.method == "GET" and r.path.endswith("/trainjobs"))
    assert listing.path == "/apis/trainer.kubeflow.org/v1alpha1/trainjobs"  # cluster-wide, one call
    assert listing.query["labelSelector"] == ["app.kubernetes.io/managed-by=slipway"]


def test_it_deletes_a_trainjob_with_its_workload(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    kube_api.install(TRAINJOB)
    backend.apply(_trainjob_run(), RESOURCES)
    backend.apply(build_training(samples.training(object_name="run-43"), samples.CONFIG), RESOURCES)

    assert backend.delete(ClusterAddress("team-vision", "run-42"), RESOURCES) == 1
    assert kube_api.deletions == [("TrainJob", "team-vision", "run-42", "Background")]
    assert kube_api.of_kind("TrainJob") == []
    assert [o.object_name for o in backend.observe(RESOURCES)] == ["run-43"]  # another run's Job untouched


@pytest.mark.parametrize("installed_then_removed", [False, True])
def test_a_cluster_without_the_trainjob_crd_refuses_it_and_observes_none(
    backend: KubernetesBackend, kube_api: FakeKubeAPI, installed_then_removed: bool
) -> None:
    if installed_then_removed:
        kube_api.install(TRAINJOB)
        kube_api.uninstalled.add("trainjobs")
    with pytest.raises(NotFound):
        backend.apply(_trainjob_run(), RESOURCES)
    assert kube_api.objects == {}
    kube_api.put(_job("run-1"))
    assert [o.object_name for o in backend.observe(RESOURCES)] == ["run-1"]
    assert backend.delete(ClusterAddress("team-vision", "run-42"), RESOURCES) == 0
