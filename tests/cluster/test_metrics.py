"""GPU telemetry from Prometheus: one query per cycle, per-GPU samples grouped per workload."""

from __future__ import annotations

import json
from urllib.parse import parse_qs

import promql_parser
import pytest
from werkzeug import Response

from cluster.backends.base import ClusterAddress, GpuReading, ObservedWorkload, WorkloadTelemetry
from cluster.backends.kubernetes import KubernetesBackend
from cluster.errors import Transient
from cluster.metrics import Prometheus, telemetry_query


def pod(name: str, phase: str = "Running") -> dict:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


OBSERVED = [
    ObservedWorkload("team-a", "run-1", pods=[pod("run-1-master-0"), pod("run-1-worker-0")]),
    ObservedWorkload("team-b", "ep-4", pods=[pod("ep-4-abc"), pod("ep-4-def", "Pending")]),
    ObservedWorkload("team-b", "run-9", pods=[pod("run-9-x", "Succeeded")]),
]


def vector(*samples) -> dict:
    """Prometheus' answer: ``(namespace, pod, series, value)`` or ``(namespace, pod, series, value, gpu labels)``."""
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"namespace": ns, "pod": name, "series": series, **(labels[0] if labels else {"UUID": "GPU-1"})},
         "value": [1700000000.0, str(value)]} for ns, name, series, value, *labels in samples]}}


def test_the_query_asks_for_every_series_of_the_observed_namespaces_at_once():
    query = telemetry_query(["team-b", "team-a", "team-b"])
    by = "namespace, pod, Hostname, gpu, UUID, GPU_I_ID"
    sel = 'namespace=~"team-a|team-b"'

    def part(metric, series, scale=""):
        return f'label_replace(avg by ({by}) (avg_over_time({metric}{{{sel}}}[2m])){scale}, "series", "{series}", "", "")'

    assert type(promql_parser.parse(query)).__name__ == "BinaryExpr"  # valid PromQL: the six joined by "or"
    assert query == " or ".join([
        part("DCGM_FI_DEV_GPU_UTIL", "util"), part("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "util", " * 100"),
        part("DCGM_FI_DEV_FB_USED", "fb_used"), part("DCGM_FI_DEV_FB_FREE", "fb_free"),
        part("DCGM_FI_DEV_GPU_TEMP", "temp"), part("DCGM_FI_DEV_POWER_USAGE", "power")])


def serve(httpserver, answer: dict) -> list[str]:
    """Prometheus answering ``answer`` to every query; returns the queries it was sent."""
    queries = []

    def handler(request):
        queries.append(parse_qs(request.query_string.decode())["query"][0])
        return Response(json.dumps(answer), content_type="application/json")

    httpserver.expect_request("/api/v1/query").respond_with_handler(handler)
    return queries


def test_one_query_per_call_grouped_per_workload_and_gpu(httpserver):
    a0, a1 = {"UUID": "GPU-a0"}, {"UUID": "GPU-a1"}
    queries = serve(httpserver, vector(
        ("team-a", "run-1-master-0", "util", 80, a0), ("team-a", "run-1-worker-0", "util", 40, a1),
        ("team-a", "run-1-master-0", "fb_used", 60000, a0), ("team-a", "run-1-master-0", "fb_free", 21920, a0),
        ("team-a", "run-1-master-0", "temp", 71, a0), ("team-a", "run-1-master-0", "power", 350.5, a0),
        ("team-a", "run-1-worker-0", "temp", 65, a1),
        ("team-b", "ep-4-abc", "util", "NaN"), ("team-b", "other-pod", "util", 3),
        ("team-b", "ep-4-def", "util", 1)))
    backend = KubernetesBackend(host="http://127.0.0.1:1", metrics=Prometheus(httpserver.url_for("/")))
    measured = backend.gpu_telemetry(OBSERVED)
    # run-1: one reading per GPU, what each reported; ep-4: its running pod sent NaN (unmeasured)
    # and the pending one is not counted; pods of no observed workload are ignored.
    run = measured.pop(ClusterAddress("team-a", "run-1"))
    assert measured == {}
    assert run.gpus == (GpuReading("GPU-a0", 80.0, 60000.0, 21920.0, 71.0, 350.5),
                        GpuReading("GPU-a1", 40.0, None, None, 65.0, None))
    assert (run.util_pct, run.fb_used_fraction, run.temp_c, run.power_w) == (60.0, 60000 / 81920, 71.0, 350.5)
    assert len(queries) == 1 and 'namespace=~"team-a|team-b"' in queries[0]


def test_a_mig_instance_is_its_parent_and_instance_and_a_gpu_without_uuid_its_node_and_index(httpserver):
    serve(httpserver, vector(("team-a", "run-1-master-0", "util", 35, {"UUID": "GPU-p", "GPU_I_ID": "3"}),
                             ("team-a", "run-1-worker-0", "util", 150, {"Hostname": "n1", "gpu": "2"})))
    run = Prometheus(httpserver.url_for("/")).gpu_telemetry(OBSERVED)[ClusterAddress("team-a", "run-1")]
    assert [(g.gpu, g.util_pct) for g in run.gpus] == [("GPU-p/3", 35.0), ("n1/2", 100.0)]  # clamped to 100


def test_missing_and_bad_figures_are_none_and_never_crash():
    telemetry = WorkloadTelemetry((GpuReading("g0", None, 100.0, None, None, None),
                                   GpuReading("g1", None, None, None, None, None)))
    assert (telemetry.util_pct, telemetry.fb_used_fraction, telemetry.temp_c, telemetry.power_w) == (
        None, None, None, None)  # FB_FREE absent: no fraction can be told
    assert WorkloadTelemetry(()).util_pct is None
    assert GpuReading("g", 0.0, 0.0, 0.0, 30.0, 50.0).fb_used_fraction is None  # no frame buffer at all


def test_nothing_running_costs_no_query(httpserver):
    prometheus = Prometheus(httpserver.url_for("/"))
    assert prometheus.gpu_telemetry([OBSERVED[2]]) == {}
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
        Prometheus(httpserver.url_for("/")).gpu_telemetry(OBSERVED)


def test_an_unreachable_prometheus_is_transient():
    with pytest.raises(Transient, match="unreachable"):
        Prometheus("http://127.0.0.1:9", timeout=1).gpu_telemetry(OBSERVED)


def test_without_a_metrics_source_nothing_is_measured():
    assert KubernetesBackend(host="http://127.0.0.1:1").gpu_telemetry(OBSERVED) == {}
