"""The reservations API's bodies (docs/api.md "Reservations"): types checked here, the rest by the service."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from django.conf import settings
from django.http import Http404
from django.utils import timezone
from rest_framework import serializers

import fleet.services as fleet
from core.money import MONEY
from core.zones import zone_or_portals
from fleet.models import GpuFlavor, unknown_flavor
from reservations import services
from reservations import windows as calendar
from reservations.models import Matching, Reservation
from teams.permissions import get_membership


class LocalDateTimeField(serializers.DateTimeField):
    """A date-time that stays as written: a naive one is a wall-clock time of the booking's time zone (the
    serializer reads it there), one with an offset an instant. DRF would read a naive one in the portal's zone."""

    def enforce_timezone(self, value):
        return value if timezone.is_naive(value) else super().enforce_timezone(value)


def wall_clock(value: datetime, zone: ZoneInfo) -> datetime:
    """A naive wall-clock time in ``zone``: a time with an offset is first converted to ``zone``."""
    if timezone.is_aware(value):
        return value.astimezone(zone).replace(tzinfo=None)
    return value


class RecurrenceSerializer(serializers.Serializer):
    frequency = serializers.ChoiceField(choices=calendar.FREQUENCIES)
    days = serializers.ListField(child=serializers.ChoiceField(choices=calendar.DAYS), required=False, default=list,
                                 help_text="weekly: the days, e.g. [\"mon\", \"thu\"]; default: the first window's day")
    until = serializers.DateField(required=False, allow_null=True, default=None,
                                  help_text="The last local date a window may start on.")
    count = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1,
                                     max_value=calendar.MOST_WINDOWS, help_text="Windows in all, the first included.")

    def validate(self, data):
        if (data["until"] is None) == (data["count"] is None):
            raise serializers.ValidationError("give either until or count")
        if data["frequency"] == calendar.DAILY and data["days"]:
            raise serializers.ValidationError({"days": ["days are for a weekly rule"]})
        return data

    def recurrence(self) -> calendar.Recurrence:
        data = self.validated_data
        return calendar.Recurrence(data["frequency"], tuple(sorted({calendar.DAYS.index(d) for d in data["days"]})),
                                   data["until"], data["count"])


class TeamFlavorCluster:
    """The checks of a body's ``team`` (the caller's: another team's is a 404, as if it did not exist, docs/api.md
    "Auth and errors"), ``flavor`` (one that may be requested) and ``cluster`` (a name; none or "any": None)."""

    def validate_team(self, slug):
        membership = get_membership(self.context["request"].user, slug)
        if membership is None:
            raise Http404("No such team.")
        return membership.team

    def validate_flavor(self, name):
        flavor = GpuFlavor.objects.usable().filter(name=name).first()
        if flavor is None:
            raise serializers.ValidationError(unknown_flavor(name))
        return flavor

    def validate_cluster(self, name):
        if name in (None, "", "any"):
            return None
        cluster = fleet.get(name)
        if cluster is None:
            raise serializers.ValidationError(f"unknown cluster {name!r}")
        return cluster


class ReservationCreateSerializer(TeamFlavorCluster, serializers.Serializer):
    team = serializers.SlugField()
    flavor = serializers.CharField(max_length=40)
    cluster = serializers.CharField(max_length=63, required=False, allow_null=True, default=None,
                                    help_text="A cluster's name; none or \"any\": Slipway picks one and says which.")
    units = serializers.IntegerField(min_value=1, max_value=10_000)
    start = LocalDateTimeField(validators=[calendar.validate_bookable],
                               help_text="The first window's start: a local time in time_zone, or one with an offset.")
    end = LocalDateTimeField(validators=[calendar.validate_bookable], help_text="The first window's end, likewise.")
    time_zone = serializers.CharField(max_length=64, required=False, allow_blank=True, default="",
                                      help_text="IANA name; default: the team's time zone.")
    recurrence = RecurrenceSerializer(required=False, allow_null=True, default=None)
    name = serializers.CharField(max_length=60)
    purpose = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    matching = serializers.ChoiceField(choices=Matching.choices, required=False, default=Matching.OPEN,
                                       help_text="open: any of the team's work of the flavor goes in (work that "
                                                 "names it first); targeted: only work that names it "
                                                 "(docs/reservations.md \"Open or targeted\").")

    def validate(self, data):
        try:
            zone = zone_or_portals(data["time_zone"] or data["team"].time_zone)
        except ValueError as exc:
            raise serializers.ValidationError({"time_zone": [str(exc)]}) from None
        data["zone"] = zone
        data["start"], data["end"] = wall_clock(data["start"], zone), wall_clock(data["end"], zone)
        until = calendar.until_refusal(data["start"], data["recurrence"]["until"]) if data["recurrence"] else None
        if until:
            raise serializers.ValidationError({"recurrence": {"until": [until]}})
        return data

    def booking(self) -> services.Booking:
        data = self.validated_data
        recurrence = None
        if data["recurrence"] is not None:
            rule = RecurrenceSerializer(data=self.initial_data["recurrence"])
            rule.is_valid()
            recurrence = rule.recurrence()
        return services.Booking(team=data["team"], flavor=data["flavor"], cluster=data["cluster"], units=data["units"],
                                start=data["start"], end=data["end"], zone=data["zone"], recurrence=recurrence,
                                name=data["name"], purpose=data["purpose"], matching=data["matching"])


class ReservationSerializer(serializers.ModelSerializer):
    """A reservation as the API shows it; ``windows`` are the instants it holds now (UTC)."""

    team = serializers.CharField(source="team.slug")
    flavor = serializers.CharField(source="flavor.name")
    cluster = serializers.CharField(source="cluster.name")
    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    decided_by = serializers.CharField(source="decided_by.username", allow_null=True, default=None)
    windows = serializers.SerializerMethodField()
    currency = serializers.SerializerMethodField()

    class Meta:
        model = Reservation
        fields = ["id", "team", "name", "purpose", "flavor", "cluster", "units", "start", "end", "time_zone",
                  "recurrence", "state", "matching", "price", "price_per_unit_hour", "currency", "windows", "created_by", "created_at",
                  "decided_by", "decided_at", "decline_reason", "cancelled_at"]
        read_only_fields = fields

    def get_currency(self, reservation) -> str:
        return settings.SLIPWAY_CURRENCY

    def get_windows(self, reservation) -> list[dict]:
        return [{"start": w.start, "end": w.end} for w in services.windows_of(reservation)]


class WindowSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()


class BookingPreviewSerializer(serializers.Serializer):
    """A dry run's answer (``POST /reservations/?dry_run=1``): what booking would give now — the cluster it would
    be on, its windows, its price and the state it would start in — checked as a booking is; nothing written."""

    flavor = serializers.SerializerMethodField()
    cluster = serializers.CharField(source="cluster.name")
    units = serializers.IntegerField()
    time_zone = serializers.SerializerMethodField(help_text="the zone its windows' wall-clock times are read in")
    state = serializers.CharField(help_text="booked, or pending when the flavor's policy wants a staff approval")
    windows = WindowSerializer(many=True)
    unit_hours = serializers.DecimalField(max_digits=14, decimal_places=2)
    price_per_unit_hour = serializers.DecimalField(**MONEY)
    price = serializers.DecimalField(**MONEY, help_text="all its windows, as a booking now would be priced")
    currency = serializers.SerializerMethodField()

    def get_currency(self, quote) -> str:
        return settings.SLIPWAY_CURRENCY

    def get_flavor(self, quote) -> str:
        return self.context["booking"].flavor.name

    def get_time_zone(self, quote) -> str:
        return self.context["booking"].zone.key


class DeclineSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=300, help_text="What the team reads.")


class AvailabilityQuerySerializer(TeamFlavorCluster, serializers.Serializer):
    flavor = serializers.CharField(max_length=40)
    cluster = serializers.CharField(max_length=63, required=False, default="", help_text="Default: every cluster.")
    from_ = serializers.DateTimeField(required=False, validators=[calendar.validate_bookable],
                                      help_text="Default: now, at its half hour.")
    to = serializers.DateTimeField(required=False, validators=[calendar.validate_bookable],
                                   help_text="Default: 14 days after from; at most 62 days.")

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")  # a keyword in Python, the parameter's name in the API
        return fields

    def validate(self, data):
        start = data.get("from") or services.slot_floor(timezone.now())
        end = data.get("to") or start + services.DEFAULT_SPAN
        if end <= start:
            raise serializers.ValidationError({"to": ["must be after from"]})
        if end - start > services.LONGEST_SPAN:
            raise serializers.ValidationError({"to": [f"at most {services.LONGEST_SPAN.days} days after from"]})
        return {"flavor": data["flavor"], "cluster": data["cluster"], "start": start, "end": end}


class SlotSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    cluster = serializers.CharField()
    free_units = serializers.IntegerField()


class FeedRequestSerializer(TeamFlavorCluster, serializers.Serializer):
    team = serializers.SlugField()


class FeedSerializer(serializers.Serializer):
    url = serializers.URLField(help_text="The feed's secret URL: add it to a calendar app. Shown only here.")
