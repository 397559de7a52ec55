"""Inference endpoints: ``apps/v1 Deployment`` + ``v1 Service`` + ``keda.sh/v1alpha1 ScaledObject``.

The Deployment deliberately has no ``spec.replicas``: KEDA's HPA owns the replica count,
and a field Slipway re-applied on every update would fight it (and, with server-side apply,
take field ownership back from the HPA).

Scaling to zero (``min_replicas == 0``) is only meaningful with a request-driven metric
(``requests_per_second``, ``queue_length``): GPU utilisation of zero pods is "no data" and
would never wake the endpoint up. The portal validates that; this builder assumes it.
"""

from __future__ import annotations

from cluster.manifests.common import (
    Manifest,
    container_security,
    env_list,
    labels,
    metadata,
    pod_spec,
    resources,
)
from cluster.specs import (
    METRIC_GPU_UTILIZATION,
    METRIC_QUEUE_LENGTH,
    METRIC_REQUESTS_PER_SECOND,
    ClusterConfig,
    EndpointSpec,
)

#: How often KEDA polls the trigger, and how long it waits after the last activity before
#: scaling to zero (model loading is slow, so flapping is expensive).
POLLING_INTERVAL_SECONDS = 15
COOLDOWN_PERIOD_SECONDS = 300
SERVICE_PORT = 80

#: PromQL per metric. ``{ns}``/``{name}`` are the endpoint's namespace and workload id.
#: - GPU utilisation: DCGM exporter gauge (0-100) averaged over the endpoint's pods, compared
#:   as a plain value (HPA scales by current/target).
#: - Request rate: the ingress controller's counter, which exists with zero replicas, so it
#:   can wake a scaled-to-zero endpoint; AverageValue makes the target per replica.
#: - Queue length: a gauge the endpoint's queue (outside the pods) exports, per replica too.
QUERIES = {
    METRIC_GPU_UTILIZATION: 'avg(DCGM_FI_DEV_GPU_UTIL{{namespace="{ns}",pod=~"{name}-.*"}})',
    METRIC_REQUESTS_PER_SECOND: (
        'sum(rate(nginx_ingress_controller_requests{{exported_namespace="{ns}",exported_service="{name}"}}[2m]))'
    ),
    METRIC_QUEUE_LENGTH: 'sum(slipway_endpoint_queue_length{{namespace="{ns}",endpoint="{name}"}})',
}
METRIC_TYPES = {
    METRIC_GPU_UTILIZATION: "Value",
    METRIC_REQUESTS_PER_SECOND: "AverageValue",
    METRIC_QUEUE_LENGTH: "AverageValue",
}


def _threshold(value: float) -> str:
    """KEDA's metadata values are strings; keep integers free of a trailing ``.0``."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def build_deployment(spec: EndpointSpec, config: ClusterConfig) -> Manifest:
    container: Manifest = {
        "name": "server",
        "image": spec.image,
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
    }
    if spec.args:
        container["args"] = list(spec.args)
    if spec.env:
        container["env"] = env_list(spec.env)
    container["resources"] = resources(spec.flavor, spec.gpus_per_replica, spec.cpu, spec.memory_gb)
    container["readinessProbe"] = {
        "httpGet": {"path": spec.readiness_path, "port": "http"},
        # Loading weights onto the GPU takes a while; probing earlier only logs failures.
        "initialDelaySeconds": spec.initial_delay_seconds,
        "periodSeconds": 10,
        "failureThreshold": 3,
    }
    container["securityContext"] = container_security(config)
    pod_meta = {"labels": labels(spec.team, spec.workload_id)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(spec.workload_id, spec.namespace, spec.team, spec.workload_id, spec.name),
        "spec": {
            "selector": {"matchLabels": labels(spec.team, spec.workload_id)},
            # No surge: an extra pod needs a spare GPU the team quota may not have, and the
            # ResourceQuota would reject it, stalling the rollout.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {
                "metadata": pod_meta,
                "spec": pod_spec(
                    container=container, flavor=spec.flavor, config=config, restart_policy="Always", volumes=[]
                ),
            },
        },
    }


def build_service(spec: EndpointSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(spec.workload_id, spec.namespace, spec.team, spec.workload_id, spec.name),
        "spec": {
            "type": "ClusterIP",
            "selector": labels(spec.team, spec.workload_id),
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def build_scaledobject(spec: EndpointSpec, config: ClusterConfig) -> Manifest:
    query = QUERIES[spec.metric].format(ns=spec.namespace, name=spec.workload_id)
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(spec.workload_id, spec.namespace, spec.team, spec.workload_id, spec.name),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.workload_id},
            "pollingInterval": POLLING_INTERVAL_SECONDS,
            "cooldownPeriod": COOLDOWN_PERIOD_SECONDS,
            "minReplicaCount": spec.min_replicas,
            "maxReplicaCount": spec.max_replicas,
            "triggers": [
                {
                    "type": "prometheus",
                    # Trigger names end up in HPA metric names: DNS-style, no underscores.
                    "name": spec.metric.replace("_", "-"),
                    "metricType": METRIC_TYPES[spec.metric],
                    "metadata": {
                        "serverAddress": config.prometheus_url,
                        "query": query,
                        "threshold": _threshold(spec.target),
                    },
                }
            ],
        },
    }


def build_endpoint(spec: EndpointSpec, config: ClusterConfig) -> list[Manifest]:
    """Deployment, Service and ScaledObject, all named ``spec.workload_id``."""
    return [build_deployment(spec, config), build_service(spec), build_scaledobject(spec, config)]
