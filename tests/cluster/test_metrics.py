"""GPU utilization from Prometheus: one query per cycle, per-pod samples averaged per workload."""

from __future__ import annotations

import json
from urllib.parse import parse_qs

import pytest
from werkzeug import Response

from cluster.backends.base import ClusterAddress, ObservedWorkload
from cluster.backends.kubernetes import KubernetesBackend
from cluster.errors import Transient
from cluster.metrics import Prometheus, utilization_query


def pod(name: str, phase: str = "Running") -> dict:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


OBSERVED = [
    ObservedWorkload("team-a", "run-1", pods=[pod("run-1-master-0"), pod("run-1-worker-0")]),
    ObservedWorkload("team-b", "ep-4", pods=[pod("ep-4-abc"), pod("ep-4-def", "Pending")]),
    ObservedWorkload("team-b", "run-9", pods=[pod("run-9-x", "Succeeded")]),
]


def vector(*samples) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"namespace": ns, "pod": name}, "value": [1700000000.0, str(value)]} for ns, name, value in samples]}}


def test_the_query_covers_full_gpus_and_mig_slices_of_the_observed_namespaces():
    query = utilization_query(["team-b", "team-a", "team-b"])
    assert query == (
        'avg by (namespace, pod) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{namespace=~"team-a|team-b"}[2m]))'
        ' or avg by (namespace, pod) (avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{namespace=~"team-a|team-b"}[2m])'
        ' * 100)')


def test_one_query_per_call_averaged_per_workload(httpserver):
    queries = []

    def answer(request):
        queries.append(parse_qs(request.query_string.decode())["query"][0])
        return Response(json.dumps(vector(("team-a", "run-1-master-0", 80), ("team-a", "run-1-worker-0", 40),
                                          ("team-b", "ep-4-abc", "NaN"), ("team-b", "other-pod", 3),
                                          ("team-b", "ep-4-def", 1))), content_type="application/json")

    httpserver.expect_request("/api/v1/query").respond_with_handler(answer)
    backend = KubernetesBackend(host="http://127.0.0.1:1", metrics=Prometheus(httpserver.url_for("/")))
    measured = backend.gpu_utilization(OBSERVED)
    # run-1: the mean of its two running pods; ep-4: its running pod sent NaN (unmeasured) and
    # the pending one is not counted; pods of no observed workload are ignored.
    assert measured == {ClusterAddress("team-a", "run-1"): 60.0}
    assert len(queries) == 1 and 'namespace=~"team-a|team-b"' in queries[0]


def test_nothing_running_costs_no_query(httpserver):
    prometheus = Prometheus(httpserver.url_for("/"))
    assert prometheus.gpu_utilization([OBSERVED[2]]) == {}
    assert prometheus.query_count == 0


@pytest.mark.parametrize(("status", "body"), [
    (500, "boom"),
    (200, "not json"),
    (400, json.dumps({"status": "error", "error": "parse error"})),
    (200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}})),
])
def test_a_failing_prometheus_is_transient(httpserver, status, body):
    httpserver.expect_request("/api/v1/query").respond_with_data(body, status=status)
    with pytest.raises(Transient):
        Prometheus(httpserver.url_for("/")).gpu_utilization(OBSERVED)


def test_an_unreachable_prometheus_is_transient():
    with pytest.raises(Transient, match="unreachable"):
        Prometheus("http://127.0.0.1:9", timeout=1).gpu_utilization(OBSERVED)


def test_without_a_metrics_source_nothing_is_measured():
    assert KubernetesBackend(host="http://127.0.0.1:1").gpu_utilization(OBSERVED) == {}
