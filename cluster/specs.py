"""Plain, frozen descriptions of what Slipway asks a cluster to run: the parts every kind shares.

These dataclasses are the contract between the portal and the pure manifest builders: the
cluster's settings, a GPU flavor and its sharing, a mounted volume and a team's namespace, which
the shared builders (:mod:`cluster.manifests`) and every kind's own read. A kind's workload spec
lives with its builders in its app (its ``specs`` module, or beside its builders when small).
They hold no Django objects and no behaviour beyond small derived values, so the builders stay
pure functions of their input: the same spec always renders the same manifests (which is what
makes re-applying idempotent and the golden-file tests possible).

Tuples rather than lists or dicts keep the dataclasses hashable and immutable. The
builders assume the portal has validated the input (DNS-1123 ids, argv lists, bounded
sizes; see docs/design.md "Security rules"); they do not re-validate it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Gang schedulers the PyTorchJob builder knows how to target.
GANG_SCHEDULERS = ("volcano", "scheduler-plugins")


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
class TeamSpec:
    """A team's namespace and the GPU quota mirrored into its ResourceQuota."""

    slug: str
    namespace: str
    quotas: tuple[tuple[str, int], ...] = ()  # (resource_name, units), e.g. (("nvidia.com/gpu", 8),)
