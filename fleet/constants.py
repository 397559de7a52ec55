"""Names of the fleet app: a cluster's states as the API shows them (docs/glossary.md "cluster states";
an endpoint's ``ready`` and ``degraded`` are other states with the same words)."""

from __future__ import annotations

from django.db import models

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


#: The name of the one cluster a single-cluster install has (no configuration needed).
DEFAULT_CLUSTER = "default"
