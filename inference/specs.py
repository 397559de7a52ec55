"""The frozen description of an inference endpoint that its pure builders (:mod:`inference.manifests`)
render, and the endpoint vocabulary they read.

Like the shared specs (:mod:`cluster.specs`, whose flavor it holds): no Django objects, tuples
rather than lists, so the same spec always renders the same manifests. The builders assume the
portal has validated it (:mod:`inference.validation`); they do not re-validate it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.specs import FlavorSpec

# -- the endpoint vocabulary: the one definition (the app's choices, forms, serializers and
#    validation are built from it; the builders read it) ------------------------------------------

#: Autoscaling metrics an endpoint may scale on, with what people call them.
METRIC_GPU_UTILIZATION = "gpu_utilization"
METRIC_REQUESTS_PER_SECOND = "requests_per_second"
METRIC_QUEUE_LENGTH = "queue_length"
METRIC_PROMETHEUS = "prometheus"
#: The gateway's own series (docs/serving.md "Autoscaling on traffic, waking from zero"): requests in
#: flight through Slipway's gateway, and its requests a second, each per replica.
METRIC_GATEWAY_IN_FLIGHT = "gateway_in_flight"
METRIC_GATEWAY_REQUESTS_PER_SECOND = "gateway_requests_per_second"
METRIC_LABELS = {
    METRIC_GPU_UTILIZATION: "GPU utilization",
    METRIC_REQUESTS_PER_SECOND: "Requests per second",
    METRIC_QUEUE_LENGTH: "Queue length",
    METRIC_PROMETHEUS: "Prometheus query",
    METRIC_GATEWAY_IN_FLIGHT: "Requests in flight at the gateway",
    METRIC_GATEWAY_REQUESTS_PER_SECOND: "Requests per second at the gateway",
}
METRICS = tuple(METRIC_LABELS)
#: The metrics read from the gateway's series (``slipway_gateway_*``).
GATEWAY_METRICS = (METRIC_GATEWAY_IN_FLIGHT, METRIC_GATEWAY_REQUESTS_PER_SECOND)
#: Metrics driven by requests rather than by running pods, so scaling to zero is possible with
#: them (GPU utilisation of zero pods is "no data", which would never wake the endpoint up).
REQUEST_DRIVEN_METRICS = (METRIC_REQUESTS_PER_SECOND, METRIC_QUEUE_LENGTH, METRIC_PROMETHEUS, *GATEWAY_METRICS)
#: Serving engines whose queue metric the builder knows, with what people call them.
ENGINE_VLLM = "vllm"
ENGINE_TGI = "tgi"
ENGINE_TRITON = "triton"
ENGINE_LABELS = {ENGINE_VLLM: "vLLM", ENGINE_TGI: "Text Generation Inference", ENGINE_TRITON: "Triton"}
ENGINES = tuple(ENGINE_LABELS)

#: An endpoint's defaults: what a request that leaves a field out gets, everywhere.
DEFAULT_METRIC = METRIC_GPU_UTILIZATION
#: The default target of GPU utilization, in percent (the other metrics need a target given).
DEFAULT_GPU_UTILIZATION_TARGET = 70
DEFAULT_PORT = 8080
DEFAULT_SCALE_DOWN_DELAY_SECONDS = 300
DEFAULT_STARTUP_TIMEOUT_SECONDS = 600
DEFAULT_READINESS_PATH = "/health/ready"


@dataclass(frozen=True)
class CanarySpec:
    """An endpoint's candidate revision served beside its stable one (``<object_name>-canary``).

    Its own serving fields and a fixed replica count (the units the portal granted it); everything else
    (flavor, port, probes, secret env) is the endpoint's.
    """

    revision: int
    image: str
    replicas: int
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class EndpointSpec:
    """An inference endpoint: Deployment + Service + KEDA ScaledObject.

    ``replica_ceiling`` is the ScaledObject's ``maxReplicaCount``: what the portal has admitted
    (the minimum plus burst granted so far), which it moves; ``max_replicas`` is how far the
    user allows it to grow. ``min_replicas == 0`` is only valid with a request-driven
    ``metric`` (see :data:`REQUEST_DRIVEN_METRICS`); the portal validates that before building.
    """

    object_name: str  # "ep-7"
    team: str
    namespace: str
    name: str
    image: str
    flavor: FlavorSpec
    port: int = DEFAULT_PORT
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: Names of the secret env variables: taken from the Secret ``<object_name>-env`` (values never here).
    secret_env: tuple[str, ...] = ()
    #: Keyed digest of the secret env values (never a value): a pod template annotation, so a
    #: replaced Secret rolls the Deployment. Empty: no annotation.
    secret_env_digest: str = ""
    gpus_per_replica: int = 1
    min_replicas: int = 1
    max_replicas: int = 1
    replica_ceiling: int | None = None  # None: max_replicas
    metric: str = DEFAULT_METRIC
    target: float = float(DEFAULT_GPU_UTILIZATION_TARGET)
    engine: str | None = None  # queue_length: one of ENGINES
    query: str | None = None  # prometheus: the user's PromQL
    scale_down_delay_seconds: int = DEFAULT_SCALE_DOWN_DELAY_SECONDS
    readiness_path: str = DEFAULT_READINESS_PATH
    startup_timeout_seconds: int = DEFAULT_STARTUP_TIMEOUT_SECONDS
    spot: bool = False
    max_surge: int = 0  # 1 only when the team has a replica's units to spare for a rolling update
    #: The revision the stable Deployment serves (0: not told; an annotation the status mapping reads back).
    revision: int = 0
    #: The candidate revision served beside it, when one is live and admitted.
    canary: CanarySpec | None = None

    @property
    def ceiling(self) -> int:
        return self.replica_ceiling if self.replica_ceiling is not None else self.max_replicas
