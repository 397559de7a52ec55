"""Plain, frozen descriptions of what Slipway asks a cluster to run.

These dataclasses are the contract between the portal (``jobs``, ``inference``, ``quotas``)
and the pure manifest builders in :mod:`cluster.manifests`. They hold no Django objects and
no behaviour beyond small derived values, so the builders stay pure functions of their
input: the same spec always renders the same manifests (which is what makes re-applying
idempotent and the golden-file tests possible).

Tuples rather than lists or dicts keep the dataclasses hashable and immutable. The
builders assume the portal has validated the input (DNS-1123 ids, argv lists, bounded
sizes; see docs/design.md "Security rules"); they do not re-validate it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Gang schedulers the PyTorchJob builder knows how to target.
GANG_SCHEDULERS = ("volcano", "scheduler-plugins")

# -- the endpoint vocabulary: the one definition (the inference app's choices, forms, serializers
#    and validation are built from it; the builders below read it) --------------------------------

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
class ClusterConfig:
    """Cluster-wide settings the builders need (built from Django settings by ``core.backend``)."""

    gang_scheduler: str | None = None  # None | "volcano" | "scheduler-plugins"
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    #: A label-enforcing proxy in front of Prometheus for user-written queries (None: not used).
    prometheus_proxy_url: str | None = None
    run_as_non_root: bool = True
    #: Where the gateway (``manage.py gateway``, deploy/gateway.yaml) runs, and its pods' labels: the only
    #: pods an endpoint's pods accept requests from (:func:`cluster.manifests.team.build_endpoint_policy`).
    gateway_namespace: str = "slipway-system"
    gateway_pod_labels: tuple[tuple[str, str], ...] = (
        ("app.kubernetes.io/name", "slipway"), ("app.kubernetes.io/component", "gateway"))
    #: The namespace of the Prometheus that scrapes engines' ``/metrics`` (a queue-length trigger reads
    #: them), also admitted to endpoint pods; None: no scraper reaches them.
    metrics_namespace: str | None = None


# -- GPU sharing: the one vocabulary (the flavor model's choices are built from it) -----------------
#
# How one physical GPU is shared by the pods of a flavor (the NVIDIA device plugin's
# ``sharing.timeSlicing`` / ``sharing.mps`` configs, and MIG's hardware slices). What each gives:
#   none          one pod owns the whole GPU;
#   mig           a hardware slice: its own memory and compute (isolation "hardware");
#   time-slicing  pods take turns on the whole GPU: every pod sees all of its memory, nothing is
#                 isolated, one pod can exhaust the memory or starve the others (isolation "none");
#   mps           kernels of the pods run concurrently, each with a memory limit and a share of
#                 compute, but one fault reaches them all (isolation "partial": for one team's work).
SHARING_NONE = "none"
SHARING_MIG = "mig"
SHARING_TIME_SLICING = "time-slicing"
SHARING_MPS = "mps"
SHARING_LABELS = {
    SHARING_NONE: "Whole GPU",
    SHARING_MIG: "MIG slice",
    SHARING_TIME_SLICING: "Time-sliced",
    SHARING_MPS: "MPS",
}
SHARINGS = tuple(SHARING_LABELS)
#: Sharings whose unit is a replica of a whole GPU (the device plugin's ``replicas``).
REPLICATED_SHARINGS = (SHARING_TIME_SLICING, SHARING_MPS)
#: What each sharing isolates between the pods on one GPU.
ISOLATION = {
    SHARING_NONE: "exclusive",
    SHARING_MIG: "hardware",
    SHARING_TIME_SLICING: "none",
    SHARING_MPS: "partial",
}


@dataclass(frozen=True)
class FlavorSpec:
    """A schedulable GPU kind: its extended resource and where it lives.

    ``sharing`` and ``replicas``: how one physical GPU is cut into this flavor's units (see
    :data:`SHARINGS`); a time-sliced or MPS unit is ``1 / replicas`` of a GPU. ``one_team_per_gpu``:
    an MPS flavor's pods of different teams are never placed together (MPS isolation is partial).
    """

    name: str
    resource_name: str  # "nvidia.com/gpu", "nvidia.com/gpu.shared" (a renamed shared GPU) or "nvidia.com/mig-1g.10gb"
    gpu_model: str  # node label value of nvidia.com/gpu.product, e.g. "NVIDIA-A100-SXM4-80GB"
    mig_profile: str | None = None  # "1g.10gb"
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)
    gpu_fraction: float = 1.0
    sharing: str = SHARING_NONE
    replicas: int = 1
    one_team_per_gpu: bool = False


@dataclass(frozen=True)
class VolumeSpec:
    """A PersistentVolumeClaim of the team's namespace mounted into the workload."""

    claim: str
    mount_path: str
    read_only: bool = False


@dataclass(frozen=True)
class CheckpointSpec:
    """A run's checkpoint contract (docs/api.md "The checkpoint contract (runs)"), as its pods see it.

    ``claim`` is the PersistentVolumeClaim mounted at ``mount_path`` in every pod; when
    ``provided`` Slipway creates it itself (``<object name>-checkpoints``, of ``storage`` and
    ``storage_class``), else it is the team's own. ``attempt`` and ``resume_from`` change from one
    attempt to the next (a preempted run is applied anew); the run token is never here, only the
    name of the Secret key the pods read it from.
    """

    claim: str
    provided: bool = True
    grace_seconds: int = 60
    attempt: int = 1
    resume_from: str = ""
    mount_path: str = "/slipway/checkpoints"
    storage: str = "100Gi"
    storage_class: str | None = None
    #: Where the pods POST a checkpoint (SLIPWAY_CHECKPOINT_URL); "" when the portal's address
    #: for pods is not configured (they print the SLIPWAY_CHECKPOINT line instead).
    report_url: str = ""


@dataclass(frozen=True)
class TrainingSpec:
    """A training run: a Job when ``workers == 1``, a PyTorchJob otherwise."""

    object_name: str  # "run-42": the object name and the slipway.dev/workload label value
    team: str  # team slug
    namespace: str
    name: str  # the user's run name, an annotation only
    image: str
    command: tuple[str, ...]
    flavor: FlavorSpec
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: Names of the secret env variables: taken from the Secret ``<object_name>-env`` (values never here).
    secret_env: tuple[str, ...] = ()
    gpus_per_worker: int = 1
    workers: int = 1
    cpu: float | None = None
    memory_gb: float | None = None
    shm_gb: float | None = None
    max_retries: int = 2
    max_runtime_minutes: int | None = None
    spot: bool = False
    volumes: tuple[VolumeSpec, ...] = ()
    #: The checkpoint contract, when the run opted in (None: pods exactly as without it).
    checkpoint: CheckpointSpec | None = None


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


@dataclass(frozen=True)
class TeamSpec:
    """A team's namespace and the GPU quota mirrored into its ResourceQuota."""

    slug: str
    namespace: str
    quotas: tuple[tuple[str, int], ...] = ()  # (resource_name, units), e.g. (("nvidia.com/gpu", 8),)
