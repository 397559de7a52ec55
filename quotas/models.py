"""GPU flavors and prices, team quotas and budgets, holds, the queue and the usage ledger.

Only :func:`quotas.decide.decide` compares usage with limits; these models hold the rows admission
reads (:mod:`quotas.facts`) and writes (:mod:`quotas.admission`). Money is ``Decimal`` throughout (prices per hour with four decimals, so a MIG
slice priced at 1/7 of a GPU keeps its cents).
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q, Sum
from django.utils import timezone

from cluster.nvidia import (
    GPU_RESOURCE,
    SHARING_STRATEGY_LABEL,
    describe_selector,
    gfd_selector,
    selector_conflicts,
)
from cluster.specs import ISOLATION, REPLICATED_SHARINGS, SHARING_NONE, FlavorSpec
from core.formatting import format_money, format_when
from quotas.constants import MAX_REPLICAS, SHARED_RESOURCE_NAMES, Priority, Sharing

FLAVOR_NAME = RegexValidator(
    r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$",
    "Use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.",
)

#: Prices and costs: up to 99,999,999.9999.
MONEY = {"max_digits": 12, "decimal_places": 4}


def unit_price(price_per_hour: Decimal, spot_price_per_hour: Decimal, spot: bool) -> Decimal:
    """Which of a flavor's two prices a unit-hour costs: the spot one for spot work, else on-demand.

    :meth:`GpuFlavor.price`, for the raw SQL paths that read the two columns without a flavor.
    """
    return spot_price_per_hour if spot else price_per_hour


def unknown_flavor(name: str) -> str:
    """The field error of a submission asking for a flavor that does not exist."""
    return f"Unknown flavor {name!r}."


def _default_currency() -> str:
    return settings.SLIPWAY_CURRENCY


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

    def price(self, spot: bool = False, cluster_id: int | None = None) -> Decimal:
        """The price of one unit-hour (:func:`unit_price`): what the ledger's price rule is given.

        On a cluster that prices the flavor itself (:class:`ClusterPrice`), that cluster's price;
        elsewhere, and before work is placed, the flavor's. The overrides are read once per
        flavor instance (the reconcile cycle shares one instance per flavor).
        """
        return self.priced(self._cluster_prices().get(cluster_id) if cluster_id is not None else None, spot)

    def priced(self, override: tuple[Decimal, Decimal | None] | None, spot: bool) -> Decimal:
        """A unit-hour on a cluster whose own ``(price, spot price)`` is ``override`` (None: it sets
        none, the flavor's; a spot price of None: the flavor's spot price) — the one override rule,
        for :meth:`price` and :class:`quotas.pricing.PriceBook`."""
        if override is not None:
            price, spot_price = override
            return unit_price(price, spot_price if spot_price is not None else self.spot_price_per_hour, spot)
        return unit_price(self.price_per_hour, self.spot_price_per_hour, spot)

    def _cluster_prices(self) -> dict[int, tuple[Decimal, Decimal | None]]:
        if not hasattr(self, "_cluster_price_cache"):
            self._cluster_price_cache = {
                cluster_id: (price, spot_price) for cluster_id, price, spot_price in
                ClusterPrice.objects.filter(flavor_id=self.pk).values_list("cluster_id", "price_per_hour",
                                                                          "spot_price_per_hour")}
        return self._cluster_price_cache

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


class ClusterPrice(models.Model):
    """A flavor's price on one cluster, where it differs from the flavor's (cloud H100s dearer than
    on-prem ones). Placement ranks clusters by it and billing charges it (README "Several clusters")."""

    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.CASCADE, related_name="prices")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.CASCADE, related_name="cluster_prices")
    price_per_hour = models.DecimalField(**MONEY, validators=[MinValueValidator(Decimal(0))],
                                         help_text="Per unit and hour on this cluster.")
    spot_price_per_hour = models.DecimalField(**MONEY, null=True, blank=True,
                                              validators=[MinValueValidator(Decimal(0))],
                                              help_text="Spot, per unit and hour on this cluster; empty: the flavor's.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "flavor"], name="uniq_cluster_price")]
        ordering = ["cluster__name", "flavor__name"]

    def __str__(self) -> str:
        return f"{self.flavor} on {self.cluster}: {self.price_per_hour}/h"


class TeamQuota(models.Model):
    """How many units of one flavor a team may hold at once."""

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="quotas")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="quotas")
    limit = models.PositiveIntegerField(help_text="Whole units of the flavor the team may use at once "
                                                  "(its nominal quota in a cohort).")
    borrowing_limit = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="In a cohort: units it may borrow above its limit (empty: as many as the cohort lends).")
    lending_limit = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="In a cohort: units of its unused quota others may borrow (empty: all of it); "
                  "the rest is a private floor.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "flavor"], name="uniq_team_flavor_quota")]
        ordering = ["team__slug", "flavor__name"]

    def __str__(self) -> str:
        return f"{self.team.slug}: {self.limit}\u00d7 {self.flavor.name}"


class Cohort(models.Model):
    """Teams that lend each other their unused quota (Kueue's cohort, flat; docs/design.md "Sharing, preemption, clusters").

    A team's ``limit`` per flavor is its nominal quota; within a cohort what others leave
    unused may be borrowed (:func:`quotas.decide.decide`). Admission in a cohort takes this
    row's lock before the team's, since two teams must not borrow the same idle unit.
    ``reclaim``, ``min_runtime_minutes`` and ``preemption_delay_seconds`` are the rules of
    taking borrowed units back (:mod:`quotas.reclaim`; docs/glossary.md "reclaim").
    """

    class Reclaim(models.TextChoices):
        NEVER = "never", "Never: borrowed work runs to its end"
        LOWER_PRIORITY = "lower_priority", "Lower priority: only borrowed work of lower priority"
        ANY = "any", "Any: a team takes back its nominal quota from any borrower"

    name = models.CharField(max_length=63, unique=True, validators=[FLAVOR_NAME],
                            help_text="Lowercase letters, digits, '-' and '.'.")
    reclaim = models.CharField(max_length=20, choices=Reclaim.choices, default=Reclaim.ANY)
    min_runtime_minutes = models.PositiveIntegerField(
        default=10, help_text="Borrowed work younger than this is not reclaimed.")
    preemption_delay_seconds = models.PositiveIntegerField(
        default=30, help_text="How long a team waits for capacity that frees itself before reclaiming.")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TeamSharing(models.Model):
    """A team's place in quota sharing: its cohort (at most one) and its fair-share weight.

    Kept beside the team (quotas is above teams), one row per team that has one; a team
    without a row, or with no cohort, keeps its quota as a wall.
    """

    team = models.OneToOneField("portal.Team", on_delete=models.CASCADE, related_name="sharing")
    cohort = models.ForeignKey(Cohort, null=True, blank=True, on_delete=models.SET_NULL, related_name="members")
    fair_weight = models.DecimalField(max_digits=8, decimal_places=3, default=Decimal(1),
                                      validators=[MinValueValidator(Decimal(0))],
                                      help_text="Fair-share weight (0: borrows last).")
    within_team_preemption = models.BooleanField(
        default=False, help_text="A high-priority run may preempt the team's own low-priority work when the team "
                                 "is full (the checkpoint issue, #24, acts on it).")

    class Meta:
        verbose_name = "team sharing"
        verbose_name_plural = "team sharing"
        ordering = ["team__slug"]

    def __str__(self) -> str:
        return f"{self.team.slug}: {self.cohort or 'no cohort'}"


class TeamBudget(models.Model):
    """A team's monthly spending limit. Without one, spending is unlimited."""

    team = models.OneToOneField("portal.Team", on_delete=models.CASCADE, related_name="budget")
    monthly_limit = models.DecimalField(**MONEY, validators=[MinValueValidator(Decimal(0))])
    currency = models.CharField(max_length=3, default=_default_currency)
    alert_threshold_percent = models.PositiveSmallIntegerField(
        default=80, validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Warn the team once this share of the budget is spent.",
    )

    class Policy(models.TextChoices):
        NOTIFY = "notify", "Notify: banner and audit, running work continues"
        STOP = "stop", "Stop: running runs are stopped, endpoints fall back to their minimum"

    policy = models.CharField(max_length=10, choices=Policy.choices, default=Policy.NOTIFY,
                              help_text="What happens to running work once the month's budget is spent.")

    class Meta:
        ordering = ["team__slug"]

    def __str__(self) -> str:
        return f"{self.team.slug}: {self.monthly_limit} {self.currency}/month"


class BudgetMonthQuerySet(models.QuerySet):
    def record(self, team, budget: TeamBudget | None, month) -> BudgetMonth:
        """Record ``budget`` (None: removed) as ``team``'s budget of ``month`` (a date; its first day).

        Called whenever the budget changes: the month's row holds the last budget set in it.
        """
        row, _ = self.update_or_create(team=team, month=month, defaults={
            "monthly_limit": budget.monthly_limit if budget else None,
            "currency": budget.currency if budget else settings.SLIPWAY_CURRENCY})
        return row

    def of_month(self, team, month) -> BudgetMonth | None:
        """The budget ``team`` had for ``month`` (a date, its first day): the last one set in or before it.

        A month before the history begins gets the oldest row (the budget as first recorded; the
        migration that started the history seeded each team's budget of that day).
        """
        mine = self.filter(team=team)
        return mine.filter(month__lte=month).order_by("-month").first() or mine.order_by("month").first()


class BudgetMonth(models.Model):
    """A team's budget as it stood in one month: the history a past month's burn-down is drawn against.

    One row per team and month in which the budget was set, changed or removed
    (``monthly_limit`` None: no budget from then on); a month without a row had the budget of
    the last month before it that has one.
    """

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="budget_months")
    month = models.DateField(help_text="The month's first day (in the portal's time zone).")
    monthly_limit = models.DecimalField(**MONEY, null=True, blank=True)
    currency = models.CharField(max_length=3, default=_default_currency)

    objects = BudgetMonthQuerySet.as_manager()

    class Meta:
        ordering = ["team__slug", "-month"]
        constraints = [models.UniqueConstraint(fields=["team", "month"], name="quotas_budget_month_unique")]

    def __str__(self) -> str:
        limit = "none" if self.monthly_limit is None else f"{self.monthly_limit} {self.currency}"
        return f"{self.team.slug} {self.month:%Y-%m}: {limit}"


class QuotaHoldQuerySet(models.QuerySet):
    def held(self) -> QuotaHoldQuerySet:
        """Not released: the units the team holds now."""
        return self.filter(released_at__isnull=True)

    def units_by_flavor(self) -> dict[int, int]:
        """``{flavor_id: units}`` of the rows in this queryset (one query)."""
        rows = self.values("flavor_id").annotate(total=Sum("units")).order_by()
        return {row["flavor_id"]: row["total"] or 0 for row in rows}

    def units_by_team_and_flavor(self) -> dict[tuple[int, int], tuple[int, int]]:
        """``{(team_id, flavor_id): (units, borrowed units)}`` of the rows in this queryset (one query)."""
        rows = self.values("team_id", "flavor_id").annotate(total=Sum("units"), borrowed=Sum("borrowed_units")).order_by()
        return {(row["team_id"], row["flavor_id"]): (row["total"] or 0, row["borrowed"] or 0) for row in rows}

    def borrowed_by_ref(self, refs: list[str]) -> dict[str, int]:
        """``{ref: borrowed units}`` of the rows of ``refs`` in this queryset that borrow any (one query)."""
        if not refs:
            return {}
        return dict(self.filter(ref__in=refs, borrowed_units__gt=0).values_list("ref", "borrowed_units"))


class QuotaHold(models.Model):
    """Units of one flavor held by one admitted workload until it is released, and what they cost.

    At most one unreleased row per ``ref`` (a partial unique constraint), so admitting the
    same workload twice cannot double-reserve, and releasing is a conditional update that
    is a no-op the second time. A workload holds one row per attempt (a preempted one is
    admitted anew); released rows stay, the attempts' money history.

    Money lives here, beside the units: the **open segment** — ``open_units`` GPU units running
    since ``billed_until`` (everything before it is in the ledger, :class:`UsageRecord`), charged
    ``charged_price`` per unit-hour, idle time or not (``open_idle``) — and what the hold commits
    (``committed_units`` at its price until ``started_at`` + ``limit_minutes`` or the month's end).
    So spend, budgets and reports read this table and the ledger (:mod:`quotas.ledger`), whatever
    kind of workload holds the units; the workloads' billing (``workloads.billing``) moves the
    segment, closing it into the ledger before the hold is released.
    """

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="quota_holds")
    ref = models.CharField(max_length=100, help_text='The workload, e.g. "run:42".')
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="quota_holds")
    units = models.PositiveIntegerField()
    units_per_node = models.PositiveIntegerField(default=1)
    priority = models.PositiveSmallIntegerField(choices=Priority.rank_choices(), default=Priority.NORMAL.rank)
    spot = models.BooleanField(default=False)
    description = models.CharField(max_length=200, blank=True)
    #: Units above the team's nominal quota when admitted (or grown): lent by its cohort. A
    #: hold with any is preemptible.
    borrowed_units = models.PositiveIntegerField(default=0, db_default=0)  # raw INSERTs may leave it out
    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)

    # What it commits (ResourceRequest's fields of the same names): the units its kind guarantees,
    # at its price, from its pods' start (``started_at``, None before) for its runtime limit.
    committed_units = models.PositiveIntegerField(default=0, db_default=0)
    limit_minutes = models.PositiveIntegerField(null=True, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+", help_text="Who asked: its cost is reported under them.")
    #: Where placement put the work (None: not placed yet): the price it is quoted at before billing.
    cluster = models.ForeignKey("fleet.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The open segment (class docstring). Billing opens it at the first pods' start, closes and
    # reopens it when the units change, an hour passes or the GPUs turn idle/busy, and closes it
    # before the hold is released; afterwards it keeps the last segment's mark and rate.
    started_at = models.DateTimeField(null=True, blank=True)
    billed_until = models.DateTimeField(null=True, blank=True)
    open_units = models.PositiveIntegerField(default=0, db_default=0)
    open_idle = models.BooleanField(default=False, db_default=False)
    #: The charged rate: the price of a unit-hour its open segment is billed at, read from the price
    #: table when the segment opened and never re-read for it (docs/money.md "What work costs").
    charged_price = models.DecimalField(**MONEY, null=True, blank=True)

    objects = QuotaHoldQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["ref"], condition=Q(released_at__isnull=True),
                                    name="uniq_active_hold_per_ref"),
        ]
        indexes = [models.Index(fields=["team", "flavor"], condition=Q(released_at__isnull=True),
                                name="active_holds_idx"),
                   # A workload's holds, newest first (its money: workloads.billing.attach_segments).
                   models.Index(fields=["ref", "-created_at"], name="holds_by_ref_idx"),
                   # The open segments spend and budgets read, per team.
                   models.Index(fields=["team"], condition=Q(released_at__isnull=True, open_units__gt=0),
                                name="open_segments_idx")]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.ref}: {self.units}\u00d7 {self.flavor.name}"

    @property
    def is_held(self) -> bool:
        return self.released_at is None

    @property
    def preemptible(self) -> bool:
        return self.borrowed_units > 0


class QueuedRequest(models.Model):
    """A workload waiting for quota. Admission order: priority (high first), then FIFO."""

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="queued_requests")
    ref = models.CharField(max_length=100, unique=True)
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="queued_requests")
    units = models.PositiveIntegerField()
    units_per_node = models.PositiveIntegerField(default=1)
    priority = models.PositiveSmallIntegerField(choices=Priority.rank_choices(), default=Priority.NORMAL.rank)
    spot = models.BooleanField(default=False)
    description = models.CharField(max_length=200, blank=True)
    estimated_cost = models.DecimalField(max_digits=14, decimal_places=4, null=True, blank=True,
                                         help_text="Estimated total cost (a known end), for the budget check.")
    cost_per_hour = models.DecimalField(max_digits=14, decimal_places=4, null=True, blank=True,
                                        help_text="What admitting it commits per hour, for the budget check.")
    may_borrow = models.BooleanField(default=True, db_default=True, help_text="False for an endpoint's minimum, which never borrows.")
    # What its hold will carry once admitted (ResourceRequest's fields of the same names).
    committed_units = models.PositiveIntegerField(default=0, db_default=0)
    limit_minutes = models.PositiveIntegerField(null=True, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    #: The admission order; every reader of the queue uses it.
    QUEUE_ORDER = ("-priority", "created_at", "pk")

    class Meta:
        ordering = ["-priority", "created_at", "pk"]
        indexes = [models.Index(fields=["team", "-priority", "created_at"], name="queue_order_idx")]

    def __str__(self) -> str:
        return f"{self.ref}: {self.units}\u00d7 {self.flavor.name} (queued)"


class UsageRecord(models.Model):
    """The real running time of one workload within one hour: the ledger costs are summed from.

    The reconciler bills every running workload each cycle (every few seconds); a row per
    cycle would grow the ledger by ~500,000 rows per workload per month and make every budget
    check (a sum over the month) slower as the month goes on. So there is one row per
    (workload, hour): each billed interval is added to the row of the hour it starts in, which
    then spans ``[start, end)`` = from the first billed instant to the last. ``gpu_hours`` and
    ``cost`` are exact sums; ``units`` is the most that ran at once in that hour.

    An interval is only added when it starts at or after the row's ``end`` (billing moves
    forward), so a replayed reconcile cycle never counts twice (:func:`quotas.ledger.record_usage`).
    """

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="usage_records")
    ref = models.CharField(max_length=100)
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="usage_records")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    hour = models.DateTimeField(help_text="The hour (in the portal's time zone) this row accumulates.")
    start = models.DateTimeField()
    end = models.DateTimeField()
    units = models.PositiveIntegerField()
    spot = models.BooleanField(default=False)
    # Ten decimals: each billed interval is seconds long (see quotas.ledger.LEDGER_PRECISION).
    gpu_hours = models.DecimalField(max_digits=20, decimal_places=10)
    cost = models.DecimalField(max_digits=20, decimal_places=10)
    # The part of gpu_hours (and of cost) whose measured GPU utilization stayed under the idle
    # threshold: allocated, paid for, unused (workloads.idle).
    idle_gpu_hours = models.DecimalField(max_digits=20, decimal_places=10, default=Decimal(0))
    idle_cost = models.DecimalField(max_digits=20, decimal_places=10, default=Decimal(0))
    # The part of gpu_hours that ran on units borrowed from the team's cohort (docs/design.md "Sharing, preemption, clusters"): what
    # fair share remembers (decayed) and usage reports show as ``borrowed_gpu_hours``.
    borrowed_gpu_hours = models.DecimalField(max_digits=20, decimal_places=10, default=Decimal(0),
                                             db_default=Decimal(0))
    # The flavor's units held × hours (gpu_hours is physical: × gpu_fraction too). Apart from gpu_hours, since a
    # flavor's fraction may change (an admin re-cuts a shared GPU) and the hours past must keep their meaning.
    unit_hours = models.DecimalField(max_digits=20, decimal_places=10, default=Decimal(0), db_default=Decimal(0))
    currency = models.CharField(max_length=3, default=_default_currency)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["ref", "hour"], name="uniq_usage_per_hour"),
            models.CheckConstraint(condition=Q(end__gt=models.F("start")), name="usage_end_after_start"),
        ]
        # Covering the cost: every admission sums the team's month (the budget check), and on
        # PostgreSQL that sum is then an index-only scan (SQLite ignores INCLUDE).
        indexes = [models.Index(fields=["team", "start"], include=["cost"], name="usage_team_start_cost_idx")]
        ordering = ["-start"]

    def __str__(self) -> str:
        return f"{self.ref} {format_when(self.start)}: {format_money(self.cost, self.currency)}"


class PreemptionEvent(models.Model):
    """One preemption of a workload: who took back what, and the work it cost (docs/design.md "Sharing, preemption, clusters").

    Written when the victim is chosen. Its lost work is settled once more when the victim's pods are
    gone, and only downwards: a checkpoint saved during the grace is where the next attempt resumes
    (``workloads.cycle.preemption.settle_lost_work``; the rule is :func:`quotas.reclaim.lost_span`).
    The workload's preemption log (API and page) lists these newest first; usage reports sum
    ``lost_gpu_hours`` and ``lost_cost`` as ``preempted_gpu_hours`` and ``preempted_cost``.
    """

    class Cause(models.TextChoices):
        RECLAIM = "reclaim", "Quota reclaimed by its cohort's lender"
        SPOT = "spot", "Spot capacity reclaimed by the provider"
        WITHIN_TEAM = "within_team", "Its team's high-priority work (within-team priority)"

    ref = models.CharField(max_length=100, db_index=True, help_text='The preempted workload, e.g. "run:42".')
    cause = models.CharField(max_length=16, choices=Cause.choices, default=Cause.RECLAIM, db_default=Cause.RECLAIM)
    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="preemptions_suffered")
    #: The team that took its quota back (None: no team did — a spot interruption).
    by_team = models.ForeignKey("portal.Team", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="preemptions_made")
    #: The workload whose admission needed the units (its ref), for the audit trail.
    for_ref = models.CharField(max_length=100, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+", help_text="The victim's owner (usage reports group by user).")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="+")
    units = models.PositiveIntegerField(help_text="Units taken back.")
    reason = models.CharField(max_length=500)
    grace_seconds = models.PositiveIntegerField(default=0)
    lost_gpu_hours = models.DecimalField(max_digits=20, decimal_places=10, default=Decimal(0))
    lost_cost = models.DecimalField(max_digits=20, decimal_places=10, default=Decimal(0))
    currency = models.CharField(max_length=3, default=_default_currency)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["team", "at"], name="preemption_team_at_idx")]

    def __str__(self) -> str:
        return f"{self.ref} preempted at {format_when(self.at)}: {self.units}\u00d7 {self.flavor.name}"

    @property
    def final_when_written(self) -> bool:
        """Whether its lost-work figures are final as the row is written: no grace (a spot interruption's
        pods go at once, an endpoint's burst loses no work). With a grace, a checkpoint written on the
        notice may lower them once the pods are gone (``workloads.cycle.preemption.settle_lost_work``)."""
        return self.grace_seconds == 0
