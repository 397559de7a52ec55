"""The backend interface every cluster implementation satisfies.

Two implementations exist: :mod:`sandbox.backend` (a simulated GPU cluster stored in the
portal's database, the default) and :mod:`cluster.backends.kubernetes` (a real API
server). The portal only ever talks to this interface.

Observations are deliberately *raw*: a backend returns the Kubernetes-shaped objects it
sees (``metadata``/``spec``/``status`` dicts, exactly as the API server would return them)
grouped by workload, and each kind's pure status mapping (built on :mod:`cluster.status`; a
Deployment's in :mod:`cluster.deployments`) turns them into portal states. That keeps one mapping
for both backends, and lets the sandbox be tested through
the same code path as a real cluster.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cluster.errors import ClusterError
from cluster.training import TrainingOffer

#: Label keys carried by every object Slipway creates.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "slipway"
TEAM_LABEL = "slipway.dev/team"
WORKLOAD_LABEL = "slipway.dev/workload"
#: The pod annotation a preemption notice is given by: its value is the deadline (ISO 8601),
#: which a run with the checkpoint contract reads in its downward-API file /etc/slipway/notice.
NOTICE_ANNOTATION = "slipway.dev/notice"

#: The label selector that finds everything Slipway manages.
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"


def env_secret_name(workload: str) -> str:
    """The Secret holding a workload's secret env (``run-42-env``).

    Derived from the workload's name because Slipway may not list Secrets (deploy/rbac.yaml):
    deleting a workload's Secret goes by this name, not by a label selector.
    """
    return f"{workload}-env"

Manifest = dict[str, Any]


@dataclass(frozen=True)
class ResourceKind:
    """A resource kind (docs/glossary.md): a kind of cluster object a workload kind creates, declared in
    its registration.

    The backends learn the workload kinds' objects only from these (``workloads.registry``
    hands them over at each call): where a kind lives in the API (``plural``), whether
    :meth:`ClusterBackend.observe` lists it (the kind's status mapping, or the cycle's clean-up,
    reads it) and whether :meth:`ClusterBackend.delete` removes it. Deletion goes in declaration order: a
    ScaledObject before the Deployment it scales, so KEDA stops scaling what is about to go.
    """

    group: str  #: the API group, "" for the core group (a Service)
    version: str
    kind: str
    plural: str
    observed: bool = False
    deleted: bool = False
    namespaced: bool = True
    #: Outlives an attempt: not deleted when a preempted workload's objects are deleted for its
    #: next attempt (a run's checkpoint claim), only when the workload ends for good.
    kept_across_attempts: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def custom(self) -> bool:
        """A custom resource, whose CRD may not be installed. Kubernetes' own API groups have no
        dot or end in ``.k8s.io`` (a reserved domain), a CRD's group is a domain of its own — or a
        SIG project's ``.x-k8s.io`` (``autoscaling.x-k8s.io``'s ProvisioningRequest, JobSet)."""
        return "." in self.group and (not self.group.endswith(".k8s.io") or self.group.endswith(".x-k8s.io"))


def resource_kind(resources: Sequence[ResourceKind], api_version: str, kind: str) -> ResourceKind | None:
    """The declaration of ``apiVersion``/``kind`` among ``resources``, or None."""
    return next((r for r in resources if r.kind == kind and r.api_version == api_version), None)


@dataclass(frozen=True)
class ClusterAddress:
    """Where one workload lives in the cluster: its namespace and its object name (the value of
    its ``slipway.dev/workload`` label, e.g. ``run-42``). A workload's ``ref`` (``run:42``) is its
    name in the ledger and the quota tables; this pair is its name on the cluster."""

    namespace: str
    object_name: str


@dataclass(frozen=True)
class ServiceRef:
    """A Service in front of serving pods (an endpoint's ``ep-7``, a canary's ``ep-7-canary``) and its port."""

    namespace: str
    name: str
    port: int = 80


@dataclass(frozen=True)
class EndpointDemand:
    """What the gateways see of one endpoint now, summed over their processes: requests held (waiting for a
    replica: an endpoint at zero wakes on them), in flight, and requests a second. The figures of the
    ``gateway_*`` autoscale metrics, which a real cluster's KEDA reads from Prometheus and a simulated
    one from :attr:`ClusterBackend.demand`."""

    held: int = 0
    in_flight: int = 0
    requests_per_second: float = 0.0


#: Reads the demand of the endpoints at some addresses (those no gateway reports are left out).
DemandReader = Callable[[Sequence[ClusterAddress]], dict[ClusterAddress, EndpointDemand]]


@dataclass
class ObservedWorkload:
    """Everything a backend saw for one workload (objects sharing a workload label).

    ``objects`` holds the top-level objects (Job, PyTorchJob, Deployment, Service,
    ScaledObject …) and ``pods`` the pods that belong to them, each as the API server
    returns it (a dict with ``apiVersion``, ``kind``, ``metadata``, ``spec``, ``status``):
    their conditions with ``lastTransitionTime`` and their containers' ``startedAt`` included.

    ``pod_events`` holds the events of :data:`STARTUP_EVENT_REASONS` about its pods (``Pulled``:
    the image's pull ended, or it was on the node already), which no pod status records: a
    replica's cold-start timeline reads them (:mod:`cluster.startup`). Backends list them only
    while some pod of Slipway's is starting (:func:`cluster.startup.starting`), so a cluster whose
    replicas all run steadily pays nothing for them.
    """

    namespace: str
    object_name: str  #: its ``slipway.dev/workload`` label, the portal workload's ``object_name``
    team: str = ""
    objects: list[Manifest] = field(default_factory=list)
    pods: list[Manifest] = field(default_factory=list)
    pod_events: list[ClusterEvent] = field(default_factory=list)

    @property
    def address(self) -> ClusterAddress:
        return ClusterAddress(self.namespace, self.object_name)

    def first(self, kind: str) -> Manifest | None:
        """The first top-level object of ``kind``, or None."""
        for obj in self.objects:
            if obj.get("kind") == kind:
                return obj
        return None


@dataclass(frozen=True)
class NodeCapacity:
    """GPU capacity of one node for one extended resource (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb`` …)."""

    node: str
    resource_name: str
    allocatable: int
    in_use: int
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    #: Not able to run pods yet: a node of an elastic pool that is being provisioned (it exists and is not
    #: Ready), or one its pool may still add (:func:`fleet.services.with_headroom`). Placement counts its
    #: units as room, since the pool brings them on demand; what starts now counts only the others
    #: (docs/pools.md).
    provisioning: bool = False

    @property
    def free(self) -> int:
        return max(self.allocatable - self.in_use, 0)


@dataclass(frozen=True)
class NodePoolLimit:
    """One autoscaler node pool's limit on a GPU resource (a Karpenter NodePool's ``spec.limits``): the labels its
    nodes get (``spec.template.metadata.labels`` and its ``In`` requirements of one value), which say which
    flavor's nodes it builds, and the most units of ``resource_name`` all its nodes together may have."""

    name: str
    resource_name: str
    limit: int
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


#: The reasons of the pod events a backend's observation carries (``ObservedWorkload.pod_events``):
#: the kubelet's ``Pulled``, the one stage of a replica's start no pod status records.
STARTUP_EVENT_REASONS = ("Pulled",)


@dataclass(frozen=True)
class ClusterEvent:
    """One Kubernetes event about a workload's objects, flattened for display."""

    type: str  # "Normal" or "Warning"
    reason: str  # e.g. "FailedScheduling", "Pulled", "OOMKilling"
    message: str
    object: str  # "Pod/run-42-master-0"
    time: str  # RFC 3339 timestamp, "" when unknown
    count: int = 1


@dataclass(frozen=True)
class GpuReading:
    """One GPU's DCGM figures for one workload, averaged over the query window (None: not reported).

    ``gpu`` is the exporter's GPU id: its UUID, or ``<node>/<index>`` when it has none; a MIG
    instance's is ``<uuid>/<instance id>``. ``util_pct`` is ``DCGM_FI_DEV_GPU_UTIL``, or
    ``DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100`` on a MIG instance (which has no GPU_UTIL).
    """

    gpu: str
    util_pct: float | None
    fb_used_mib: float | None
    fb_free_mib: float | None
    temp_c: float | None
    power_w: float | None

    @property
    def fb_total_mib(self) -> float | None:
        """The frame buffer's size as the exporter sees it (used + free), None when either is missing."""
        if self.fb_used_mib is None or self.fb_free_mib is None:
            return None
        return self.fb_used_mib + self.fb_free_mib

    @property
    def fb_used_fraction(self) -> float | None:
        """Memory used over the frame buffer's size (0–1), None when it cannot be told."""
        total = self.fb_total_mib
        return self.fb_used_mib / total if total else None


def _known(values) -> list[float]:
    return [v for v in values if v is not None]


@dataclass(frozen=True)
class WorkloadTelemetry:
    """A workload's GPUs' readings of one cycle, and the figures derived from them (None: none reported).

    Alerts (issue 38's idle, OOM-risk and temperature rules) and the idle measure read the
    derived figures; storage and charts keep every GPU.
    """

    gpus: tuple[GpuReading, ...]

    @property
    def util_pct(self) -> float | None:
        """Mean utilization over the GPUs that reported one."""
        known = _known(g.util_pct for g in self.gpus)
        return sum(known) / len(known) if known else None

    @property
    def fb_used_fraction(self) -> float | None:
        """The fullest GPU's memory used over its size: the one that runs out first."""
        known = _known(g.fb_used_fraction for g in self.gpus)
        return max(known) if known else None

    @property
    def temp_c(self) -> float | None:
        """The hottest GPU's temperature."""
        known = _known(g.temp_c for g in self.gpus)
        return max(known) if known else None

    @property
    def power_w(self) -> float | None:
        """The power drawn by all its GPUs."""
        known = _known(g.power_w for g in self.gpus)
        return sum(known) if known else None


class ClusterBackend(abc.ABC):
    """What Slipway needs from a cluster. Every method raises only :mod:`cluster.errors` classes."""

    #: Short name shown in the UI and logs ("sandbox", "kubernetes").
    name: str = "abstract"
    #: Told of every error the backend raises (the portal counts them per cluster and class for
    #: its ``/metrics``); None: nobody is. Backends raise ``self.raised(error)``.
    on_error: Callable[[ClusterError], None] | None = None
    #: What the gateways see of endpoints now (:class:`EndpointDemand`), for a backend that stands in for
    #: KEDA itself (the sandbox); set by :mod:`core.backend` from the reader the serving app registers
    #: (:func:`core.backend.register_demand_reader`). None: no reader (no demand is known).
    demand: DemandReader | None = None

    def raised(self, error: ClusterError) -> ClusterError:
        """``error``, once :attr:`on_error` was told of it: ``raise self.raised(NotFound(...))``."""
        if self.on_error is not None and not error.reported:
            error.reported = True
            self.on_error(error)
        return error

    @abc.abstractmethod
    def apply(self, objects: list[Manifest], resources: Sequence[ResourceKind] = ()) -> list[Manifest]:
        """Create or update ``objects`` (idempotent: applying twice yields one object each).

        ``resources`` declares the workload kinds' objects among them; a team's namespace
        objects (Namespace, ResourceQuota, LimitRange, NetworkPolicy, its Prometheus tenant)
        are the backend's own. Returns the objects as stored. Raises ``Invalid`` for malformed
        objects or a kind neither knows (nothing of the batch is applied when the first object
        is rejected), ``Transient`` for faults.
        """

    @abc.abstractmethod
    def apply_secret(self, secret: Manifest) -> None:
        """Create or update a workload's env Secret (:func:`env_secret_name`) in its namespace.

        Apart from :meth:`apply` because its values go one way: nothing is returned, and no
        backend hands the values back (the real cluster's RBAC forbids reading Secrets; the
        sandbox records the keys only). Raises like :meth:`apply`.
        """

    @abc.abstractmethod
    def delete(self, address: ClusterAddress, resources: Sequence[ResourceKind], *,
               grace_seconds: int | None = None) -> int:
        """Delete the workload's objects of the ``deleted`` kinds among ``resources``, in their order
        (background propagation), and its env Secret. Returns how many.

        ``grace_seconds``: the delete's grace period (a preemption's; None: the objects' own).

        Deleting what is already gone is not an error (returns 0).
        """

    @abc.abstractmethod
    def delete_objects(self, namespace: str, objects: Sequence[tuple[ResourceKind, str]]) -> int:
        """Delete the named objects (``(kind, name)``) of ``namespace`` and, with them, their pods
        (background propagation): a part of a workload, such as an endpoint's candidate
        (``<name>-canary``), while the rest stays. Returns how many existed; a missing one is no error.
        """

    @abc.abstractmethod
    def annotate_pods(self, address: ClusterAddress, annotations: dict[str, str | None]) -> int:
        """Merge ``annotations`` onto the workload's pods that have not finished (a value None
        removes its key); returns how many pods. How a preemption notice reaches a run
        (``slipway.dev/notice``, seen in its downward-API file ``/etc/slipway/notice``) before the
        delete with a grace period. A pod gone meanwhile is not an error.
        """

    @abc.abstractmethod
    def observe(self, resources: Sequence[ResourceKind]) -> list[ObservedWorkload]:
        """Slipway's objects of the ``observed`` kinds among ``resources``, across all namespaces,
        grouped by workload, with their pods (and the autoscalers KEDA made for them), and while
        some of those pods are starting their startup events (``ObservedWorkload.pod_events``).

        Must cost a constant number of API calls per kind, whatever the number of workloads.
        """

    @abc.abstractmethod
    def pods(self, address: ClusterAddress) -> list[Manifest]:
        """The workload's pods as the API server returns them, finished ones included, in any order.

        A Job's failed attempts stay (``restartPolicy: Never`` makes each attempt a pod of its
        own), so their logs stay readable; :mod:`cluster.pods` orders and names them. A
        PyTorchJob's replicas restart in place (``restartPolicy: OnFailure``): a restarted one
        says so in its container's ``restartCount`` and ``lastState.terminated``.
        """

    @abc.abstractmethod
    def logs(self, address: ClusterAddress, pod: str, tail: int | None = 200, previous: bool = False,
             since: datetime | None = None) -> list[str]:
        """The last ``tail`` log lines (all of them when None) of the workload's pod named ``pod``.

        ``pod`` is one of :meth:`pods`' names (callers check that: a name from the user must
        not reach another workload's pod); ``NotFound`` when there is no such pod. [] when its
        container has not started yet.
        ``previous``: the log of the container's run before its last restart (``previous=true``:
        the kubelet keeps that one only); [] when it has not restarted.
        ``since``: only the lines written at or after it (``sinceTime``), each beginning with the
        time it was written (``timestamps=true``, RFC 3339), so a reader that follows a log by time
        knows where it is; ``tail`` still bounds how many (the newest).
        """

    @abc.abstractmethod
    def events(self, address: ClusterAddress) -> list[ClusterEvent]:
        """Events about the workload's objects and pods, oldest first."""

    @abc.abstractmethod
    def capacity(self) -> list[NodeCapacity]:
        """Per node and GPU resource: allocatable units and units requested by running pods."""

    def gpu_telemetry(self, observed: list[ObservedWorkload]) -> dict[ClusterAddress, WorkloadTelemetry]:
        """Recent DCGM figures of each of ``observed``'s workloads with running pods, per GPU.

        Called once per reconcile cycle with what :meth:`observe` returned; must cost one
        metrics query whatever the number (utilization, memory, temperature and power in one).
        The idle measure reads its utilization from it (:mod:`workloads.idle`), so nothing is
        asked twice. A workload missing from the result is unmeasured (not idle). Raises
        ``Transient`` when the metrics source cannot answer. The default: no metrics source,
        nothing measured.
        """
        return {}

    def serving_upstreams(self, services: Sequence[ServiceRef]) -> dict[ServiceRef, tuple[str, ...]]:
        """Where the gateway sends the requests of each of ``services``: base URLs (``http://host:port``) of
        what answers for it now. One call for all the cluster's Services (the gateway asks every second).

        A real cluster answers with the Service's own in-cluster address (kube-proxy balances over its
        ready pods; no API call); the sandbox with its ready replicas' engines. An empty tuple: nothing
        answers now (no ready replica: the gateway holds the request). The default, for a backend that
        cannot tell: nothing answers.
        """
        return dict.fromkeys(services, ())

    def training(self) -> TrainingOffer | None:
        """Which training API the cluster has and the runtimes it offers (:mod:`cluster.training`), found
        by API discovery: a few GETs, asked at a cluster's registration and then every
        ``SLIPWAY_TRAINING_DISCOVERY_SECONDS`` on its heartbeat, never per workload. Raises like any call
        (the caller keeps what it knew). The default, for a backend that cannot tell: None, and the
        cluster keeps what it was taken to have.
        """
        return None

    def node_pools(self) -> list[NodePoolLimit]:
        """The autoscaler's own node pools with a GPU limit (Karpenter NodePools whose ``spec.limits`` name a
        GPU resource), read on a cluster's heartbeat: a pool's ``max`` is never taken to be more than its
        autoscaler may build (docs/pools.md). The default, for a backend without them: none."""
        return []

    def tick(self) -> None:  # noqa: B027 - a hook with a deliberate no-op default
        """Advance a simulated cluster's clock (called once per reconcile cycle).

        A real cluster advances by itself, so the default does nothing.
        """
