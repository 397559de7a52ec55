"""Capacity's tables: team quotas, cohorts, teams' sharing settings and the queue.

Only :func:`quotas.decide.decide` compares usage with limits; these models hold the rows admission
reads (:mod:`quotas.facts`) and writes (:mod:`quotas.admission`). The flavors they count are
:class:`fleet.models.GpuFlavor`; the units admitted work holds, and what they cost, are billing's
(:class:`billing.models.QuotaHold`).
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from core.priority import Priority
from fleet.models import FLAVOR_NAME, GpuFlavor


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
    #: Not admitted before this instant: a failed provisioning's backoff (docs/pools.md); null: any time.
    not_before = models.DateTimeField(null=True, blank=True)
    #: The id of its team's reservation it names (:attr:`quotas.decide.ResourceRequest.for_reservation`): it goes
    #: into that reservation's windows first and waits for them; null: none.
    for_reservation = models.PositiveIntegerField(null=True, blank=True)

    #: The admission order; every reader of the queue uses it.
    QUEUE_ORDER = ("-priority", "created_at", "pk")

    class Meta:
        ordering = ["-priority", "created_at", "pk"]
        indexes = [models.Index(fields=["team", "-priority", "created_at"], name="queue_order_idx")]

    def __str__(self) -> str:
        return f"{self.ref}: {self.units}\u00d7 {self.flavor.name} (queued)"
