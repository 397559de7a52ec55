"""Names of the fleet app: a cluster's states as the API shows them (docs/glossary.md "cluster states";
an endpoint's ``ready`` and ``degraded`` are other states with the same words), and how a flavor's
units share a GPU."""

from __future__ import annotations

from django.db import models

from cluster import pools, specs, training
from cluster.placement import ClusterState


class Health(models.TextChoices):
    """What the reconciler last learnt of a cluster by observing it."""

    READY = "ready", "ready"
    DEGRADED = "degraded", "degraded"  #: its last observation failed, fewer than the lost threshold in a row
    LOST = "lost", "lost"  #: silent for SLIPWAY_CLUSTER_LOST_AFTER_CYCLES cycles in a row


class State(models.TextChoices):
    """A cluster's one state word (docs/api.md "Clusters"): lost, then draining, then its health.
    The words are :class:`cluster.placement.ClusterState`'s, which ``place()`` reads."""

    READY = ClusterState.READY, "ready"
    DEGRADED = ClusterState.DEGRADED, "degraded"
    LOST = ClusterState.LOST, "lost"
    DRAINING = ClusterState.DRAINING, "draining"


class TrainingApi(models.TextChoices):
    """A cluster's training API (:data:`cluster.training.TRAINING_APIS`, the one vocabulary; docs/training.md)."""

    TRAINJOB = training.TRAINJOB, training.LABELS[training.TRAINJOB]
    PYTORCHJOB = training.PYTORCHJOB, training.LABELS[training.PYTORCHJOB]
    NONE = training.NONE, training.LABELS[training.NONE]


#: The name of the one cluster a single-cluster install has (no configuration needed).
DEFAULT_CLUSTER = "default"


class Sharing(models.TextChoices):
    """How a flavor's units share a physical GPU (:data:`cluster.specs.SHARINGS`, the one vocabulary)."""

    NONE = specs.SHARING_NONE, specs.SHARING_LABELS[specs.SHARING_NONE]
    MIG = specs.SHARING_MIG, specs.SHARING_LABELS[specs.SHARING_MIG]
    TIME_SLICING = specs.SHARING_TIME_SLICING, specs.SHARING_LABELS[specs.SHARING_TIME_SLICING]
    MPS = specs.SHARING_MPS, specs.SHARING_LABELS[specs.SHARING_MPS]


#: The most units one GPU may be cut into by time-slicing or MPS (the MPS daemon serves at most 48
#: clients per GPU on Volta and newer; more replicas than that would never all run).
MAX_REPLICAS = 48
#: The resource names a time-sliced or MPS flavor may request: the whole-GPU name the device plugin
#: keeps with ``renameByDefault: false``, or the ``.shared`` name it advertises when renamed.
SHARED_RESOURCE_NAMES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")


class PoolMode(models.TextChoices):
    """How an elastic pool provisions nodes (:data:`cluster.pools.MODES`, the one vocabulary; docs/pools.md)."""

    ATOMIC = pools.ATOMIC, pools.MODE_LABELS[pools.ATOMIC]
    ANY = pools.ANY, pools.MODE_LABELS[pools.ANY]
