"""Inference endpoints: ``apps/v1 Deployment`` + ``v1 Service`` + ``keda.sh/v1alpha1 ScaledObject``.

The Deployment deliberately has no ``spec.replicas``: KEDA's HPA owns the replica count,
and a field Slipway re-applied on every update would fight it (and, with server-side apply,
take field ownership back from the HPA).

Autoscaling (docs/design.md "The Kubernetes layer"). Every trigger is a Prometheus query with ``AverageValue``
semantics — the query sums the demand over the endpoint and the HPA divides by the target per
replica — so that KEDA's ``fallback`` applies (it is only supported for AverageValue):

* GPU utilisation: ``DCGM_FI_DEV_GPU_UTIL`` on full GPUs, but ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``
  (a 0–1 ratio, ×100) on MIG slices, where the former is not reported per slice;
* queue length: the engine's own gauge — vLLM ``vllm:num_requests_waiting``, TGI
  ``tgi_queue_size``, Triton's queueing time (``nv_inference_queue_duration_us``, as queued
  milliseconds per second);
* requests per second: the ingress controller's counter, which exists at zero replicas;
* the gateway's series (``gateway_in_flight``, ``gateway_requests_per_second``): Slipway's gateway counts
  every request it forwards (``slipway_gateway_requests_in_flight``, ``slipway_gateway_requests_total``,
  labelled with the team and the endpoint's object name), so these exist at zero replicas too;
* ``prometheus``: the user's query, confined to the team's namespace by
  :func:`cluster.promql.scope_query` — again here, although the portal stored it scoped: a
  query stored before that rule (or written around the portal) never reaches a manifest
  unscoped; one the rule refuses raises ``ValueError``, like any spec the builders cannot render.

With a label-enforcing proxy configured (``ClusterConfig.prometheus_proxy_url``), the
``prometheus`` metric's trigger queries the proxy instead, authenticated by the team namespace's
``TriggerAuthentication`` (:func:`cluster.manifests.team.build_prometheus_tenant`): a second
wall that pins every selector to the namespace whatever the query says.

``ignoreNullValues: "false"`` makes a lost metric an error rather than a silent zero, and the
``fallback`` then holds the endpoint at its guaranteed base (never burst it was not granted).
Scaling up is gentle (one replica a minute: each one loads a model onto a GPU) and scaling
down waits ``scale_down_delay_seconds`` (in the HPA at most :data:`HPA_MAX_STABILIZATION_SECONDS`, the most its
validation takes; KEDA's cooldown to zero waits the whole delay). An endpoint scales to zero only with a request-driven
trigger; engine queue gauges vanish with the pods, so at ``min_replicas: 0`` the ingress
request rate is added as the trigger that wakes it. Every endpoint at ``min_replicas: 0`` also
gets the gateway's wake-up trigger: the requests the gateway holds for it (waiting for a replica,
``slipway_gateway_requests_held``) with ``activationThreshold: 0``, so KEDA scales it from zero
on the first held request; its threshold is so high that it never sizes the endpoint (its own
metric does).

The gateway's triggers go through the label proxy when one is configured, as the user's queries do
(its series carry the team's namespace as ``namespace``: docs/serving.md "Autoscaling on traffic,
waking from zero"); without one they query Prometheus directly, selected by team and endpoint.

The replica ceiling (``maxReplicaCount``) is the portal's admitted maximum, not the user's
``max_replicas``; the latter is kept as an annotation for people and tools.

Canary (docs/serving.md "Revisions, canary and rollback"). A candidate revision runs as a second
Deployment and Service, ``<object_name>-canary``, with a fixed ``spec.replicas`` (the units the portal
granted it; no ScaledObject: KEDA keeps scaling the stable Deployment alone). Both carry the endpoint's
workload label, so the observation sees them with the endpoint (its status and its bill count both) and
deleting the endpoint deletes them. Pods tell the two apart by :data:`TRACK_LABEL` (``stable`` or
``canary``): the canary's selector asks for ``canary``, and the stable Service asks for ``stable`` while a
canary runs, so each Service reaches its own revision's pods only. The stable Deployment's selector stays
the three labels it always had (a selector is immutable); its ReplicaSets select by template hash, so it
never adopts the canary's pods. The revision a Deployment serves is its annotation
:data:`REVISION_ANNOTATION` (metadata, not the pod template: re-annotating never rolls pods).
"""

from __future__ import annotations

import math

from cluster.manifests.common import (
    SERVICE_PORT,
    Manifest,
    cluster_ip_service,
    container_security,
    env_list,
    labels,
    metadata,
    pod_labels,
    pod_spec,
    resources,
)
from cluster.manifests.secrets import SECRET_ENV_DIGEST_ANNOTATION, secret_env_refs
from cluster.manifests.team import ISOLATED_LABEL, PROMETHEUS_TENANT_NAME, SERVING_LABEL
from cluster.pools import disruption_annotations
from cluster.promql import scope_query
from cluster.specs import ClusterConfig
from inference.specs import (
    ENGINE_TGI,
    ENGINE_TRITON,
    ENGINE_VLLM,
    GATEWAY_METRICS,
    METRIC_GATEWAY_IN_FLIGHT,
    METRIC_GATEWAY_REQUESTS_PER_SECOND,
    METRIC_GPU_UTILIZATION,
    METRIC_PROMETHEUS,
    METRIC_QUEUE_LENGTH,
    METRIC_REQUESTS_PER_SECOND,
    REQUEST_DRIVEN_METRICS,
    EndpointSpec,
)

#: How often KEDA polls the triggers.
POLLING_INTERVAL_SECONDS = 15
#: Probe period; the startup probe allows ``startup_timeout_seconds`` in such periods.
PROBE_PERIOD_SECONDS = 10
#: Failed metric reads before KEDA falls back to the guaranteed base.
FALLBACK_FAILURE_THRESHOLD = 3
#: The longest stabilization window Kubernetes' HPA validation takes: a longer scale-down delay (the API allows a
#: day) waits this long in the HPA, while KEDA's cooldown to zero and Slipway's release of burst units wait it all.
HPA_MAX_STABILIZATION_SECONDS = 3600
#: Annotation with the user's maximum (the ScaledObject's maxReplicaCount is the granted ceiling).
MAX_REPLICAS_ANNOTATION = "slipway.dev/max-replicas"
#: Pod label telling a stable replica from a candidate's, and its values.
TRACK_LABEL = "slipway.dev/track"
TRACK_STABLE = "stable"
TRACK_CANARY = "canary"
#: Deployment annotation: the endpoint revision its pod template serves.
REVISION_ANNOTATION = "slipway.dev/revision"
#: The suffix of the candidate's Deployment and Service names.
CANARY_SUFFIX = "-canary"
_POD = 'namespace="{ns}",pod=~"{name}-.*"'
#: The gateway's series of one endpoint (its labels: docs/serving.md "Traffic metrics").
_GATEWAY = 'team="{team}",endpoint="{name}"'
#: The wake-up trigger of an endpoint that may sleep at zero: the requests its gateways hold.
GATEWAY_HELD = "gateway_requests_held"
#: The held requests per replica the wake-up trigger would size the endpoint at: never reached, on purpose
#: (it only activates; ``activationThreshold`` 0 wakes the endpoint on one held request).
HELD_THRESHOLD = 1000
#: PromQL per metric (and engine). ``{ns}``/``{name}``/``{gpus}`` are filled from the spec.
QUERIES = {
    METRIC_GPU_UTILIZATION: "sum(DCGM_FI_DEV_GPU_UTIL{{" + _POD + "}}) / {gpus}",
    "gpu_utilization_mig": "sum(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{" + _POD + "}}) * 100",
    METRIC_REQUESTS_PER_SECOND: (
        'sum(rate(nginx_ingress_controller_requests{{exported_namespace="{ns}",exported_service="{name}"}}[2m]))'
    ),
    ENGINE_VLLM: "sum(vllm:num_requests_waiting{{" + _POD + "}})",
    ENGINE_TGI: "sum(tgi_queue_size{{" + _POD + "}})",
    ENGINE_TRITON: "sum(rate(nv_inference_queue_duration_us{{" + _POD + "}}[1m])) / 1000",
    METRIC_GATEWAY_IN_FLIGHT: "sum(slipway_gateway_requests_in_flight{{" + _GATEWAY + "}})",
    METRIC_GATEWAY_REQUESTS_PER_SECOND: "sum(rate(slipway_gateway_requests_total{{" + _GATEWAY + "}}[1m]))",
    GATEWAY_HELD: "sum(slipway_gateway_requests_held{{" + _GATEWAY + "}})",
}
#: Triggers that read the gateway's series: through the label proxy when there is one.
_GATEWAY_TRIGGERS = (*GATEWAY_METRICS, GATEWAY_HELD)


def _threshold(value: float) -> str:
    """KEDA's metadata values are strings; keep integers free of a trailing ``.0``."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _query(spec: EndpointSpec, metric: str) -> str:
    if metric == METRIC_PROMETHEUS:
        return scope_query(spec.query, spec.namespace)  # a no-op for what the portal stored
    if metric == METRIC_GPU_UTILIZATION and spec.flavor.mig_profile:
        key = "gpu_utilization_mig"
    elif metric == METRIC_QUEUE_LENGTH:
        key = spec.engine or ""
    else:
        key = metric
    return QUERIES[key].format(ns=spec.namespace, name=spec.object_name, gpus=max(spec.gpus_per_replica, 1),
                               team=spec.team)


def _probe(spec: EndpointSpec, failure_threshold: int) -> Manifest:
    return {"httpGet": {"path": spec.readiness_path, "port": "http"}, "periodSeconds": PROBE_PERIOD_SECONDS,
            "failureThreshold": failure_threshold}


def _one_replica_a_minute() -> Manifest:
    return {"type": "Pods", "value": 1, "periodSeconds": 60}


def canary_name(object_name: str) -> str:
    """The candidate's Deployment and Service: ``ep-7-canary``."""
    return f"{object_name}{CANARY_SUFFIX}"


def _container(spec: EndpointSpec, config: ClusterConfig, image: str, command: tuple[str, ...], args: tuple[str, ...],
               env: tuple[tuple[str, str], ...]) -> Manifest:
    """The server container of a revision: its serving fields, the endpoint's port, probes and secret env."""
    container: Manifest = {
        "name": "server",
        "image": image,
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
    }
    if command:
        container["command"] = list(command)
    if args:
        container["args"] = list(args)
    env = env_list(env) + secret_env_refs(spec.object_name, spec.secret_env)
    if env:
        container["env"] = env
    container["resources"] = resources(spec.flavor, spec.gpus_per_replica, None, None)  # an endpoint asks for no CPU or memory of its own
    # Loading a model onto the GPU may take minutes: the startup probe gives it
    # startup_timeout_seconds before the kubelet restarts the container; readiness and
    # liveness-style restarts only count after that.
    container["startupProbe"] = _probe(spec, max(1, math.ceil(spec.startup_timeout_seconds / PROBE_PERIOD_SECONDS)))
    container["readinessProbe"] = _probe(spec, 3)
    container["securityContext"] = container_security(config)
    return container


def _pod_template(spec: EndpointSpec, config: ClusterConfig, container: Manifest, track: str) -> Manifest:
    # Serving pods answer the gateway only: the team's endpoint policy selects them, and its isolation
    # policy (which admits the team's own pods) leaves them out (cluster.manifests.team).
    pod_meta: Manifest = {"labels": {**pod_labels(spec.flavor, spec.team, spec.object_name), ISOLATED_LABEL: "true",
                                     SERVING_LABEL: "true", TRACK_LABEL: track}}
    if spec.secret_env_digest:
        pod_meta["annotations"] = {SECRET_ENV_DIGEST_ANNOTATION: spec.secret_env_digest}
    # A replica serves requests and saves nothing: an autoscaler's scale-down must not evict it (docs/pools.md).
    pod_meta["annotations"] = {**pod_meta.get("annotations", {}), **disruption_annotations(preemptible=False)}
    return {
        "metadata": pod_meta,
        "spec": pod_spec(container=container, flavor=spec.flavor, config=config, restart_policy="Always",
                         volumes=[], team=spec.team, spot=spec.spot),
    }


def _annotated(meta: Manifest, revision: int) -> Manifest:
    if revision:
        meta["annotations"] = {**meta.get("annotations", {}), REVISION_ANNOTATION: str(revision)}
    return meta


def build_deployment(spec: EndpointSpec, config: ClusterConfig) -> Manifest:
    container = _container(spec, config, spec.image, spec.command, spec.args, spec.env)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _annotated(metadata(spec.object_name, spec.namespace, spec.team, spec.object_name, spec.name),
                               spec.revision),
        "spec": {
            "selector": {"matchLabels": labels(spec.team, spec.object_name)},
            # An extra pod during a rollout needs a spare GPU the team quota may not have (the
            # ResourceQuota would reject it and stall the rollout): surge only when the portal
            # says the team has one, else replace pods one at a time.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {
                "maxSurge": spec.max_surge, "maxUnavailable": 0 if spec.max_surge else 1}},
            "template": _pod_template(spec, config, container, TRACK_STABLE),
        },
    }


def build_service(spec: EndpointSpec) -> Manifest:
    service = cluster_ip_service(spec.object_name, spec.namespace, spec.team, spec.name, "http")
    if spec.canary is not None:
        # While a candidate runs beside it, the stable Service must not reach the candidate's pods.
        service["spec"]["selector"][TRACK_LABEL] = TRACK_STABLE
    return service


def build_canary(spec: EndpointSpec, config: ClusterConfig) -> list[Manifest]:
    """The candidate's Deployment (``spec.canary.replicas`` replicas, no autoscaler) and Service."""
    canary = spec.canary
    if canary is None:
        return []
    name = canary_name(spec.object_name)
    container = _container(spec, config, canary.image, canary.command, canary.args, canary.env)
    selector = {**labels(spec.team, spec.object_name), TRACK_LABEL: TRACK_CANARY}
    meta = _annotated(metadata(name, spec.namespace, spec.team, spec.object_name, spec.name), canary.revision)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": canary.replicas,
            "selector": {"matchLabels": selector},
            # Its replicas are exactly the units granted to it: never a surge pod beyond them.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": _pod_template(spec, config, container, TRACK_CANARY),
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name, spec.namespace, spec.team, spec.object_name, spec.name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    return [deployment, service]


def _trigger(spec: EndpointSpec, config: ClusterConfig, metric: str, target: float, strict: bool = True) -> Manifest:
    trigger: Manifest = {
        "type": "prometheus",
        # Trigger names end up in HPA metric names: DNS-style, no underscores.
        "name": metric.replace("_", "-"),
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": config.prometheus_url,
            "query": _query(spec, metric),
            "threshold": _threshold(target),
            # A metric that stops answering is an error (then the fallback), never a zero.
            "ignoreNullValues": "false" if strict else "true",
        },
    }
    if metric in (METRIC_PROMETHEUS, *_GATEWAY_TRIGGERS) and config.prometheus_proxy_url:
        # The second wall for user-written PromQL, and the tenant wall of the gateway's series (one
        # gateway serves every team): the label proxy pins every selector to the namespace in the
        # header the team's TriggerAuthentication sends. The engine and ingress presets are fixed
        # templates that go to Prometheus directly (the ingress counter of requests_per_second
        # carries the team in exported_namespace, which the proxy's namespace matcher would not find).
        trigger["metadata"]["serverAddress"] = config.prometheus_proxy_url
        trigger["metadata"]["authModes"] = "custom"
        trigger["authenticationRef"] = {"name": PROMETHEUS_TENANT_NAME}
    return trigger


def _wake_trigger(spec: EndpointSpec, config: ClusterConfig) -> Manifest:
    """KEDA's activation on the requests the gateway holds for the endpoint: one held request wakes it from
    zero (``activationThreshold`` 0: active above it). No series is nothing held, never an error."""
    trigger = _trigger(spec, config, GATEWAY_HELD, HELD_THRESHOLD, strict=False)
    trigger["metadata"]["activationThreshold"] = "0"
    return trigger


def build_scaledobject(spec: EndpointSpec, config: ClusterConfig) -> Manifest:
    if spec.min_replicas == 0 and spec.metric not in REQUEST_DRIVEN_METRICS:
        raise ValueError(f"min_replicas 0 needs a request-driven metric, not {spec.metric}")
    sleeps = spec.min_replicas == 0 and spec.metric == METRIC_QUEUE_LENGTH
    # The engine's queue gauge exists only while its pods do: at zero replicas its absence is
    # no error (it is an empty queue), and the ingress request rate is what wakes the endpoint.
    # The gateway's series of an endpoint appear with its first request since a gateway started:
    # for an endpoint that may sleep, none is no traffic.
    lenient = spec.min_replicas == 0 and spec.metric in (METRIC_QUEUE_LENGTH, *GATEWAY_METRICS)
    triggers = [_trigger(spec, config, spec.metric, spec.target, strict=not lenient)]
    if sleeps:
        triggers.append(_trigger(spec, config, METRIC_REQUESTS_PER_SECOND, 1))
    if spec.min_replicas == 0:
        triggers.append(_wake_trigger(spec, config))
    meta = metadata(spec.object_name, spec.namespace, spec.team, spec.object_name, spec.name)
    meta["annotations"] = {**meta.get("annotations", {}), MAX_REPLICAS_ANNOTATION: str(spec.max_replicas)}
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": meta,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.object_name},
            "pollingInterval": POLLING_INTERVAL_SECONDS,
            "cooldownPeriod": spec.scale_down_delay_seconds,
            "minReplicaCount": spec.min_replicas,
            "maxReplicaCount": spec.ceiling,
            "fallback": {"failureThreshold": FALLBACK_FAILURE_THRESHOLD, "replicas": max(spec.min_replicas, 1)},
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [_one_replica_a_minute()]},
                "scaleDown": {"stabilizationWindowSeconds": min(spec.scale_down_delay_seconds,
                                                                HPA_MAX_STABILIZATION_SECONDS),
                              "policies": [_one_replica_a_minute()]},
            }}},
            "triggers": triggers,
        },
    }


def build_endpoint(spec: EndpointSpec, config: ClusterConfig) -> list[Manifest]:
    """Deployment, Service and ScaledObject, all named ``spec.object_name``; with a candidate, its
    Deployment and Service (``<object_name>-canary``)."""
    return [build_deployment(spec, config), build_service(spec), build_scaledobject(spec, config),
            *build_canary(spec, config)]
