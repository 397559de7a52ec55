"""A cluster Slipway places work on (docs/design.md "Sharing, preemption, clusters").

Clusters are data: staff add and drain them in the admin console or the staff API. A
single-cluster install has none until first use, when :func:`fleet.services.clusters` creates
the clusters its backend offers (one ``default``, or the sandbox inventory's clusters).
"""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

from cluster.placement import PLACEABLE_STATES
from fleet.constants import Health, State

CLUSTER_NAME = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    "Use lowercase letters, digits and '-', starting and ending with a letter or digit.",
)


class Cluster(models.Model):
    """One Kubernetes cluster (or one simulated cluster of the sandbox)."""

    name = models.CharField(max_length=40, unique=True, validators=[CLUSTER_NAME])
    backend = models.CharField(
        max_length=200, blank=True,
        help_text="sandbox, kubernetes or a dotted path; empty: the SLIPWAY_CLUSTER_BACKEND setting.")
    kubeconfig = models.CharField(
        max_length=500, blank=True,
        help_text="Path of a kubeconfig file (mount it from a Secret); empty: SLIPWAY_KUBECONFIG, else in-cluster.")
    context = models.CharField(max_length=100, blank=True, help_text="The kubeconfig context; empty: its current one.")
    region = models.CharField(max_length=63, blank=True)
    labels = models.JSONField(default=dict, blank=True,
                              help_text='Matched by a workload\'s cluster_selector, e.g. {"site": "onprem"}.')
    health = models.CharField(max_length=10, choices=Health.choices, default=Health.READY)
    draining = models.BooleanField(default=False, help_text="No new placements; running work finishes.")
    last_seen = models.DateTimeField(null=True, blank=True, help_text="When an observation last succeeded.")
    silent_since = models.DateTimeField(null=True, blank=True, help_text="The first failed observation in a row.")
    silent_cycles = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    #: The nodes' GPU capacity as last read (a list of NodeCapacity as dicts), for pages that must
    #: not call a cluster that may be slow or gone.
    nodes = models.JSONField(default=list, blank=True)
    nodes_read_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def state(self) -> str:
        """The API's one word: ``lost`` wins over ``draining``, which wins over the health."""
        if self.health == Health.LOST:
            return State.LOST
        if self.draining:
            return State.DRAINING
        return State(self.health)

    @property
    def placeable(self) -> bool:
        """Whether new work may be placed here."""
        return self.state in PLACEABLE_STATES
