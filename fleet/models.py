"""The hardware Slipway places work on: clusters, and the GPU flavors their nodes offer.

A :class:`GpuFlavor` is the catalog entry of one schedulable GPU type (docs/glossary.md "flavor"):
what a unit of it is, which nodes offer it, and its list prices (two columns, the price table's
default; every rule that reads a price is billing's, :mod:`billing.pricing`). Its table keeps the
name it was created with (``quotas_gpuflavor``): the model moved here from ``quotas`` with the
split of that app (docs/architecture.md "Apps by domain") and no row moved.

Clusters (docs/design.md "Sharing, preemption, clusters")

Clusters are data: staff add and drain them in the admin console or the staff API. A
single-cluster install has none until first use, when :func:`fleet.services.clusters` creates
the clusters its backend offers (one ``default``, or the sandbox inventory's clusters).
"""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from cluster.nvidia import (
    GPU_RESOURCE,
    SHARING_STRATEGY_LABEL,
    describe_selector,
    gfd_selector,
    selector_conflicts,
)
from cluster.placement import PLACEABLE_STATES
from cluster.pools import DEFAULT_UNNEEDED_MINUTES, HISTORY
from cluster.specs import ISOLATION, REPLICATED_SHARINGS, SHARING_NONE, FlavorSpec
from cluster.training import ClusterTraining, Runtime, effective, frameworks
from core.money import MONEY
from fleet.constants import MAX_REPLICAS, SHARED_RESOURCE_NAMES, Health, PoolMode, Sharing, State, TrainingApi

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
    # Its training API (docs/training.md): what discovery found, and staff's word over it.
    training_api = models.CharField(
        max_length=10, choices=TrainingApi.choices, blank=True, default="",
        help_text="What API discovery found; empty: not checked yet (taken to be pytorchjob, as before discovery).")
    #: The ClusterTrainingRuntimes discovery found on a Trainer v2 cluster: ``[{"name", "framework"}]``.
    training_runtimes = models.JSONField(default=list, blank=True)
    training_api_override = models.CharField(
        max_length=10, choices=TrainingApi.choices, blank=True, default="",
        help_text="Staff: the training API to take it to have, whatever discovery finds; empty: discovery's.")
    training_checked_at = models.DateTimeField(null=True, blank=True, help_text="When discovery last asked it.")
    training_error = models.CharField(max_length=500, blank=True,
                                      help_text="Why the last discovery failed (what it found before is kept).")
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

    @property
    def runtimes(self) -> tuple[Runtime, ...]:
        """Its training runtimes as discovery last found them."""
        return tuple(Runtime(str(r.get("name", "")), str(r.get("framework", ""))) for r in self.training_runtimes or []
                     if isinstance(r, dict))

    @property
    def effective_training_api(self) -> str:
        """The training API it is taken to have (:func:`cluster.training.effective`: the override wins)."""
        return effective(self.training_api, self.training_api_override)

    @property
    def frameworks(self) -> tuple[str, ...]:
        """The frameworks it offers (:func:`cluster.training.frameworks` of its effective API and runtimes)."""
        return frameworks(self.effective_training_api, self.runtimes)

    @property
    def training(self) -> ClusterTraining:
        """Its effective training API and frameworks, as the rules of :mod:`cluster.training` take them."""
        return ClusterTraining(self.effective_training_api, self.frameworks)


FLAVOR_NAME = RegexValidator(
    r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$",
    "Use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.",
)


def unknown_flavor(name: str) -> str:
    """The field error of a submission asking for a flavor that does not exist."""
    return f"Unknown flavor {name!r}."


class GpuFlavorQuerySet(models.QuerySet):
    def usable(self) -> GpuFlavorQuerySet:
        """Flavors that may be requested now (:attr:`GpuFlavor.usable`, in SQL): pickers, the API's list."""
        return self.filter(active=True)


class GpuFlavor(models.Model):
    """A schedulable GPU type: a Kubernetes extended resource on nodes with certain labels.

    Quotas, holds, prices and sizes count its *units* (docs/glossary.md "unit"): one whole
    GPU, one MIG slice, or one replica of a shared GPU (``gpu_fraction`` of a physical GPU).
    ``active`` is whether it is still offered (an admin retires a flavor by clearing it); it is not
    the "active" of work.
    """

    name = models.CharField(max_length=40, unique=True, validators=[FLAVOR_NAME],
                            help_text="What users pick, e.g. a100-80gb or a100-1g.10gb.")
    resource_name = models.CharField(max_length=100, help_text="nvidia.com/gpu or nvidia.com/mig-<profile>.")
    gpu_model = models.CharField(max_length=100, help_text="Node label value of nvidia.com/gpu.product.")
    mig_profile = models.CharField(max_length=20, blank=True, help_text="e.g. 1g.10gb; empty for a full GPU.")
    gpu_memory_gb = models.PositiveIntegerField()
    gpu_fraction = models.DecimalField(
        max_digits=7, decimal_places=6, default=Decimal(1),
        validators=[MinValueValidator(Decimal("0.000001")), MaxValueValidator(Decimal(1))],
        help_text="Share of a physical GPU one unit is (a MIG 1g slice of an A100 is 1/7).",
    )
    node_labels = models.JSONField(default=dict, blank=True, help_text="Node selector, a JSON object.")
    tolerations = models.JSONField(
        default=list, blank=True,
        help_text='JSON list of {"key", "operator", "value", "effect"} objects.',
    )
    max_units_per_node = models.PositiveIntegerField(
        default=1, validators=[MinValueValidator(1)],
        help_text="Units of this resource on the largest node: no worker may ask for more.",
    )
    price_per_hour = models.DecimalField(**MONEY, validators=[MinValueValidator(Decimal(0))],
                                         help_text="On-demand price of one unit per hour.")
    spot_price_per_hour = models.DecimalField(**MONEY, validators=[MinValueValidator(Decimal(0))],
                                              help_text="Spot price of one unit per hour.")
    active = models.BooleanField(default=True, help_text="Inactive flavors cannot be requested any more.")
    description = models.CharField(max_length=200, blank=True)
    sharing = models.CharField(
        max_length=20, choices=Sharing.choices, default=Sharing.NONE,
        help_text="How one physical GPU is shared: whole, MIG slices, time-sliced (no isolation: every pod sees "
                  "the whole memory) or MPS (a memory limit per pod; one team's work).",
    )
    replicas = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(MAX_REPLICAS)],
        help_text="Time-sliced and MPS flavors: how many units one GPU is cut into (each unit is 1/replicas of a "
                  "GPU, and its price is usually the GPU's price / replicas). 1 otherwise.",
    )
    training = models.BooleanField(
        default=True, help_text="Whether training runs may use it (shared flavors never take distributed runs or "
                                "more than one unit per pod).",
    )
    one_team_per_gpu = models.BooleanField(
        default=True, help_text="MPS only: pods of different teams are never placed on one node's MPS GPUs "
                                "(MPS limits memory per pod but does not isolate faults).",
    )

    objects = GpuFlavorQuerySet.as_manager()

    class Meta:
        db_table = "quotas_gpuflavor"  # its name since it was created in quotas (module docstring)
        verbose_name = "GPU flavor"
        verbose_name_plural = "GPU flavors"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        self.set_fraction()
        super().save(*args, **kwargs)

    def set_fraction(self) -> None:
        """One rule for what a unit is: a replica of a shared GPU is 1/replicas of it, so quota, borrowing,
        showback and idle waste (all of which read gpu_fraction) count it as such. :meth:`save` applies it
        (and a flavor that is never saved, bench/sharing.py's, through it)."""
        if self.replicated and self.replicas:
            self.gpu_fraction = (Decimal(1) / self.replicas).quantize(Decimal("0.000001"))

    def clean(self) -> None:
        """A flavor's sharing, replicas, MIG profile and resource name must describe one real device-plugin set-up."""
        errors: dict[str, str] = {}
        if self.sharing == Sharing.MIG and not self.mig_profile:
            errors["mig_profile"] = "A MIG flavor names its profile, e.g. 1g.10gb."
        if self.mig_profile and self.sharing != Sharing.MIG:
            errors["sharing"] = ("A flavor with a MIG profile is a MIG slice: MIG slices are not time-sliced or "
                                 "shared with MPS here (the device plugin does not run MPS on MIG devices).")
        if self.replicated:
            if self.replicas < 2:
                errors["replicas"] = "A time-sliced or MPS flavor cuts a GPU into 2 or more units."
            if self.resource_name not in SHARED_RESOURCE_NAMES:
                errors["resource_name"] = (f"A time-sliced or MPS flavor requests {' or '.join(SHARED_RESOURCE_NAMES)} "
                                           "(the second when the device plugin renames shared GPUs).")
        elif self.replicas != 1:
            errors["replicas"] = "Only time-sliced and MPS flavors have replicas; leave it at 1."
        if not isinstance(self.node_labels, dict):
            errors["node_labels"] = ('A JSON object of node label and value, e.g. '
                                     '{"node.kubernetes.io/instance-type": "g4dn.xlarge"}.')
        elif not errors.keys() & {"replicas", "sharing"} and (conflicts := self.gfd_conflicts()):
            # Only for a sharing set-up that is valid itself: GFD's labels follow from it.
            errors["node_labels"] = conflicts
        if errors:
            raise ValidationError(errors)

    def gfd_conflicts(self) -> str:
        """The field error of node labels that no node of this flavor carries ("" when none).

        GPU Feature Discovery labels a node by how its GPUs are shared (:func:`cluster.nvidia.gfd_selector`),
        and Slipway's pods select those labels themselves: an extra label that says otherwise (a plain
        product on a time-sliced flavor, another sharing strategy) would match no node at all.
        """
        conflicts = selector_conflicts(self.node_labels, self.gpu_model, self.resource_name, self.sharing,
                                       self.replicas)
        if not conflicts:
            return ""
        gfd = gfd_selector(self.gpu_model, self.resource_name, self.sharing, self.replicas)
        if self.replicated:
            how = "time-sliced" if self.sharing == Sharing.TIME_SLICING else "shared with MPS"
            renamed = f" and advertised as {self.resource_name}" if self.resource_name != GPU_RESOURCE else ""
            nodes = f"nodes whose {self.gpu_model} GPUs are {how} ×{self.replicas}{renamed}"
        else:
            nodes = f"nodes of unshared {self.gpu_model} GPUs"
            gfd = {**gfd, SHARING_STRATEGY_LABEL: SHARING_NONE}
        return (f"{', '.join(conflicts)} matches no node of this flavor: GPU Feature Discovery labels {nodes} "
                f"with {describe_selector(gfd)}. Slipway's pods select those labels already; leave them out "
                "of the node labels (or give the same values).")

    @property
    def usable(self) -> bool:
        """Whether the flavor may be requested now: the one rule (an admin retires a flavor by
        making it inactive; work already running on it goes on). :func:`quotas.decide.decide`
        refuses new work on a flavor that is not, and submissions say so in a field error."""
        return self.active

    @property
    def replicated(self) -> bool:
        """Whether a unit is a replica of a whole GPU (time-slicing, MPS)."""
        return self.sharing in REPLICATED_SHARINGS

    @property
    def isolation(self) -> str:
        """What is isolated between pods on one GPU: exclusive, hardware, partial or none."""
        return ISOLATION[self.sharing]

    @property
    def memory_is_shared(self) -> bool:
        """Time-sliced pods all see (and compete for) the GPU's whole memory; other units have their own."""
        return self.sharing == Sharing.TIME_SLICING

    @property
    def memory_per_unit_gb(self) -> Decimal:
        """GPU memory one unit may use: an MPS unit its limit (the GPU's / replicas); a time-sliced unit
        the whole GPU's, shared with the other pods on it; a whole GPU or MIG slice its own."""
        if self.sharing == Sharing.MPS:
            return (Decimal(self.gpu_memory_gb) / self.replicas).quantize(Decimal("0.1"))
        return Decimal(self.gpu_memory_gb)

    def refusal(self) -> str:
        """The field error of a submission asking for this flavor when it is not :attr:`usable` ("" when it is)."""
        return "" if self.usable else f"Flavor {self.name} is retired and cannot be requested any more."

    def to_spec(self) -> FlavorSpec:
        """The cluster layer's :class:`cluster.specs.FlavorSpec` for this flavor."""
        tolerations = tuple(
            (str(t.get("key", "")), str(t.get("operator", "Exists")), str(t.get("value", "") or ""),
             str(t.get("effect", "") or ""))
            for t in self.tolerations or []
        )
        return FlavorSpec(
            name=self.name,
            resource_name=self.resource_name,
            gpu_model=self.gpu_model,
            mig_profile=self.mig_profile or None,
            node_selector=tuple(sorted((str(k), str(v)) for k, v in (self.node_labels or {}).items())),
            tolerations=tolerations,
            gpu_fraction=float(self.gpu_fraction),
            sharing=self.sharing,
            replicas=self.replicas,
            one_team_per_gpu=self.one_team_per_gpu and self.sharing == Sharing.MPS,
        )


#: The most nodes a pool's ``max`` may say: the field's own rule, so the admin console, the API and code
#: (:func:`fleet.pools.set_pool`, seed_demo) all hold to it. Every node a pool may still add is offered to each reader
#: of the cluster's nodes as a headroom node (:func:`fleet.pools.with_headroom`), so a ``max`` of millions would make
#: every read build millions of them; a thousand GPU nodes is beyond the largest pool of one flavor a Slipway cluster
#: is known to run.
MAX_NODES = 1000


class NodePool(models.Model):
    """An elastic pool (docs/pools.md): one cluster's nodes of one flavor, which an autoscaler adds and removes
    between ``min_nodes`` and ``max_nodes``; each node offers the flavor's ``max_units_per_node`` units.

    Staff set it (admin console, ``PATCH /api/v1/clusters/{name}/``). What it has now (nodes ready and
    provisioning) is read from the cluster's nodes as last recorded, never stored twice; what it keeps is its
    own history: the provisioning times it observed (``history_seconds``, newest last) that start estimates
    read, and the GPU limit of the autoscaler's own pool where one is found (a Karpenter NodePool's
    ``spec.limits``), which caps ``max_nodes``.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pools")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="pools")
    min_nodes = models.PositiveIntegerField(default=0, help_text="Nodes the pool keeps even when idle.")
    max_nodes = models.PositiveIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(MAX_NODES, f"At most {MAX_NODES} nodes.")],
        help_text="The most nodes it may ever have (what quota follows).")
    mode = models.CharField(max_length=10, choices=PoolMode.choices, default=PoolMode.ATOMIC,
                            help_text="atomic: a workload's nodes are asked for at once with a ProvisioningRequest "
                                      "and it starts when all are up; any: the autoscaler adds nodes one by one.")
    unneeded_minutes = models.PositiveIntegerField(
        default=DEFAULT_UNNEEDED_MINUTES, validators=[MinValueValidator(1), MaxValueValidator(24 * 60)],
        help_text="Minutes a node stands idle before the pool removes it.")
    history_seconds = models.JSONField(default=list, blank=True,
                                       help_text="Provisioning times observed (seconds, newest last).")
    autoscaler_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="Units the autoscaler's own pool may hold at most (Karpenter NodePool "
                                         "limits), as last read; empty: none found.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster__name", "flavor__name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "flavor"], name="one_pool_per_cluster_flavor")]

    def __str__(self) -> str:
        return f"{self.flavor.name} on {self.cluster.name}"

    def clean(self) -> None:
        if self.max_nodes is not None and self.min_nodes > self.max_nodes:
            raise ValidationError({"min_nodes": "The minimum is more than the maximum."})

    @property
    def units_per_node(self) -> int:
        return self.flavor.max_units_per_node

    @property
    def effective_max_nodes(self) -> int:
        """``max_nodes``, or fewer when the autoscaler's own limit allows fewer whole nodes."""
        if self.autoscaler_limit is None:
            return self.max_nodes
        return min(self.max_nodes, self.autoscaler_limit // max(self.units_per_node, 1))

    def remembered(self, seconds: float) -> list[float]:
        """Its history with one more observed provisioning time (the newest :data:`cluster.pools.HISTORY` kept)."""
        return [*(self.history_seconds or []), round(float(seconds), 1)][-HISTORY:]
