"""Training runs.

A :class:`TrainingRun` is what a data scientist asked for (the submitted fields, kept as
submitted) plus what Slipway knows about it (state, reason, timestamps, cost). State moves
only through conditional updates (``filter(pk=…, state=old).update(…)``), so a cancel and a
reconcile racing each other cannot overwrite one another.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q

from jobs.constants import (
    FINAL_STATES,
    REF_PREFIX,
    Priority,
    RunKind,
    RunState,
)


class TrainingRunQuerySet(models.QuerySet):
    def active(self) -> TrainingRunQuerySet:
        return self.exclude(state__in=FINAL_STATES)

    def for_user(self, user) -> TrainingRunQuerySet:
        """Runs of the user's teams (the tenancy boundary)."""
        if not user.is_authenticated:
            return self.none()
        return self.filter(team__memberships__user=user)

    def for_list(self) -> TrainingRunQuerySet:
        """What list pages and the list API need, in a constant number of queries."""
        return self.select_related("team", "flavor", "created_by").order_by("-created_at", "-pk")


class TrainingRun(models.Model):
    team = models.ForeignKey("portal.Team", on_delete=models.PROTECT, related_name="runs")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs")

    # 1. What was submitted (API.md field names).
    name = models.CharField(max_length=40)
    image = models.CharField(max_length=300)
    command = models.JSONField(default=list)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    flavor = models.ForeignKey("quotas.GpuFlavor", on_delete=models.PROTECT, related_name="runs")
    gpus_per_worker = models.PositiveIntegerField(default=1)
    workers = models.PositiveIntegerField(default=1)
    cpu = models.FloatField(null=True, blank=True)
    memory_gb = models.FloatField(null=True, blank=True)
    shm_gb = models.FloatField(null=True, blank=True)
    max_retries = models.PositiveSmallIntegerField(default=2)
    max_runtime_minutes = models.PositiveIntegerField(null=True, blank=True)
    priority = models.CharField(max_length=10, choices=Priority.choices, default=Priority.NORMAL)
    spot = models.BooleanField(default=False)
    volumes = models.JSONField(default=list, blank=True)

    # 2. What Slipway knows.
    state = models.CharField(max_length=12, choices=RunState.choices, default=RunState.QUEUED, db_index=True)
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True, help_text="When the cluster objects were last applied.")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    apply_attempts = models.PositiveSmallIntegerField(default=0)
    # Billing: the ledger covers [started_at, billed_until); billed_units is what ran at the
    # last observation, billed over the next interval.
    billed_until = models.DateTimeField(null=True, blank=True)
    billed_units = models.PositiveIntegerField(default=0)
    # The sum of the run's ledger amounts, as exact (ten decimals, quotas.ledger.LEDGER_PRECISION).
    cost_to_date = models.DecimalField(max_digits=20, decimal_places=10, default=Decimal(0))

    objects = TrainingRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            # "unique among the team's active runs": a finished run's name may be reused.
            models.UniqueConstraint(
                fields=["team", "name"],
                condition=~Q(state__in=["succeeded", "failed", "cancelled"]),
                name="uniq_active_run_name",
            ),
        ]
        indexes = [models.Index(fields=["team", "state"])]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name} (#{self.pk})"

    @property
    def kind(self) -> str:
        return RunKind.JOB if self.workers == 1 else RunKind.PYTORCHJOB

    @property
    def ref(self) -> str:
        """The quota reference of this run ("run:42")."""
        return f"{REF_PREFIX}:{self.pk}"

    @property
    def workload_id(self) -> str:
        """The cluster name and workload label of this run ("run-42")."""
        return f"{REF_PREFIX}-{self.pk}"

    @property
    def cluster_name(self) -> str:
        return self.workload_id

    @property
    def namespace(self) -> str:
        return self.team.namespace

    @property
    def total_units(self) -> int:
        return self.gpus_per_worker * self.workers

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def estimated_cost_per_hour(self) -> Decimal:
        return (self.flavor.price(self.spot) * self.total_units).quantize(Decimal("0.0001"))

    @staticmethod
    def pk_from_ref(ref: str) -> int | None:
        prefix, _, pk = ref.partition(":")
        return int(pk) if prefix == REF_PREFIX and pk.isascii() and pk.isdigit() else None
