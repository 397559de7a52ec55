"""Serializers of the quotas API: flavors, a team's usage, and the cost report's query."""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.formatting import MONEY_ROUNDING
from quotas.ledger import month_start
from quotas.models import GpuFlavor

GROUP_BY = ("day", "flavor", "user", "workload")


class FlavorSerializer(serializers.ModelSerializer):
    mig_profile = serializers.SerializerMethodField()
    gpu_fraction = serializers.FloatField()
    price_per_hour = serializers.DecimalField(max_digits=12, decimal_places=4)
    spot_price_per_hour = serializers.DecimalField(max_digits=12, decimal_places=4)
    currency = serializers.SerializerMethodField()

    class Meta:
        model = GpuFlavor
        fields = ["name", "resource_name", "gpu_model", "mig_profile", "gpu_memory_gb", "gpu_fraction",
                  "max_units_per_node", "price_per_hour", "spot_price_per_hour", "currency", "description"]

    def get_mig_profile(self, flavor: GpuFlavor) -> str | None:
        return flavor.mig_profile or None

    def get_currency(self, flavor: GpuFlavor) -> str:
        return settings.SLIPWAY_CURRENCY


class QuotaUsageSerializer(serializers.Serializer):
    flavor = serializers.CharField()
    limit = serializers.IntegerField()
    in_use = serializers.IntegerField()
    queued = serializers.IntegerField()
    free = serializers.IntegerField()
    borrowed = serializers.IntegerField(help_text="Units in use above the limit, lent by the team's cohort.")
    borrowable = serializers.IntegerField(help_text="What the team's cohort could lend it now (0 outside a cohort).")


class BudgetSerializer(serializers.Serializer):
    monthly_limit = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING, allow_null=True)
    spent_month = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING)
    currency = serializers.CharField()
    alert_threshold_pct = serializers.IntegerField(allow_null=True)
    alert = serializers.BooleanField(help_text="The month's spend crossed the alert threshold.")
    committed = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING,
                                         help_text="Estimated cost still to come this month from admitted work: "
                                                   "to its runtime limit, or without one to the month's end.")
    burn_per_hour = serializers.DecimalField(max_digits=12, decimal_places=4, help_text="At what runs now.")
    projected_month_end = serializers.DecimalField(max_digits=14, decimal_places=2, rounding=MONEY_ROUNDING)
    runs_out_at = serializers.DateTimeField(allow_null=True)


class TeamUsageSerializer(serializers.Serializer):
    quotas = QuotaUsageSerializer(many=True)
    budget = BudgetSerializer()


class UsageRowSerializer(serializers.Serializer):
    group = serializers.CharField(help_text="The day, flavor name, username, team slug or workload ref (run:13).")
    # By workload only (absent otherwise): what the workload is.
    name = serializers.CharField(required=False, help_text="By workload: its name.")
    kind = serializers.CharField(required=False, help_text="By workload: run or endpoint.")
    team = serializers.CharField(required=False, help_text="By workload: its team's slug.")
    user = serializers.CharField(required=False, help_text="By workload: who started it.")
    flavor = serializers.CharField(required=False, help_text="By workload: its GPU flavor.")
    gpu_hours = serializers.DecimalField(max_digits=14, decimal_places=4)
    # Money in cents, rounded as everywhere people read it (core.formatting).
    cost = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING)
    idle_gpu_hours = serializers.DecimalField(
        max_digits=14, decimal_places=4, help_text="The part of gpu_hours whose GPU utilization stayed under the idle threshold.")
    idle_cost = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING,
                                        help_text="What the idle GPU-hours cost.")
    borrowed_gpu_hours = serializers.DecimalField(
        max_digits=14, decimal_places=4,
        help_text="The part of gpu_hours that ran on units borrowed from the team's cohort.")
    preempted_gpu_hours = serializers.DecimalField(
        max_digits=14, decimal_places=4,
        help_text="GPU-hours of work lost to preemption in the period (since the last checkpoint or the start).")
    preempted_cost = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING,
                                             help_text="What the work lost to preemption had cost.")
    currency = serializers.CharField()


class UsageReportPageSerializer(serializers.Serializer):
    """A page of the cost report (the schema of ``GET /usage/``'s JSON body)."""

    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = UsageRowSerializer(many=True)


#: Outside these years a bound is moved to the nearer one (no usage lies there): far enough from
#: the calendar's ends that "to the end of the day" and time zones still fit in a datetime
#: (9999-12-31 + 1 day overflows, and so does 0001-01-01T00:00+05:00 in UTC).
MIN_YEAR, MAX_YEAR = 1970, 9998


def _moment(value, end: bool) -> datetime:
    """A date means its whole day: ``since`` from its midnight, ``until`` to the next midnight."""
    if isinstance(value, datetime):
        # In UTC: Python accepts offsets up to ±23:59, PostgreSQL only up to ±15:59.
        return value.astimezone(UTC) if timezone.is_aware(value) else timezone.make_aware(value)
    moment = timezone.make_aware(datetime.combine(value, time.min))
    return moment + timezone.timedelta(days=1) if end else moment


#: What ``since`` and ``until`` accept, for the OpenAPI schema: an RFC 3339 full-date or date-time.
DATE_OR_DATE_TIME = {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}]}


@extend_schema_field(DATE_OR_DATE_TIME)
class DateOrDateTimeField(serializers.Field):
    """An ISO date (``2026-05-01``) or date-time (``2026-05-01T12:00:00Z``, RFC 3339's lower-case too)."""

    def to_internal_value(self, data):
        text = str(data)
        # RFC 3339 allows "t" and "z" in lower case; Python's parser only the upper.
        text = text[:10] + text[10:].upper() if len(text) > 10 else text
        try:
            value = datetime.fromisoformat(text) if "T" in text or " " in text else date.fromisoformat(text)
        except ValueError:
            raise serializers.ValidationError("Use an ISO date (2026-05-01) or date-time.") from None
        if value.year < MIN_YEAR:
            return date(MIN_YEAR, 1, 1)
        if value.year > MAX_YEAR:
            return date(MAX_YEAR, 12, 31)
        return value


class UsageQuerySerializer(serializers.Serializer):
    team = serializers.SlugField(required=False)
    since = DateOrDateTimeField(required=False)
    until = DateOrDateTimeField(required=False)
    group_by = serializers.ChoiceField(choices=GROUP_BY, default="day")
    # Read by the view itself: the project turns DRF's URL format override off.
    format = serializers.ChoiceField(choices=("json", "csv"), default="json")

    def validate(self, attrs):
        attrs["since"] = _moment(attrs["since"], end=False) if "since" in attrs else month_start()
        attrs["until"] = _moment(attrs["until"], end=True) if "until" in attrs else timezone.now()
        if attrs["until"] <= attrs["since"]:
            raise serializers.ValidationError({"until": ["Must be after since."]})
        return attrs
