"""Times on the command line: ``30d``, ``12h`` or ``90m`` as a span from now (``--expires`` ahead, ``--since``
back), anything else passed to the API as it is (an ISO date-time or Unix seconds; the API names a bad one)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_SPAN = re.compile(r"^(\d{1,6})([dhm])$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def span(value: str) -> timedelta | None:
    """``30d`` / ``12h`` / ``90m`` as a timedelta; None for anything else."""
    found = _SPAN.match(value.strip())
    return timedelta(**{_UNITS[found[2]]: int(found[1])}) if found else None


def ahead(value: str | None) -> str | None:
    """A span from now into the future as an ISO date-time, else ``value`` as given."""
    if value is None:
        return None
    delta = span(value)
    return (datetime.now(UTC) + delta).isoformat() if delta is not None else value


def back(value: str | None) -> str | None:
    """A span back from now as an ISO date-time, else ``value`` as given."""
    if value is None:
        return None
    delta = span(value)
    return (datetime.now(UTC) - delta).isoformat() if delta is not None else value
