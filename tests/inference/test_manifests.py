"""The endpoint's pure builders (:mod:`inference.manifests`): golden files, schema validation, and the rules they must keep.

Golden files live in ``tests/inference/golden/``. After an intended change, regenerate them with

    SLIPWAY_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/inference/test_manifests.py

and review the diff like code. The rules every builder keeps are in ``tests/cluster/manifest_rules.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from cluster.manifests import build_team
from cluster.promql import scope_query
from cluster.specs import ClusterConfig
from inference.manifests import build_endpoint
from inference.specs import CanarySpec
from tests.cluster import crd_schema, samples
from tests.cluster.manifest_rules import CUSTOM_KINDS, check_argv, check_hardened, check_labels, pod_specs
from tests.golden import K8S_VERSIONS, all_objects, assert_golden_manifests

GOLDEN = Path(__file__).parent / "golden"
PROXY = ClusterConfig(prometheus_proxy_url="http://slipway-prometheus-proxy.slipway-system.svc:8080")


VARIANTS: dict[str, Any] = {
    "endpoint_gpu_utilization": lambda: build_endpoint(samples.endpoint(), samples.CONFIG),
    "endpoint_mig_requests_scale_to_zero": lambda: build_endpoint(
        samples.endpoint(
            flavor=samples.MIG_1G, min_replicas=0, max_replicas=3, metric="requests_per_second", target=25
        ),
        ClusterConfig(prometheus_url="http://prometheus.monitoring.svc:9090"),
    ),
    "endpoint_queue_length": lambda: build_endpoint(
        samples.endpoint(metric="queue_length", engine="vllm", target=12.5, min_replicas=0),
        samples.CONFIG,
    ),
    "endpoint_mig_queue_tgi_burst_ceiling": lambda: build_endpoint(
        samples.endpoint(flavor=samples.MIG_1G, metric="queue_length", engine="tgi", target=8, min_replicas=1,
                         max_replicas=6, replica_ceiling=2, max_surge=1, startup_timeout_seconds=1800,
                         command=("text-generation-launcher",), readiness_path="/health", spot=True),
        samples.CONFIG,
    ),
    "endpoint_triton_queue_time": lambda: build_endpoint(
        samples.endpoint(metric="queue_length", engine="triton", target=50, port=8000, gpus_per_replica=2),
        samples.CONFIG,
    ),
    "endpoint_mig_gpu_utilization": lambda: build_endpoint(
        samples.endpoint(flavor=samples.MIG_1G, target=60, scale_down_delay_seconds=900), samples.CONFIG
    ),
    # A scale-down delay over the HPA's one-hour bound (the API takes up to a day).
    "endpoint_scale_down_delay_over_an_hour": lambda: build_endpoint(
        samples.endpoint(scale_down_delay_seconds=7200), samples.CONFIG
    ),
    "endpoint_prometheus_query": lambda: build_endpoint(
        samples.endpoint(metric="prometheus", target=100, min_replicas=0,
                         query='sum(rate(http_requests_total{service="detector"}[1m]))'),
        samples.CONFIG,
    ),
    # A query naming no namespace: the matcher is injected into every selector (binary op, subquery).
    "endpoint_prometheus_query_injected": lambda: build_endpoint(
        samples.endpoint(metric="prometheus", target=4,
                         query="sum(rate(vllm:request_success_total[5m])) / max_over_time(sum(vllm:num_requests_running)"
                               "[5m:30s])"),
        samples.CONFIG,
    ),
    # The second wall: the user's query goes to the label proxy through the team's TriggerAuthentication.
    "endpoint_prometheus_query_proxy": lambda: build_endpoint(
        samples.endpoint(metric="prometheus", target=4, min_replicas=0, query="sum(vllm:num_requests_waiting)"),
        PROXY,
    ),
    # The gateway's series: requests in flight per replica, asleep at zero until a request is held.
    "endpoint_gateway_in_flight_scale_to_zero": lambda: build_endpoint(
        samples.endpoint(metric="gateway_in_flight", target=4, min_replicas=0), samples.CONFIG),
    # Its requests a second, through the label proxy and the team's TriggerAuthentication (one gateway, every team).
    "endpoint_gateway_requests_proxy": lambda: build_endpoint(
        samples.endpoint(metric="gateway_requests_per_second", target=20, min_replicas=0), PROXY),
    "endpoint_secret_env": lambda: build_endpoint(
        samples.endpoint(secret_env=("HF_TOKEN",), secret_env_digest="5e" * 32), samples.CONFIG),
    "endpoint_time_sliced": lambda: build_endpoint(
        samples.endpoint(flavor=samples.T4_TS4, min_replicas=1, max_replicas=4), samples.CONFIG),
    "endpoint_mps_spot": lambda: build_endpoint(samples.endpoint(flavor=samples.A10G_MPS2, spot=True), samples.CONFIG),
    "endpoint_mps_renamed": lambda: build_endpoint(
        samples.endpoint(flavor=samples.A10G_MPS2_RENAMED, metric="queue_length", engine="vllm", target=4),
        samples.CONFIG),
    # A candidate revision beside the stable one (docs/serving.md "Revisions, canary and rollback").
    "endpoint_canary": lambda: build_endpoint(
        samples.endpoint(revision=3, canary=CanarySpec(revision=4, image="registry.example.com/vision/serve:2.1",
                                                       replicas=2, args=("--model", "/models/detector-v2"),
                                                       env=(("LOG_LEVEL", "debug"),))), samples.CONFIG),
    "endpoint_canary_mps_secret_env": lambda: build_endpoint(
        samples.endpoint(flavor=samples.A10G_MPS2, secret_env=("HF_TOKEN",), secret_env_digest="5e" * 32, revision=1,
                         canary=CanarySpec(revision=2, image="registry.example.com/vision/serve:2.1", replicas=1)),
        samples.CONFIG),
}


def _all_objects() -> list[tuple[str, dict[str, Any]]]:
    return all_objects(VARIANTS)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_it_matches_the_golden_file(variant: str) -> None:
    assert_golden_manifests(GOLDEN, variant, VARIANTS[variant]())


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(
    ("label", "obj"), [o for o in _all_objects() if o[1]["kind"] not in CUSTOM_KINDS]
)
def test_it_renders_core_objects_valid_in_strict_mode(label: str, obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize(
    ("label", "obj"), [o for o in _all_objects() if o[1]["kind"] in CUSTOM_KINDS]
)
def test_it_renders_custom_resources_valid_against_their_crd(label: str, obj: dict[str, Any]) -> None:
    name = obj["kind"].lower()
    assert crd_schema.errors(name, obj) == []


def test_it_rejects_fields_the_crd_does_not_know() -> None:
    # The strict walker must fail on what an API server would silently prune.
    scaled = build_endpoint(samples.endpoint(), samples.CONFIG)[2]
    scaled["spec"]["minReplicas"] = 1  # HPA spelling, not KEDA's
    scaled["spec"]["triggers"][0]["metadata"]["threshold"] = 70  # KEDA metadata values are strings
    assert len(crd_schema.errors("scaledobject", scaled)) == 2


def test_it_rejects_a_stabilization_window_the_hpa_refuses() -> None:
    # Bounded only in the CRD's words; KEDA's HPA with a window over an hour is refused by the API server.
    scaled = build_endpoint(samples.endpoint(), samples.CONFIG)[2]
    scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"][
        "stabilizationWindowSeconds"] = 3601
    assert crd_schema.errors("scaledobject", scaled) == [
        "spec/advanced/horizontalPodAutoscalerConfig/behavior/scaleDown/stabilizationWindowSeconds: "
        "3601 is greater than the maximum of 3600"]


@pytest.mark.parametrize(("label", "obj"), _all_objects())
def test_it_labels_every_object_for_slipway(label: str, obj: dict[str, Any]) -> None:
    check_labels(label, obj)


@pytest.mark.parametrize(("label", "obj"), [o for o in _all_objects() if pod_specs(o[1])])
def test_it_hardens_every_pod(label: str, obj: dict[str, Any]) -> None:
    check_hardened(obj)


def test_it_builds_an_endpoint_on_a_mig_slice() -> None:
    deployment, service, scaled = build_endpoint(
        samples.endpoint(flavor=samples.MIG_1G, min_replicas=0, metric="requests_per_second", target=25), samples.CONFIG
    )
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "http"}
    # A slow model load is not killed: the startup probe allows startup_timeout_seconds (600).
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    assert "replicas" not in deployment["spec"]  # KEDA's HPA owns the count
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"] == "ep-7"
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (0, 4)
    trigger = scaled["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["serverAddress"] == samples.CONFIG.prometheus_url
    assert "ep-7" in trigger["metadata"]["query"] and trigger["metadata"]["threshold"] == "25"


def test_it_scales_on_dcgm_gpu_utilisation_by_default() -> None:
    scaled = build_endpoint(samples.endpoint(gpus_per_replica=2), ClusterConfig(prometheus_url="http://prom:9090"))[2]
    trigger = scaled["spec"]["triggers"][0]
    # Summed over the endpoint and divided by GPUs per replica: AverageValue per replica.
    assert trigger["metadata"]["query"] == 'sum(DCGM_FI_DEV_GPU_UTIL{namespace="team-vision",pod=~"ep-7-.*"}) / 2'
    assert trigger["metadata"]["serverAddress"] == "http://prom:9090"
    assert trigger["metricType"] == "AverageValue"


def test_mig_slices_scale_on_the_graphics_engine_activity() -> None:
    trigger = build_endpoint(samples.endpoint(flavor=samples.MIG_1G), samples.CONFIG)[2]["spec"]["triggers"][0]
    assert trigger["metadata"]["query"].startswith("sum(DCGM_FI_PROF_GR_ENGINE_ACTIVE{")
    assert "DCGM_FI_DEV_GPU_UTIL" not in trigger["metadata"]["query"]


@pytest.mark.parametrize(("engine", "metric_name"), [
    ("vllm", "vllm:num_requests_waiting"), ("tgi", "tgi_queue_size"), ("triton", "nv_inference_queue_duration_us"),
])
def test_queue_length_uses_the_engines_own_metric(engine: str, metric_name: str) -> None:
    scaled = build_endpoint(samples.endpoint(metric="queue_length", engine=engine, target=5), samples.CONFIG)[2]
    assert [t["metadata"]["query"].count(metric_name) for t in scaled["spec"]["triggers"]] == [1]


def test_a_lost_metric_is_an_error_with_a_fallback_to_the_guaranteed_base() -> None:
    scaled = build_endpoint(samples.endpoint(min_replicas=2, max_replicas=6, replica_ceiling=3), samples.CONFIG)[2]
    spec = scaled["spec"]
    assert spec["triggers"][0]["metadata"]["ignoreNullValues"] == "false"
    assert spec["fallback"] == {"failureThreshold": 3, "replicas": 2}
    # The granted ceiling, not the user's maximum, is what KEDA may scale to.
    assert spec["maxReplicaCount"] == 3 and scaled["metadata"]["annotations"]["slipway.dev/max-replicas"] == "6"


def test_scaling_up_is_gentle_and_down_waits_the_delay() -> None:
    spec = build_endpoint(samples.endpoint(scale_down_delay_seconds=900), samples.CONFIG)[2]["spec"]
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 60}]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 900 and spec["cooldownPeriod"] == 900


def test_a_delay_over_an_hour_caps_the_hpas_window_and_keeps_kedas_cooldown() -> None:
    """The HPA refuses a stabilization window over 3600 s; the delay itself (up to a day) still holds for KEDA's
    cooldown to zero, and for Slipway's release of burst units (inference.scaling.follow)."""
    spec = build_endpoint(samples.endpoint(min_replicas=0, metric="requests_per_second", target=10,
                                           scale_down_delay_seconds=7200), samples.CONFIG)[2]["spec"]
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 3600 and spec["cooldownPeriod"] == 7200


def test_a_queue_scaled_endpoint_at_zero_wakes_on_requests() -> None:
    triggers = build_endpoint(samples.endpoint(metric="queue_length", engine="vllm", target=4, min_replicas=0),
                              samples.CONFIG)[2]["spec"]["triggers"]
    assert [t["name"] for t in triggers] == ["queue-length", "requests-per-second", "gateway-requests-held"]
    assert triggers[0]["metadata"]["ignoreNullValues"] == "true"  # no pods: an empty queue, not an error


@pytest.mark.parametrize("metric", ["requests_per_second", "queue_length", "prometheus", "gateway_in_flight",
                                    "gateway_requests_per_second"])
def test_every_endpoint_that_may_sleep_wakes_on_a_request_held_at_the_gateway(metric: str) -> None:
    extra = {"engine": "vllm"} if metric == "queue_length" else {"query": "sum(x)"} if metric == "prometheus" else {}
    triggers = build_endpoint(samples.endpoint(metric=metric, target=4, min_replicas=0, **extra),
                              samples.CONFIG)[2]["spec"]["triggers"]
    wake = triggers[-1]
    assert wake["name"] == "gateway-requests-held" and triggers[0]["name"] == metric.replace("_", "-")
    assert wake["metadata"]["query"] == 'sum(slipway_gateway_requests_held{team="vision",endpoint="ep-7"})'
    # One held request activates it; its threshold never sizes the endpoint; no series is nothing held.
    assert wake["metadata"]["activationThreshold"] == "0" and float(wake["metadata"]["threshold"]) >= 1000
    assert wake["metadata"]["ignoreNullValues"] == "true" and wake["metricType"] == "AverageValue"
    awake = build_endpoint(samples.endpoint(metric=metric, target=4, min_replicas=1, **extra),
                           samples.CONFIG)[2]["spec"]["triggers"]
    assert "gateway-requests-held" not in [t["name"] for t in awake]


@pytest.mark.parametrize(("metric", "query"), [
    ("gateway_in_flight", 'sum(slipway_gateway_requests_in_flight{team="vision",endpoint="ep-7"})'),
    ("gateway_requests_per_second", 'sum(rate(slipway_gateway_requests_total{team="vision",endpoint="ep-7"}[1m]))'),
])
def test_it_scales_on_the_gateways_series_per_replica(metric: str, query: str) -> None:
    [trigger] = build_endpoint(samples.endpoint(metric=metric, target=8), samples.CONFIG)[2]["spec"]["triggers"]
    assert trigger["metadata"]["query"] == query and trigger["metadata"]["threshold"] == "8"
    assert trigger["metricType"] == "AverageValue" and trigger["metadata"]["ignoreNullValues"] == "false"
    assert trigger["metadata"]["serverAddress"] == samples.CONFIG.prometheus_url and "authenticationRef" not in trigger
    # Behind a label proxy the gateway's series go through the team's tenant, as user-written queries do.
    [proxied] = build_endpoint(samples.endpoint(metric=metric, target=8), PROXY)[2]["spec"]["triggers"]
    assert proxied["metadata"]["serverAddress"] == PROXY.prometheus_proxy_url
    assert proxied["authenticationRef"] == {"name": "slipway-prometheus-tenant"}


PRESETS = [
    {"metric": "gpu_utilization"},
    {"metric": "gpu_utilization", "flavor": samples.MIG_1G},
    {"metric": "gpu_utilization", "gpus_per_replica": 4},
    {"metric": "queue_length", "engine": "vllm", "target": 4},
    {"metric": "queue_length", "engine": "tgi", "target": 4},
    {"metric": "queue_length", "engine": "triton", "target": 4},
    {"metric": "queue_length", "engine": "vllm", "target": 4, "min_replicas": 0},  # + the wake-up trigger
    {"metric": "requests_per_second", "target": 10},
    {"metric": "gateway_in_flight", "target": 4},
    {"metric": "gateway_requests_per_second", "target": 10, "min_replicas": 0},  # + the gateway's wake-up trigger
]


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: "-".join(str(v) for v in p.values()))
def test_the_presets_read_only_the_teams_own_series(preset: dict) -> None:
    """The easy path is also a confined one: every selector Slipway renders is its team's."""
    for team, namespace in (("vision", "team-vision"), ("nlp", "team-nlp")):
        scaled = build_endpoint(samples.endpoint(team=team, namespace=namespace, **preset), samples.CONFIG)[2]
        for trigger in scaled["spec"]["triggers"]:
            query = trigger["metadata"]["query"]
            if trigger["name"] == "requests-per-second":
                # The ingress controller's counter: its own pods' namespace is `namespace`, the
                # counted Service's is `exported_namespace`, which is the team's.
                assert f'exported_namespace="{namespace}",exported_service="ep-7"' in query
            elif trigger["name"].startswith("gateway-"):
                # The gateway's series: one gateway serves every team, each series names its team and endpoint.
                assert f'{{team="{team}",endpoint="ep-7"}}' in query
            else:
                # Already what the tenant rule would make of it: nothing to inject, nothing refused.
                assert scope_query(query, namespace) == query
                assert query.count(f'namespace="{namespace}"') == query.count("{") >= 1


def test_it_renders_a_users_query_with_the_namespace_matcher_on_every_selector() -> None:
    scaled = build_endpoint(samples.endpoint(metric="prometheus", target=4, query="sum(a) / sum(rate(b[1m]))"),
                            samples.CONFIG)[2]
    assert scaled["spec"]["triggers"][0]["metadata"]["query"] == (
        'sum(a{namespace="team-vision"}) / sum(rate(b{namespace="team-vision"}[1m]))')


@pytest.mark.parametrize("query", ['sum(DCGM_FI_DEV_GPU_UTIL{namespace="team-nlp"})', 'count({__name__=~".+"})',
                                   "rate(x[1h])", 'sum(x{namespace=~".*"})'])
def test_it_never_renders_a_stored_query_that_reads_beyond_the_team(query: str) -> None:
    """A query stored before the rule (or written around the portal) is refused at render time."""
    with pytest.raises(ValueError):
        build_endpoint(samples.endpoint(metric="prometheus", target=4, query=query), samples.CONFIG)


def test_with_a_proxy_the_users_query_goes_through_the_teams_tenant_and_the_presets_do_not() -> None:
    team = build_team(samples.team(), PROXY)
    [config_map] = [o for o in team if o["kind"] == "ConfigMap"]
    [tenant] = [o for o in team if o["kind"] == "TriggerAuthentication"]
    assert config_map["data"] == {"header": "X-Slipway-Namespace", "namespace": "team-vision"}
    assert {r["name"] for r in tenant["spec"]["configMapTargetRef"]} == {config_map["metadata"]["name"]}
    scaled = build_endpoint(samples.endpoint(metric="prometheus", target=4, query="sum(x)"), PROXY)[2]
    [trigger] = scaled["spec"]["triggers"]
    # Same namespace, same name: KEDA resolves the reference in the ScaledObject's own namespace.
    assert scaled["metadata"]["namespace"] == tenant["metadata"]["namespace"]
    assert trigger["authenticationRef"] == {"name": tenant["metadata"]["name"]}
    assert trigger["metadata"]["serverAddress"] == PROXY.prometheus_proxy_url
    assert trigger["metadata"]["authModes"] == "custom"
    presets = build_endpoint(samples.endpoint(metric="queue_length", engine="vllm", target=4, min_replicas=0),
                             PROXY)[2]["spec"]["triggers"]
    assert [t["metadata"]["serverAddress"] for t in presets] == [PROXY.prometheus_url] * 2 + [PROXY.prometheus_proxy_url]
    assert ["authenticationRef" in t for t in presets] == [False, False, True]  # the last: the gateway's wake-up
    # Without a proxy nothing of it is rendered.
    assert {o["kind"] for o in build_team(samples.team(), samples.CONFIG)} == {
        "Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy"}


def test_it_refuses_to_scale_to_zero_on_gpu_utilisation() -> None:
    with pytest.raises(ValueError, match="request-driven"):
        build_endpoint(samples.endpoint(min_replicas=0), samples.CONFIG)


@pytest.mark.parametrize(("surge", "unavailable"), [(0, 1), (1, 0)])
def test_a_rollout_surges_only_when_the_team_has_a_spare_replica(surge: int, unavailable: int) -> None:
    deployment = build_endpoint(samples.endpoint(max_surge=surge), samples.CONFIG)[0]
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": surge, "maxUnavailable": unavailable}


def test_it_renders_the_same_manifests_every_time() -> None:
    assert build_endpoint(samples.endpoint(), samples.CONFIG) == build_endpoint(samples.endpoint(), samples.CONFIG)


@pytest.mark.parametrize(("label", "obj"), [o for o in _all_objects() if pod_specs(o[1])])
def test_it_never_wraps_the_argv_in_a_shell(label: str, obj: dict[str, Any]) -> None:
    check_argv(label, obj)


def test_a_canary_runs_beside_the_stable_revision_each_service_reaching_its_own_pods() -> None:
    stable, service, scaled, canary, canary_service = build_endpoint(
        samples.endpoint(revision=3, canary=CanarySpec(revision=4, image="serve:2.1", replicas=2)), samples.CONFIG)
    assert (canary["metadata"]["name"], canary_service["metadata"]["name"]) == ("ep-7-canary", "ep-7-canary")
    assert canary["spec"]["replicas"] == 2 and "replicas" not in stable["spec"]  # KEDA scales the stable one alone
    assert scaled["spec"]["scaleTargetRef"]["name"] == "ep-7"
    assert service["spec"]["selector"]["slipway.dev/track"] == "stable"
    assert canary_service["spec"]["selector"]["slipway.dev/track"] == "canary"
    assert canary["spec"]["template"]["spec"]["containers"][0]["image"] == "serve:2.1"
    assert stable["metadata"]["annotations"]["slipway.dev/revision"] == "3"
    assert canary["metadata"]["annotations"]["slipway.dev/revision"] == "4"
    # Without a candidate the stable Service selects as it always did: no pod drops out of it on an upgrade.
    alone = build_endpoint(samples.endpoint(revision=3), samples.CONFIG)
    assert len(alone) == 3 and "slipway.dev/track" not in alone[1]["spec"]["selector"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_no_replica_is_evicted_by_an_autoscalers_scale_down(variant: str) -> None:
    """Serving pods are never preemptible: every Deployment's pods (the candidate's too) carry Karpenter's and
    Cluster Autoscaler's do-not-disrupt annotations."""
    deployments = [obj for obj in VARIANTS[variant]() if obj["kind"] == "Deployment"]
    assert deployments
    for deployment in deployments:
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["karpenter.sh/do-not-disrupt"] == "true"
        assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
