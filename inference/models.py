"""Inference endpoints: a workload kind (see :mod:`workloads`; the words as docs/glossary.md defines them),
and their scaling log.

An endpoint's quota has two parts. Its **minimum** (``min_replicas``, at least one replica's
units so a scaled-to-zero endpoint can wake without waiting) is reserved at admission and
guaranteed. Above it, **burst** replicas up to ``max_replicas`` are granted while it runs,
one at a time, from the team's free quota and budget, and reclaimed when demand falls or
queued work of the team needs them. ``replica_ceiling`` is what is granted now: the
ScaledObject's ``maxReplicaCount``, which Slipway owns.

Two histories sit beside an endpoint. The **scaling log** (:class:`ScalingEvent`) holds
Slipway's decisions about the ceiling (admitted, burst granted, capped, reclaimed, released,
sizes changed). The **replica samples** (:class:`ReplicaSample`) hold what was observed —
ready, desired and the ceiling — one row each time one of them changes, so an endpoint that
stays as it is writes nothing; the replicas chart is drawn from them.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.db.models import Q
from django.urls import reverse

from cluster.specs import (
    DEFAULT_PORT,
    DEFAULT_READINESS_PATH,
    DEFAULT_SCALE_DOWN_DELAY_SECONDS,
    DEFAULT_STARTUP_TIMEOUT_SECONDS,
)
from inference.constants import (
    ACTIVE_STATES,
    FINAL_STATES,
    HOLDING_STATES,
    REF_PREFIX,
    EndpointState,
    ScalingDecision,
)
from workloads.models import Workload


class InferenceEndpoint(Workload):
    KIND_PREFIX = REF_PREFIX
    FINAL_STATES = FINAL_STATES
    HOLDING_STATES = HOLDING_STATES
    ACTIVE_STATES = ACTIVE_STATES

    # What was submitted (API.md field names), beyond the shared name, flavor and spot.
    image = models.CharField(max_length=300)
    command = models.JSONField(default=list, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    port = models.PositiveIntegerField(default=DEFAULT_PORT)
    gpus_per_replica = models.PositiveIntegerField(default=1)
    min_replicas = models.PositiveIntegerField(default=1)
    max_replicas = models.PositiveIntegerField(default=1)
    autoscale = models.JSONField(default=dict, blank=True, help_text='{"metric", "target", "engine", "query"}')
    scale_down_delay_seconds = models.PositiveIntegerField(default=DEFAULT_SCALE_DOWN_DELAY_SECONDS)
    readiness_path = models.CharField(max_length=200, default=DEFAULT_READINESS_PATH)
    startup_timeout_seconds = models.PositiveIntegerField(default=DEFAULT_STARTUP_TIMEOUT_SECONDS)

    state = models.CharField(max_length=16, choices=EndpointState.choices, default=EndpointState.QUEUED,
                             db_index=True)
    # What the cluster shows (updated by the reconciler) and what Slipway granted.
    replicas = models.PositiveIntegerField(default=0, help_text="Ready replicas.")
    desired_replicas = models.PositiveIntegerField(default=0, help_text="What the autoscaler wants.")
    replica_ceiling = models.PositiveIntegerField(default=0, help_text="Granted maximum: the minimum plus burst.")
    #: Since when the autoscaler has wanted fewer replicas than the ceiling (scale-down delay).
    demand_below_ceiling_since = models.DateTimeField(null=True, blank=True)

    class Meta(Workload.Meta):
        constraints = [
            # Unique among the team's unfinished endpoints (docs/glossary.md): a deleted or failed
            # endpoint's name may be reused. The constraint keeps its older name (a migration's).
            models.UniqueConstraint(fields=["team", "name"], condition=~Q(state__in=["deleted", "failed"]),
                                    name="uniq_live_endpoint_name"),
        ]
        indexes = [models.Index(fields=["team", "state"])]

    def get_absolute_url(self) -> str:
        return reverse("inference:endpoint-detail", args=[self.pk])

    @property
    def base_replicas(self) -> int:
        """Replicas whose units are guaranteed: the minimum, and at least one to wake from zero."""
        return max(self.min_replicas, 1)

    @property
    def placement_shape(self) -> tuple[int, int]:
        """Its guaranteed replicas (at least one, to wake from zero), as admission reserves them."""
        return self.base_replicas * self.gpus_per_replica, self.gpus_per_replica

    @property
    def ceiling(self) -> int:
        """The granted maximum of replicas: the ceiling once burst moved it, else the guaranteed base.

        The one rule: the page, the ScaledObject's ``maxReplicaCount``, burst scaling and the
        "burst now" words all read it (``replica_ceiling`` is 0 until the first move).
        """
        return self.replica_ceiling or self.base_replicas

    @property
    def ceiling_units(self) -> int:
        """GPU units of the granted ceiling: the most the endpoint is billed for at any moment."""
        return self.ceiling * self.gpus_per_replica

    @property
    def url(self) -> str:
        """The in-cluster address of the endpoint's Service."""
        return f"http://{self.object_name}.{self.namespace}.svc.cluster.local"

    @property
    def cost_per_hour_now(self) -> Decimal:
        """What it costs per hour at the units running now: ready replicas and those still loading
        (both hold their GPUs). The API's ``cost_per_hour_now`` (docs/glossary.md "cost per hour")."""
        return self.cost_per_hour_at(self.open_units)

    @property
    def cost_per_hour_range(self) -> tuple[Decimal, Decimal]:
        """What it costs per hour at its minimum and at its maximum."""
        return (self.cost_per_hour_at(self.min_replicas * self.gpus_per_replica),
                self.cost_per_hour_at(self.max_replicas * self.gpus_per_replica))


class ScalingEvent(models.Model):
    """One scaling decision of an endpoint (API.md ``scaling/``), newest first."""

    endpoint = models.ForeignKey(InferenceEndpoint, on_delete=models.CASCADE, related_name="scaling_events")
    at = models.DateTimeField(db_index=True)
    replicas = models.PositiveIntegerField()
    desired_replicas = models.PositiveIntegerField()
    replica_ceiling = models.PositiveIntegerField()
    metric_value = models.FloatField(null=True, blank=True)
    decision = models.CharField(max_length=20, choices=ScalingDecision.choices)
    reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["endpoint", "-at"])]

    def __str__(self) -> str:
        return f"{self.endpoint.ref} {self.at:%Y-%m-%d %H:%M:%S} {self.decision}"


class ReplicaSample(models.Model):
    """The replica counts of an endpoint from a moment on, until the next sample (API.md ``replicas/``).

    Written when an observation (or a move of the ceiling) changes any of the three, never
    for an endpoint that stays as it is. Newest first.
    """

    endpoint = models.ForeignKey(InferenceEndpoint, on_delete=models.CASCADE, related_name="replica_samples")
    at = models.DateTimeField()
    ready = models.PositiveIntegerField()
    desired = models.PositiveIntegerField()
    ceiling = models.PositiveIntegerField()

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["endpoint", "-at"])]

    def __str__(self) -> str:
        return f"{self.endpoint.ref} {self.at:%Y-%m-%d %H:%M:%S} {self.ready}/{self.desired}/{self.ceiling}"
