"""Reservations: GPU time by the calendar (docs/reservations.md).

A :class:`Reservation` is what a team booked — N units of a flavor on a cluster, once or recurring, in a
time zone, with a name and a purpose. The instants it holds, one row per window in UTC, are billing's
(:class:`billing.models.ReservedWindow`, by the reservation's :attr:`~Reservation.ref`): money lives where
the units do, and the invariant (:mod:`reservations.occupancy`) and availability read them there. The policy staff set is :class:`FlavorPolicy` (per flavor) and :class:`TeamPolicy` (a
team's overrides).
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from billing.reserved import ref_of
from core.money import MONEY
from core.zones import validate_time_zone
from fleet.models import Cluster, GpuFlavor
from reservations import policy as rules
from teams.models import Team


class FlavorPolicy(models.Model):
    """What teams may reserve of a flavor (staff; the admin console). Without a row: the defaults."""

    flavor = models.OneToOneField(GpuFlavor, on_delete=models.CASCADE, related_name="reservation_policy")
    reservable_share = models.DecimalField(
        max_digits=3, decimal_places=2, default=rules.DEFAULT.reservable_share,
        validators=[MinValueValidator(Decimal(0)), MaxValueValidator(Decimal(1))],
        help_text="The share of each cluster's units of the flavor that may be reserved at all, 0–1.")
    max_units = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)],
                                            help_text="The most units one booking may hold; empty: the share alone.")
    max_hours = models.PositiveIntegerField(null=True, blank=True, default=rules.DEFAULT.max_hours,
                                            validators=[MinValueValidator(1)],
                                            help_text="The longest window, in hours; empty: any length.")
    max_days_ahead = models.PositiveIntegerField(default=rules.DEFAULT.max_days_ahead,
                                                 validators=[MinValueValidator(1), MaxValueValidator(366)],
                                                 help_text="How many days ahead a window may start.")
    weekly_unit_hours = models.PositiveIntegerField(
        null=True, blank=True, help_text="Unit-hours of the flavor a team may hold reserved per week; empty: no cap.")
    needs_approval = models.BooleanField(default=rules.DEFAULT.needs_approval,
                                         help_text="Bookings wait for a staff approval.")

    class Meta:
        verbose_name = "reservation policy of a flavor"
        verbose_name_plural = "reservation policies of flavors"

    def __str__(self) -> str:
        return f"{self.flavor.name}: {self.reservable_share:.0%} reservable"

    def to_policy(self) -> rules.Policy:
        return rules.Policy(**{name: getattr(self, name) for name in rules.policy_fields()})


class TeamPolicy(models.Model):
    """A team's overrides of a flavor's policy: each field set replaces the flavor's."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="reservation_policies")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.CASCADE, related_name="+")
    max_units = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    max_hours = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    max_days_ahead = models.PositiveIntegerField(null=True, blank=True,
                                                 validators=[MinValueValidator(1), MaxValueValidator(366)])
    weekly_unit_hours = models.PositiveIntegerField(null=True, blank=True)
    needs_approval = models.BooleanField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "flavor"], name="one_reservation_policy_per_team_flavor")]
        verbose_name = "reservation policy of a team"
        verbose_name_plural = "reservation policies of teams"

    def __str__(self) -> str:
        return f"{self.team.slug} · {self.flavor.name}"

    def overrides(self) -> dict:
        return {name: getattr(self, name) for name in rules.TEAM_FIELDS}


class ReservationState(models.TextChoices):
    PENDING = "pending", "Pending approval"
    BOOKED = "booked", "Booked"
    DECLINED = "declined", "Declined"
    CANCELLED = "cancelled", "Cancelled"


class Matching(models.TextChoices):
    """What work a booking's windows take (docs/reservations.md "Open or targeted"), as cloud capacity
    reservations say it: ``open`` takes any of its team's work of the flavor (the work that names it first),
    ``targeted`` only work that names it (Slurm's ``--reservation``), and lends its idle units to the rest."""

    OPEN = "open", "Open: any of the team's work of the flavor"
    TARGETED = "targeted", "Targeted: only work that names it"


#: States whose windows hold capacity: a booking waiting for approval holds its slots, so approving it
#: never conflicts.
HOLDING = (ReservationState.PENDING, ReservationState.BOOKED)


class Reservation(models.Model):
    """A booking: ``units`` of ``flavor`` on ``cluster`` for a window told in ``time_zone``, once or by its
    ``recurrence``. Pending (waiting for a staff approval) and booked ones hold their windows; declined and
    cancelled ones have freed them (a cancelled one keeps the windows that had passed)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="reservations")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    name = models.CharField(max_length=60)
    purpose = models.CharField(max_length=300, blank=True)
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="+")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    units = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    time_zone = models.CharField(max_length=64, validators=[validate_time_zone])
    #: The first window, as instants; its wall-clock times in ``time_zone`` are the rule's.
    start = models.DateTimeField()
    end = models.DateTimeField()
    #: ``{"frequency": "daily"|"weekly", "days": ["mon", …], "until": "YYYY-MM-DD"|None, "count": n|None}``
    recurrence = models.JSONField(null=True, blank=True)
    state = models.CharField(max_length=12, choices=ReservationState.choices, default=ReservationState.BOOKED)
    matching = models.CharField(max_length=10, choices=Matching.choices, default=Matching.OPEN,
                                db_default=Matching.OPEN,
                                help_text="Open: any of the team's work of the flavor goes in (work that names it "
                                          "first); targeted: only work that names it.")
    #: The price of a unit-hour when booked (the cluster's price of the flavor): what every window is charged.
    price_per_unit_hour = models.DecimalField(**MONEY)
    price = models.DecimalField(**MONEY)  # all its windows, as booked
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decline_reason = models.CharField(max_length=300, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["start", "id"]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name}"

    @property
    def ref(self) -> str:
        """What its windows and its audit rows name it by: ``reservation:12``."""
        return ref_of(self.pk)



class CalendarFeed(models.Model):
    """A team's iCalendar feed of its reservations: a secret URL (the token is its only credential), so the
    team's calendars show its bookings. Only the token's digest is kept; making a new one replaces it, and
    the old URL stops answering."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="reservation_feed")
    digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.team.slug}'s reservations feed"
