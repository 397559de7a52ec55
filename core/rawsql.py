"""Values read from a raw cursor, as the ORM would have given them: one conversion for every raw query.

Raw SQL skips Django's per-field converters (that is why the hot paths use it), and the
drivers differ in what they hand back: psycopg gives aware datetimes and ``Decimal``; SQLite
gives timestamps as naive UTC text and decimal columns as floats (or ints). Every module that
reads rows from ``connection.cursor()`` converts them here: admission, the ledger, billing,
the sandbox's bulk reads.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal


def sql_datetime(value) -> datetime | None:
    """An aware datetime from a raw timestamp column (None stays None)."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def sql_decimal(value) -> Decimal | None:
    """A ``Decimal`` from a raw decimal column (None stays None); through ``str`` so a float keeps its digits."""
    if value is None or isinstance(value, Decimal):
        return value
    return Decimal(str(value))
