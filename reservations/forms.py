"""The calendar page's booking form: the API's fields as a person fills them in (docs/reservations.md)."""

from __future__ import annotations

from datetime import datetime

from django import forms
from django.forms.fields import BaseTemporalField
from django.utils import timezone
from django.utils.dateparse import parse_datetime

import fleet.services as fleet
from core.zones import zone_or_portals
from fleet.models import GpuFlavor
from reservations import windows as calendar
from reservations.models import Matching
from reservations.services import Booking

REPEATS = [("", "Once"), (calendar.DAILY, "Every day"), (calendar.WEEKLY, "Every week on the days below")]
#: Where a service's refusal of a request field shows on this form.
FORM_FIELD = {"recurrence": "repeat"}


class WallClockField(forms.DateTimeField):
    """A date-time as typed: a wall-clock time of the booking's time zone, which the form reads in ``clean``.

    Django's field would read it in the portal's zone (``TIME_ZONE``) and refuse a time that zone skips or repeats
    at a daylight-saving change, though the booking's own zone may have it (and one it skips or repeats is read
    as docs/reservations.md says). A time typed with an offset stays an instant, converted to the booking's zone.
    """

    def to_python(self, value):
        if value in self.empty_values:
            return None
        if isinstance(value, datetime):
            return value
        try:
            parsed = parse_datetime(str(value).strip())
        except ValueError:  # the shape of a date-time, not a real one ("2026-02-30T09:00")
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from None
        # Not ISO 8601: the input formats, as Django's field reads them (naive).
        return parsed or BaseTemporalField.to_python(self, value)


class BookingForm(forms.Form):
    flavor = forms.ChoiceField()
    cluster = forms.ChoiceField(help_text="Any: Slipway picks the cheapest cluster where it fits and says which.")
    units = forms.IntegerField(min_value=1, max_value=10_000)
    start = WallClockField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                           validators=[calendar.validate_bookable], help_text="Wall-clock time in the time zone below.")
    end = WallClockField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                         validators=[calendar.validate_bookable])
    time_zone = forms.CharField(max_length=64, help_text="IANA name, e.g. Europe/Berlin.")
    repeat = forms.ChoiceField(choices=REPEATS, required=False)
    days = forms.MultipleChoiceField(choices=[(d, d.capitalize()) for d in calendar.DAYS], required=False,
                                     widget=forms.CheckboxSelectMultiple)
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}),
                            help_text="The last date a repeated window may start on…")
    count = forms.IntegerField(required=False, min_value=1, max_value=calendar.MOST_WINDOWS,
                               help_text="…or how many windows in all.")
    name = forms.CharField(max_length=60)
    purpose = forms.CharField(max_length=300, required=False)
    matching = forms.ChoiceField(choices=Matching.choices, initial=Matching.OPEN, required=False,
                                 help_text="Targeted: only work that names this booking goes in; your other work "
                                           "borrows its idle units like any other team's.")

    def __init__(self, *args, team, **kwargs):
        super().__init__(*args, **kwargs)
        self.team = team
        self.fields["flavor"].choices = [(f.name, f.name) for f in GpuFlavor.objects.usable().order_by("name")]
        self.fields["cluster"].choices = [("any", "Any"), *((c.name, c.name) for c in fleet.clusters())]

    def clean_time_zone(self):
        try:
            return zone_or_portals(self.cleaned_data["time_zone"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self):
        data = super().clean()
        zone = data.get("time_zone")
        for name in ("start", "end"):
            if zone is not None and data.get(name) is not None and timezone.is_aware(data[name]):
                data[name] = calendar.local(data[name], zone)
        repeat = data.get("repeat")
        if repeat and bool(data.get("until")) == bool(data.get("count")):
            self.add_error("repeat", "a repeated booking ends: give the last date or the number of windows")
        if repeat == calendar.DAILY and data.get("days"):
            self.add_error("days", "days are for a weekly booking")
        until = calendar.until_refusal(data["start"], data.get("until")) if repeat and data.get("start") else None
        if until:
            self.add_error("until", until)
        return data

    def booking(self) -> Booking:
        data = self.cleaned_data
        recurrence = None
        if data.get("repeat"):
            days = tuple(sorted(calendar.DAYS.index(d) for d in data.get("days") or ()))
            recurrence = calendar.Recurrence(data["repeat"], days, data.get("until"), data.get("count"))
        cluster = None if data["cluster"] == "any" else fleet.get(data["cluster"])
        return Booking(team=self.team, flavor=GpuFlavor.objects.get(name=data["flavor"]), cluster=cluster,
                       units=data["units"], start=data["start"], end=data["end"],
                       zone=data["time_zone"], recurrence=recurrence, name=data["name"], purpose=data["purpose"],
                       matching=data.get("matching") or Matching.OPEN)

    def refused(self, errors: dict[str, list[str]]) -> None:
        """Show a service's refusals beside the fields they are about."""
        for field, messages in errors.items():
            for message in messages:
                self.add_error(FORM_FIELD.get(field, field) if FORM_FIELD.get(field, field) in self.fields else None,
                               message)
