"""Billing's tables: prices per cluster, budgets and their history, quota holds with their open
segments, the usage ledger and preemptions' lost work.

Money is ``Decimal`` throughout (prices per hour with four decimals, so a MIG slice priced at 1/7
of a GPU keeps its cents). The tables keep the names they were created with (``quotas_*``): the
models moved here from ``quotas`` with the split of that app (docs/architecture.md "Apps by
domain"); no row moved. A flavor's price of a unit-hour is read here too (:func:`flavor_price`):
the flavor's list price (:class:`fleet.models.GpuFlavor`'s columns) or its cluster's.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q, Sum
from django.utils import timezone

from core.formatting import format_money, format_when
from core.money import MONEY
from core.priority import Priority
from fleet.models import GpuFlavor


def unit_price(price_per_hour: Decimal, spot_price_per_hour: Decimal, spot: bool) -> Decimal:
    """Which of a flavor's two prices a unit-hour costs: the spot one for spot work, else on-demand.

    :func:`billing.models.flavor_price`, for the raw SQL paths that read the two columns without a flavor.
    """
    return spot_price_per_hour if spot else price_per_hour


def flavor_price(flavor: GpuFlavor, spot: bool = False, cluster_id: int | None = None) -> Decimal:
    """The price of one unit-hour of ``flavor`` (:func:`unit_price`): what the ledger's price rule is given.

    On a cluster that prices the flavor itself (:class:`ClusterPrice`), that cluster's price;
    elsewhere, and before work is placed, the flavor's. The overrides are read once per
    flavor instance (the reconcile cycle shares one instance per flavor).
    """
    return priced(flavor, _cluster_prices(flavor).get(cluster_id) if cluster_id is not None else None, spot)


def hold_rate(charged_price: Decimal | None, flavor: GpuFlavor, spot: bool, cluster_id: int | None) -> Decimal:
    """The price a unit-hour of a quota hold is charged — the one rule (docs/money.md "What work costs"):
    its charged rate once billing opened a segment (``charged_price``, never re-read from the price table),
    else today's price of its flavor on the cluster it was placed on (:func:`flavor_price`; not placed: the
    flavor's). :meth:`QuotaHold.rate` asks it of a hold; billing asks it with a workload's flavor, spot and
    cluster (the reconcile cycle reads a hold's money columns alone, and shares one flavor instance, whose
    cluster prices are then read once). The ledger's SQL (``billing.ledger._priced``, SQL so that spend,
    budgets and commitments price every hold in one statement) is this rule too:
    tests/billing/test_hold_rate.py compares the two."""
    if charged_price is not None:
        return charged_price
    return flavor_price(flavor, spot, cluster_id)


def priced(flavor: GpuFlavor, override: tuple[Decimal, Decimal | None] | None, spot: bool) -> Decimal:
    """A unit-hour of ``flavor`` on a cluster whose own ``(price, spot price)`` is ``override`` (None: it
    sets none, the flavor's; a spot price of None: the flavor's spot price) — the one override rule,
    for :func:`flavor_price` and :class:`billing.pricing.PriceBook`."""
    if override is not None:
        price, spot_price = override
        return unit_price(price, spot_price if spot_price is not None else flavor.spot_price_per_hour, spot)
    return unit_price(flavor.price_per_hour, flavor.spot_price_per_hour, spot)


def _cluster_prices(flavor: GpuFlavor) -> dict[int, tuple[Decimal, Decimal | None]]:
    """``{cluster id: (price, spot price)}`` of ``flavor``'s cluster prices, kept on the instance once read."""
    cache = flavor.__dict__.get("_cluster_price_cache")
    if cache is None:
        cache = flavor.__dict__["_cluster_price_cache"] = {
            cluster_id: (price, spot_price) for cluster_id, price, spot_price in
            ClusterPrice.objects.filter(flavor_id=flavor.pk).values_list("cluster_id", "price_per_hour",
                                                                        "spot_price_per_hour")}
    return cache


def _default_currency() -> str:
    return settings.SLIPWAY_CURRENCY



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
        db_table = "quotas_clusterprice"  # its name since it was created in quotas (module docstring)
        constraints = [models.UniqueConstraint(fields=["cluster", "flavor"], name="uniq_cluster_price")]
        ordering = ["cluster__name", "flavor__name"]

    def __str__(self) -> str:
        return f"{self.flavor} on {self.cluster}: {self.price_per_hour}/h"


class TeamBudget(models.Model):
    """A team's monthly spending limit. Without one, spending is unlimited.

    A budget is in ``SLIPWAY_CURRENCY``, as every figure it is compared with (spend, committed money,
    prices) is: what shows and decides it reads the setting, never ``currency``. That column records the
    currency the limit was set in — the setting's, written by ``quotas.services.set_team_budget``; a row
    from before, when staff could type another, is reported by the system check ``slipway.W001``
    (:mod:`billing.checks`, docs/money.md "A budget's currency") until saved again.
    """

    team = models.OneToOneField("portal.Team", on_delete=models.CASCADE, related_name="budget")
    monthly_limit = models.DecimalField(**MONEY, validators=[MinValueValidator(Decimal(0))])
    currency = models.CharField(max_length=3, default=_default_currency, editable=False,
                                help_text="The currency the limit was set in: SLIPWAY_CURRENCY's.")
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
        db_table = "quotas_teambudget"  # its name since it was created in quotas (module docstring)
        ordering = ["team__slug"]

    def __str__(self) -> str:
        return f"{self.team.slug}: {self.monthly_limit} {settings.SLIPWAY_CURRENCY}/month"


class BudgetMonthQuerySet(models.QuerySet):
    def record(self, team, budget: TeamBudget | None, month) -> BudgetMonth:
        """Record ``budget`` (None: removed) as ``team``'s budget of ``month`` (a date; its first day).

        Called whenever the budget changes: the month's row holds the last budget set in it.
        """
        row, _ = self.update_or_create(team=team, month=month, defaults={
            "monthly_limit": budget.monthly_limit if budget else None,
            "currency": settings.SLIPWAY_CURRENCY})  # a budget's (TeamBudget), the spend's
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
        db_table = "quotas_budgetmonth"  # its name since it was created in quotas (module docstring)
        ordering = ["team__slug", "-month"]
        constraints = [models.UniqueConstraint(fields=["team", "month"], name="quotas_budget_month_unique")]

    def __str__(self) -> str:
        limit = "none" if self.monthly_limit is None else f"{self.monthly_limit} {self.currency}"
        return f"{self.team.slug} {self.month:%Y-%m}: {limit}"


class QuotaHoldQuerySet(models.QuerySet):
    def held(self) -> QuotaHoldQuerySet:
        """Not released: the units the team holds now."""
        return self.filter(released_at__isnull=True)

    def on_quota(self) -> QuotaHoldQuerySet:
        """Held on the team's quota: not its work inside its own reserved window, which holds the window's
        units on top of the quota (another team's work lent a window's idle units holds its own quota)."""
        return self.held().exclude(window__isnull=False, lent=False)

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
    So spend, budgets and reports read this table and the ledger (:mod:`billing.ledger`), whatever
    kind of workload holds the units; the workloads' billing (``billing.segments``) moves the
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
    #: The reserved window whose units the hold runs on (docs/reservations.md "Inside the window"): its own
    #: team's work there holds them on top of its nominal quota; ``lent`` marks another team's work on them
    #: while they are idle, which the holder takes back when it needs them. None: the team's quota alone.
    window = models.ForeignKey("billing.ReservedWindow", null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="holds")
    lent = models.BooleanField(default=False, db_default=False)

    objects = QuotaHoldQuerySet.as_manager()

    class Meta:
        db_table = "quotas_quotahold"  # its name since it was created in quotas (module docstring)
        constraints = [
            models.UniqueConstraint(fields=["ref"], condition=Q(released_at__isnull=True),
                                    name="uniq_active_hold_per_ref"),
        ]
        indexes = [models.Index(fields=["team", "flavor"], condition=Q(released_at__isnull=True),
                                name="active_holds_idx"),
                   # A workload's holds, newest first (its money: workloads.models.attach_segments).
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

    def rate(self) -> Decimal:
        """What a unit-hour of its units is charged (:func:`hold_rate`): the money its open segment and
        its commitment are counted at."""
        return hold_rate(self.charged_price, self.flavor, self.spot, self.cluster_id)


class UsageRecord(models.Model):
    """The real running time of one workload within one hour: the ledger costs are summed from.

    The reconciler bills every running workload each cycle (every few seconds); a row per
    cycle would grow the ledger by ~500,000 rows per workload per month and make every budget
    check (a sum over the month) slower as the month goes on. So there is one row per
    (workload, hour): each billed interval is added to the row of the hour it starts in, which
    then spans ``[start, end)`` = from the first billed instant to the last. ``gpu_hours`` and
    ``cost`` are exact sums; ``units`` is the most that ran at once in that hour.

    An interval is only added when it starts at or after the row's ``end`` (billing moves
    forward), so a replayed reconcile cycle never counts twice (:func:`billing.ledger.record_usage`).
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
    # Ten decimals: each billed interval is seconds long (see billing.ledger.LEDGER_PRECISION).
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
        db_table = "quotas_usagerecord"  # its name since it was created in quotas (module docstring)
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
        #: An on-demand node drained or lost under a run the cluster cannot restart in place (a TrainJob's
        #: set fails at once on a disrupted pod): it goes back to the queue as a spot run does.
        DISRUPTION = "disruption", "Its on-demand node drained or lost"
        WITHIN_TEAM = "within_team", "Its team's high-priority work (within-team priority)"
        RESERVATION = "reservation", "A reserved window took back its units"

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
        db_table = "quotas_preemptionevent"  # its name since it was created in quotas (module docstring)
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["team", "at"], name="preemption_team_at_idx")]

    def __str__(self) -> str:
        return f"{self.ref} preempted at {format_when(self.at)}: {self.units}\u00d7 {self.flavor.name}"

    @property
    def interruption(self) -> bool:
        """Whether the cluster took it (:data:`INTERRUPTIONS`), not a team: no grace, no team to name."""
        return self.cause in INTERRUPTIONS

    @property
    def final_when_written(self) -> bool:
        """Whether its lost-work figures are final as the row is written: no grace (a spot interruption's
        pods go at once, an endpoint's burst loses no work). With a grace, a checkpoint written on the
        notice may lower them once the pods are gone (``workloads.cycle.preemption.settle_lost_work``)."""
        return self.grace_seconds == 0


#: The causes no team is behind: the cluster took the node (a spot reclaim, an on-demand node drained or lost).
#: Such work is "interrupted", not "preempted"; its pods go at once, with no grace to checkpoint in.
INTERRUPTIONS = frozenset({PreemptionEvent.Cause.SPOT, PreemptionEvent.Cause.DISRUPTION})


class ReservedWindow(models.Model):
    """Units of a flavor on a cluster that a reservation holds over ``[start, end)``, and what they commit.

    One row per window of a booking (the ``reservations`` app books and cancels them through
    :mod:`billing.reserved`). Here, beside the quota holds, because money lives where the units do: a
    window commits its units at ``price_per_unit_hour`` — the cluster's price of the flavor when it was
    booked — whether they are used or not, and the month's commitments count the part still ahead
    (:func:`billing.ledger.committed_by_team`). What is held when, per cluster and flavor, is what a
    booking's room is checked against (docs/reservations.md).
    """

    ref = models.CharField(max_length=100, help_text='The booking, e.g. "reservation:12".')
    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="reserved_windows")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="+")
    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.PROTECT, related_name="+")
    units = models.PositiveIntegerField()
    start = models.DateTimeField()
    end = models.DateTimeField()
    price_per_unit_hour = models.DecimalField(**MONEY)
    #: Whether it acts on the queue and the cluster (docs/reservations.md "Inside the window"): a booking waiting for
    #: staff's approval holds its windows on the calendar and in the budget, but admits nothing, keeps nothing
    #: from other work and bills nothing until it is approved.
    confirmed = models.BooleanField(default=True, db_default=True)
    #: Only work that names its reservation goes in (a targeted booking, docs/reservations.md "Open or targeted"):
    #: the holder's other work is kept off it and lent its idle units as any other team's.
    targeted = models.BooleanField(default=False, db_default=False)
    #: Up to when the window's use is billed (None: from its start; billing.reserved.bill): what ran on its
    #: units, in unit-hours — the holder's own work, other teams' work lent its idle units — and what stayed idle.
    billed_until = models.DateTimeField(null=True, blank=True)
    used_unit_hours = models.DecimalField(max_digits=20, decimal_places=10, default=Decimal(0), db_default=Decimal(0))
    lent_unit_hours = models.DecimalField(max_digits=20, decimal_places=10, default=Decimal(0), db_default=Decimal(0))
    idle_unit_hours = models.DecimalField(max_digits=20, decimal_places=10, default=Decimal(0), db_default=Decimal(0))

    class Meta:
        ordering = ["start", "id"]
        constraints = [models.CheckConstraint(condition=Q(end__gt=models.F("start")), name="reserved_window_ends_after_start")]
        indexes = [
            # The room of a booking and availability: a cluster's flavor by time.
            models.Index(fields=["cluster", "flavor", "end"], name="reserved_by_cluster_idx"),
            # Commitments and the weekly cap: a team's windows by time.
            models.Index(fields=["team", "end"], name="reserved_by_team_idx"),
            models.Index(fields=["ref"], name="reserved_by_ref_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.ref}: {self.units}\u00d7 {self.flavor.name} {format_when(self.start)}–{format_when(self.end)}"


class PoolReading(models.Model):
    """An elastic pool's last reading for idle pool capacity (:mod:`billing.pool_idle`): when, and how many units
    its ready nodes had free then. The mark the next reading integrates from, moved by a conditional update on
    ``at``, so two cycles never count the same stretch twice."""

    pool = models.OneToOneField("fleet.NodePool", on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()
    idle_units = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"pool {self.pool_id} at {format_when(self.at)}: {self.idle_units} idle"


class PoolIdleHour(models.Model):
    """Idle pool capacity of one cluster's flavor in one hour: units on its elastic pool's ready nodes that no pod
    used, × seconds (:mod:`billing.pool_idle`). Nobody's bill: priced when read, at the cluster's price of the
    flavor (:mod:`billing.pricing`), and shown to staff only. By cluster and flavor rather than by pool, so the
    history outlives a pool staff remove."""

    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.CASCADE, related_name="+")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="+")
    hour = models.DateTimeField(help_text="The hour (in the portal's time zone), as the ledger's rows.")
    unit_seconds = models.DecimalField(max_digits=20, decimal_places=3, default=Decimal(0))

    class Meta:
        ordering = ["hour"]
        constraints = [models.UniqueConstraint(fields=["cluster", "flavor", "hour"], name="one_pool_idle_row_per_hour")]
        indexes = [models.Index(fields=["hour"], name="pool_idle_by_hour_idx")]

    def __str__(self) -> str:
        return f"{self.flavor.name} on cluster {self.cluster_id} {format_when(self.hour)}: {self.unit_seconds} unit-s"
