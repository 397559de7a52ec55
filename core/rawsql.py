"""Raw reads: values as the ORM would have given them, and several statements in one round trip.

Raw SQL skips Django's per-field converters (that is why the hot paths use it), and the
drivers differ in what they hand back: psycopg gives aware datetimes and ``Decimal``; SQLite
gives timestamps as naive UTC text and decimal columns as floats (or ints). Every module that
reads rows from ``connection.cursor()`` converts them here: admission, the ledger, billing,
the sandbox's bulk reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal

from django.db import connection


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


#: One statement for :func:`read_together`: SQL with placeholders and its parameters (a tuple or a dict).
Statement = tuple[str, Sequence | dict]


def read_together(statements: Sequence[Statement]) -> list[list[tuple]]:
    """Run ``statements`` in order in the current transaction; each one's rows, in one round trip where possible.

    Why: under a lock every round trip is a share of the lock's time (:mod:`quotas.admission`). On
    PostgreSQL the statements go out together in psycopg's pipeline mode and the server runs them one
    after the other as sent, each a statement of its own — under READ COMMITTED each sees what was
    committed before *it* started, so a read sent behind ``SELECT … FOR NO KEY UPDATE`` still sees
    everything the lock's previous holder committed, exactly as if it had been sent after the lock's
    answer came back. Elsewhere (SQLite, the local default) one after the other. Only for statements
    that return rows (a ``SELECT``, a write with ``RETURNING``); a failing one fails the call, and
    the transaction, as it would alone.
    """
    if connection.vendor != "postgresql" or len(statements) < 2:
        found = []
        with connection.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql, params)
                found.append(cursor.fetchall())
        return found
    connection.ensure_connection()
    cursors = [connection.cursor() for _ in statements]
    try:
        with connection.wrap_database_errors, connection.connection.pipeline():
            for cursor, (sql, params) in zip(cursors, statements, strict=True):
                cursor.execute(sql, params)
        return [cursor.fetchall() for cursor in cursors]
    finally:
        for cursor in cursors:
            cursor.close()
