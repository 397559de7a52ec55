"""Time zones by their IANA names (``Europe/Berlin``): the one check of a name, for models, forms and the API."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.core.exceptions import ValidationError


def zone_named(name: str) -> ZoneInfo:
    """The zone ``name``; ``ValueError`` saying what is wrong when there is none (tzdata names the zones)."""
    if not name or name != name.strip() or name.startswith("/") or ".." in name:
        raise ValueError(f"unknown time zone {name!r}: an IANA name such as Europe/Berlin")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}: an IANA name such as Europe/Berlin") from None


def validate_time_zone(name: str) -> None:
    """A model field's validator: an empty name passes (the portal's zone), another must name a zone."""
    if name:
        try:
            zone_named(name)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None


def zone_or_portals(name: str) -> ZoneInfo:
    """The zone ``name``, or the portal's (``TIME_ZONE``) when it is empty."""
    return zone_named(name or settings.TIME_ZONE)
