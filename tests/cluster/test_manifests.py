"""The pure manifest builders: golden files, schema validation, and the rules they must keep.

Golden files live in ``tests/cluster/golden/``. After an intended change, regenerate them with

    SLIPWAY_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/cluster/test_manifests.py

and review the diff like code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from cluster.manifests import build_endpoint, build_env_secret, build_team, build_training, dns_name
from cluster.nvidia import gfd_selector
from cluster.promql import scope_query
from cluster.specs import CanarySpec, ClusterConfig
from tests.cluster import crd_schema, samples
from tests.golden import K8S_VERSIONS, all_objects, assert_golden_manifests

GOLDEN = Path(__file__).parent / "golden"
#: Kinds a CRD defines: validated against its schema (tests/cluster/schemas/), not kubernetes-validate's.
CUSTOM_KINDS = ("PyTorchJob", "ScaledObject", "TriggerAuthentication")
#: The product label each sample flavor's pods select: GFD's on its nodes (``-SHARED`` on shared, not renamed GPUs).
SAMPLE_PRODUCTS = {gfd_selector(f.gpu_model, f.resource_name, f.sharing, f.replicas)["nvidia.com/gpu.product"]
                   for f in (samples.A100, samples.MIG_1G, samples.T4_TS4, samples.A10G_MPS2, samples.A10G_MPS2_RENAMED)}
PROXY = ClusterConfig(prometheus_proxy_url="http://slipway-prometheus-proxy.slipway-system.svc:8080")

VARIANTS: dict[str, Any] = {
    "training_job": lambda: build_training(samples.training(), samples.CONFIG),
    "training_job_spot_defaults": lambda: build_training(
        samples.training(
            spot=True, cpu=None, memory_gb=None, shm_gb=None, max_runtime_minutes=None, volumes=(), env=(), args=()
        ),
        samples.CONFIG,
    ),
    "training_pytorchjob": lambda: build_training(samples.training(workers=3, gpus_per_worker=8), samples.CONFIG),
    "training_pytorchjob_volcano": lambda: build_training(samples.training(workers=2), samples.VOLCANO),
    "training_pytorchjob_scheduler_plugins": lambda: build_training(samples.training(workers=4), samples.PLUGINS),
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
    "team_prometheus_proxy": lambda: build_team(samples.team(), PROXY),
    # The gateway's series: requests in flight per replica, asleep at zero until a request is held.
    "endpoint_gateway_in_flight_scale_to_zero": lambda: build_endpoint(
        samples.endpoint(metric="gateway_in_flight", target=4, min_replicas=0), samples.CONFIG),
    # Its requests a second, through the label proxy and the team's TriggerAuthentication (one gateway, every team).
    "endpoint_gateway_requests_proxy": lambda: build_endpoint(
        samples.endpoint(metric="gateway_requests_per_second", target=20, min_replicas=0), PROXY),
    # Secret env: the pods name the Secret and a key per variable; the values are in the Secret only.
    "training_job_secret_env": lambda: build_training(
        samples.training(secret_env=("HF_TOKEN", "WANDB_API_KEY")), samples.CONFIG),
    "training_pytorchjob_secret_env": lambda: build_training(
        samples.training(workers=2, secret_env=("HF_TOKEN",)), samples.CONFIG),
    # The checkpoint contract: env, the claim Slipway provides (kept across attempts), the notice file, the grace.
    "training_job_checkpoint": lambda: build_training(
        samples.training(checkpoint=samples.checkpoint(attempt=2, resume_from="/slipway/checkpoints/step-1000.pt",
                                                       grace_seconds=120,
                                                       report_url="http://slipway-web.slipway-system.svc/api/v1/runs/42/checkpoints/")),
        samples.CONFIG),
    "training_pytorchjob_checkpoint_volume": lambda: build_training(
        samples.training(workers=3, secret_env=("HF_TOKEN",),
                         checkpoint=samples.checkpoint(claim="team-checkpoints", provided=False)), samples.VOLCANO),
    "training_pytorchjob_checkpoint_provided": lambda: build_training(
        samples.training(workers=2, env=(), checkpoint=samples.checkpoint(storage_class="nfs-rwx")), samples.CONFIG),
    "endpoint_secret_env": lambda: build_endpoint(
        samples.endpoint(secret_env=("HF_TOKEN",), secret_env_digest="5e" * 32), samples.CONFIG),
    "env_secret": lambda: [build_env_secret("team-vision", "vision", "run-42",
                                            (("HF_TOKEN", "hf_not-a-real-token"), ("WANDB_API_KEY", "wandb ü 1")))],
    # Shared GPUs: one unit per pod, the labels GFD puts on shared nodes; MPS one team per node, no /dev/shm of ours.
    "training_job_time_sliced": lambda: build_training(
        samples.training(flavor=samples.T4_TS4, gpus_per_worker=1, cpu=None, memory_gb=None, shm_gb=None,
                         volumes=()), samples.CONFIG),
    "training_job_mps": lambda: build_training(
        samples.training(flavor=samples.A10G_MPS2, gpus_per_worker=1, shm_gb=None), samples.CONFIG),
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
    "team": lambda: build_team(samples.team(), samples.CONFIG),
    "team_root_allowed": lambda: build_team(samples.team(quotas=()), ClusterConfig(run_as_non_root=False)),
    # The gateway in a namespace of its own, and Prometheus let in to scrape the engines.
    "team_gateway_scraper": lambda: build_team(samples.team(), ClusterConfig(gateway_namespace="serving",
                                                                             metrics_namespace="monitoring")),
}


def _all_objects() -> list[tuple[str, dict[str, Any]]]:
    return all_objects(VARIANTS)


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "PyTorchJob":
        return [r["template"]["spec"] for r in obj["spec"]["pytorchReplicaSpecs"].values()]
    if obj["kind"] in ("Job", "Deployment"):
        return [obj["spec"]["template"]["spec"]]
    return []


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_it_matches_the_golden_file(variant: str) -> None:
    assert_golden_manifests(GOLDEN, variant, VARIANTS[variant]())


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(
    ("label", "obj"), [o for o in _all_objects() if o[1]["kind"] not in CUSTOM_KINDS]
)
def test_it_renders_core_objects_valid_in_strict_mode(label: str, obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(("label", "obj"), [o for o in _all_objects() if o[1]["kind"] == "PyTorchJob"])
def test_it_renders_pytorchjob_pod_templates_valid_in_strict_mode(
    label: str, obj: dict[str, Any], version: str
) -> None:
    for role, replica in obj["spec"]["pytorchReplicaSpecs"].items():
        template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {
                "name": f"{obj['metadata']['name']}-{role.lower()}",
                "namespace": obj["metadata"]["namespace"],
            },
            "template": replica["template"],
        }
        kubernetes_validate.validate(template, version, strict=True)


@pytest.mark.parametrize(
    ("label", "obj"), [o for o in _all_objects() if o[1]["kind"] in CUSTOM_KINDS]
)
def test_it_renders_custom_resources_valid_against_their_crd(label: str, obj: dict[str, Any]) -> None:
    name = obj["kind"].lower()
    assert crd_schema.errors(name, obj) == []


def test_it_rejects_fields_the_crd_does_not_know() -> None:
    # The strict walker must fail on what an API server would silently prune.
    pytorchjob = build_training(samples.training(workers=2), samples.VOLCANO)[0]
    pytorchjob["spec"]["runPolicy"]["schedulingPolicy"]["minMember"] = 2  # Volcano's PodGroup field, not PyTorchJob's
    pytorchjob["spec"]["pytorchReplicaSpecs"]["Master"]["replica"] = 1
    scaled = build_endpoint(samples.endpoint(), samples.CONFIG)[2]
    scaled["spec"]["minReplicas"] = 1  # HPA spelling, not KEDA's
    scaled["spec"]["triggers"][0]["metadata"]["threshold"] = 70  # KEDA metadata values are strings
    assert len(crd_schema.errors("pytorchjob", pytorchjob)) == 2
    assert len(crd_schema.errors("scaledobject", scaled)) == 2


@pytest.mark.parametrize(("label", "obj"), _all_objects())
def test_it_labels_every_object_for_slipway(label: str, obj: dict[str, Any]) -> None:
    labels = obj["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "slipway"
    assert labels["slipway.dev/team"] == "vision"
    # A workload's env Secret (run-42-env) carries its workload's label, so deleting the workload finds it.
    expected_workload = ("team-vision" if label.startswith("team") else
                         obj["metadata"]["name"].removesuffix("-env") if obj["kind"] == "Secret" else
                         obj["metadata"]["name"].removesuffix("-checkpoints") if obj["kind"] == "PersistentVolumeClaim"
                         # an endpoint's candidate (ep-7-canary) is its endpoint's: observed and deleted with it
                         else obj["metadata"]["name"].removesuffix("-canary"))
    assert labels["slipway.dev/workload"] == expected_workload
    for spec_holder in [obj["spec"]["template"]] if obj["kind"] in ("Job", "Deployment") else []:
        pod_labels = dict(spec_holder["metadata"]["labels"])
        # A one-team MPS flavor's pods name their flavor too: their anti-affinity looks for it.
        flavor = pod_labels.pop("slipway.dev/flavor", None)
        assert (flavor is not None) == ("podAntiAffinity" in spec_holder["spec"].get("affinity", {}))
        # An endpoint's pods are serving pods: the team's endpoint policy (the gateway only) selects them and
        # its isolation policy leaves them out.
        serving = {k: pod_labels.pop(k, None) for k in ("slipway.dev/serving", "slipway.dev/isolated")}
        assert serving == ({"slipway.dev/serving": "true", "slipway.dev/isolated": "true"}
                           if label.startswith("endpoint") else {"slipway.dev/serving": None, "slipway.dev/isolated": None})
        # An endpoint's pods say which revision track they serve; the candidate's selector asks for its own.
        track = pod_labels.pop("slipway.dev/track", None)
        assert (track is not None) == label.startswith("endpoint")
        if track is not None:
            assert track == ("canary" if obj["metadata"]["name"].endswith("-canary") else "stable")
            assert obj["spec"]["selector"]["matchLabels"].get("slipway.dev/track") == (
                "canary" if track == "canary" else None)
        assert pod_labels == {
            k: labels[k] for k in ("app.kubernetes.io/managed-by", "slipway.dev/team", "slipway.dev/workload")
        }


@pytest.mark.parametrize(("label", "obj"), [o for o in _all_objects() if _pod_specs(o[1])])
def test_it_hardens_every_pod(label: str, obj: dict[str, Any]) -> None:
    for pod in _pod_specs(obj):
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert not any("hostPath" in v for v in pod.get("volumes", []))
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
        for container in pod["containers"]:
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False
            assert ctx["privileged"] is False
            assert ctx["capabilities"] == {"drop": ["ALL"]}
            limits, requests = container["resources"]["limits"], container["resources"]["requests"]
            gpu = [k for k in limits if k.startswith("nvidia.com/")]
            assert len(gpu) == 1 and limits[gpu[0]] == requests[gpu[0]] and limits[gpu[0]].isdigit()
            assert {"cpu", "memory", "ephemeral-storage"} <= set(requests) and {
                "cpu",
                "memory",
                "ephemeral-storage",
            } <= set(limits)
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        assert pod["nodeSelector"]["nvidia.com/gpu.product"] in SAMPLE_PRODUCTS


def test_it_can_allow_root_containers_when_configured() -> None:
    job = build_training(samples.training(), ClusterConfig(run_as_non_root=False))[0]
    pod = job["spec"]["template"]["spec"]
    assert "runAsNonRoot" not in pod["securityContext"]
    assert "runAsNonRoot" not in pod["containers"][0]["securityContext"]
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    namespace = build_team(samples.team(), ClusterConfig(run_as_non_root=False))[0]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"


def test_it_builds_a_job_for_single_node_training() -> None:
    [job] = build_training(samples.training(), samples.CONFIG)
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("batch/v1", "Job", "run-42")
    assert job["spec"]["backoffLimit"] == 2
    assert job["spec"]["activeDeadlineSeconds"] == 7200
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["command"] == ["python", "train.py"] and container["args"] == ["--epochs", "10"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["requests"]["memory"] == "64Gi"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert {"name": "data-0", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}} in pod["volumes"]
    assert {"name": "data-1", "mountPath": "/ckpt"} in container["volumeMounts"]
    # The user's env reaches the container unchanged (the sandbox reads these).
    assert {"name": "SLIPWAY_SIM_OUTCOME", "value": "succeed"} in container["env"]
    assert job["metadata"]["annotations"] == {"slipway.dev/name": "resnet baseline"}
    assert "affinity" not in pod


def test_it_places_spot_work_on_spot_nodes_only() -> None:
    pod = build_training(samples.training(spot=True), samples.CONFIG)[0]["spec"]["template"]["spec"]
    assert {"key": "slipway.dev/capacity-type", "operator": "Equal", "value": "spot", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "slipway.dev/capacity-type", "operator": "In", "values": ["spot"]}]}]


def test_it_builds_a_pytorchjob_for_distributed_training() -> None:
    [job] = build_training(samples.training(workers=3, gpus_per_worker=8), samples.CONFIG)
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert {role: r["replicas"] for role, r in replicas.items()} == {"Master": 1, "Worker": 2}
    for replica in replicas.values():
        container = replica["template"]["spec"]["containers"][0]
        assert container["name"] == "pytorch"
        assert container["command"][:4] == ["torchrun", "--nnodes=3", "--nproc_per_node=8", "--no-python"]
        assert container["command"][4:] == ["python", "train.py"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["NCCL_DEBUG"] == "WARN" and env["SLIPWAY_SIM_DURATION"] == "30"
        assert "schedulerName" not in replica["template"]["spec"]
    assert job["spec"]["runPolicy"] == {"backoffLimit": 2, "cleanPodPolicy": "Running", "activeDeadlineSeconds": 7200}


@pytest.mark.parametrize(
    ("config", "scheduler"), [(samples.VOLCANO, "volcano"), (samples.PLUGINS, "scheduler-plugins-scheduler")]
)
def test_it_gang_schedules_when_the_cluster_can(config: ClusterConfig, scheduler: str) -> None:
    [job] = build_training(samples.training(workers=4), config)
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 4}
    assert {r["template"]["spec"]["schedulerName"] for r in job["spec"]["pytorchReplicaSpecs"].values()} == {scheduler}


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


def test_it_mirrors_the_team_quota() -> None:
    namespace, quota, limits, policy, endpoint_policy = build_team(samples.team(), samples.CONFIG)
    assert namespace["metadata"]["name"] == "team-vision"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "8", "requests.nvidia.com/mig-1g.10gb": "7"}
    assert limits["kind"] == "LimitRange"
    # Every pod but those with a policy of their own (a workspace's): policies add up.
    assert policy["spec"]["podSelector"] == {"matchExpressions": [{"key": "slipway.dev/isolated",
                                                                   "operator": "DoesNotExist"}]}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    # Endpoint pods (left out above) answer the gateway's pods in the gateway's namespace only.
    assert endpoint_policy["spec"]["podSelector"] == {"matchLabels": {"slipway.dev/serving": "true"}}
    [rule] = endpoint_policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "slipway-system"}},
                             "podSelector": {"matchLabels": {"app.kubernetes.io/name": "slipway",
                                                             "app.kubernetes.io/component": "gateway"}}}]


def test_it_renders_the_same_manifests_every_time() -> None:
    assert build_training(samples.training(workers=2), samples.VOLCANO) == build_training(
        samples.training(workers=2), samples.VOLCANO
    )
    assert build_endpoint(samples.endpoint(), samples.CONFIG) == build_endpoint(samples.endpoint(), samples.CONFIG)


def test_it_derives_dns_names_within_63_characters() -> None:
    assert dns_name("run-42") == "run-42"
    assert dns_name("Team_ML", "run.1") == "team-ml-run-1"
    long_a, long_b = dns_name("x" * 80, "a"), dns_name("x" * 80, "b")
    assert len(long_a) <= 63 and long_a != long_b and long_a == dns_name("x" * 80, "a")


SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/env"}


@pytest.mark.parametrize(("label", "obj"), [o for o in _all_objects() if _pod_specs(o[1])])
def test_it_never_wraps_the_argv_in_a_shell(label: str, obj: dict[str, Any]) -> None:
    # The user's argv is the container's argv: no "sh -c" around it, nothing joined into one string.
    for pod in _pod_specs(obj):
        for container in pod["containers"]:
            argv = container.get("command", []) + container.get("args", [])
            assert not SHELLS & set(argv) and "-c" not in argv, label
            if obj["kind"] == "Job":
                assert container["command"] == ["python", "train.py"] and container.get("args", []) in (["--epochs", "10"], [])
            if obj["kind"] == "PyTorchJob":
                assert container["command"][0] == "torchrun" and container["command"][-2:] == ["python", "train.py"]


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
