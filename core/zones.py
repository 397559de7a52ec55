"""Time zones by their IANA names (``Europe/Berlin``): the one check of a name, for models, forms and the API."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.core.exceptions import ValidationError

#: What an IANA name looks like: parts of letters, digits, ``_``, ``-`` and ``+`` (``Etc/GMT+5``,
#: ``America/Port-au-Prince``) joined by single slashes. ``ZoneInfo`` reads a name as a path under tzdata, so a
#: name outside this shape (``..``, ``Europe/``, a NUL byte, ``zone.tab``) is refused before it is looked up.
NAME = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")


def zone_named(name: str) -> ZoneInfo:
    """The zone ``name``; ``ValueError`` saying what is wrong when there is none (tzdata names the zones)."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"unknown time zone {name!r}: an IANA name such as Europe/Berlin")
    try:
        return ZoneInfo(name)
    # A name of the right shape may still be no zone: none of that name (ZoneInfoNotFoundError), tzdata's
    # directories (``Europe``: IsADirectoryError) and names too long for the file system (other OSErrors),
    # or a file of tzdata that is not a zone (ValueError).
    except (ZoneInfoNotFoundError, OSError, ValueError):
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
