"""Writes built by the ORM ahead of running them, and several of them run in one round trip.

Why: a statement run while a lock is held keeps the lock held for its round trip (on a busy
machine 10–15 ms: the backend and the client each wait for a core), and one team's admissions
queue on the team's lock (:mod:`quotas.admission`). The rows that record an admission — the
hold, the workload's state move, its audit row, an endpoint's first scaling event —
depend on the decision but not on each other, so they are written together:

* :func:`insert_of` and :func:`update_of` compile an INSERT of an unsaved instance, or a
  queryset's UPDATE, with the ORM (its field conversions, ``auto_now_add``, JSON adaptation:
  the one rule of how a value is stored), without running it;
* :func:`run_together` runs them: on PostgreSQL as **one** statement (data-modifying
  ``WITH`` clauses, each ``RETURNING 1`` so its rows are counted), elsewhere (SQLite, the
  local default, which has no data-modifying CTEs) one after the other. Either way each
  write's row count comes back, so a conditional update (``filter(state=…)``) still says
  whether it moved anything.

The writes of one call must not depend on each other's effects: PostgreSQL runs the ``WITH``
parts of one statement on one snapshot, none seeing another's rows. Like ``bulk_create`` and
``update()``, they send no model signals (``pre_save``/``post_save``); callers pass only rows
nothing listens for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection
from django.db.models import Model, QuerySet
from django.db.models.sql import InsertQuery, UpdateQuery


@dataclass(frozen=True)
class Write:
    """One compiled INSERT or UPDATE: SQL with ``%s`` placeholders and its parameters (no RETURNING)."""

    sql: str
    params: tuple


def insert_of(obj: Model) -> Write:
    """The INSERT that ``obj.save()`` would run for the unsaved ``obj`` (its ``auto_now_add`` fields set now)."""
    meta = obj._meta
    fields = [f for f in meta.local_concrete_fields if f is not meta.auto_field and not f.generated]
    query = InsertQuery(type(obj))
    query.insert_values(fields, [obj])
    ((sql, params),) = query.get_compiler(connection=connection).as_sql()
    return Write(sql, tuple(params))


def update_of(queryset: QuerySet, **values) -> Write:
    """The UPDATE that ``queryset.update(**values)`` would run (plain values; its filter is the condition)."""
    query = queryset.query.chain(UpdateQuery)
    query.add_update_values(values)
    sql, params = query.get_compiler(connection=connection).as_sql()
    return Write(sql, tuple(params))


def run_together(writes: Sequence[Write]) -> list[int]:
    """Run ``writes`` in the current transaction, in one round trip where the database allows; their row counts.

    PostgreSQL: ``WITH w0 AS (… RETURNING 1), w1 AS (…) SELECT (SELECT count(*) FROM w0), …`` —
    every part runs to completion once, on one snapshot. Elsewhere, or for a single write, one
    statement each, in order.
    """
    if not writes:
        return []
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql" or len(writes) == 1:
            counts = []
            for write in writes:
                cursor.execute(write.sql, write.params)
                counts.append(cursor.rowcount)
            return counts
        parts = ", ".join(f"w{n} AS ({write.sql} RETURNING 1)" for n, write in enumerate(writes))
        counts_sql = ", ".join(f"(SELECT count(*) FROM w{n})" for n in range(len(writes)))  # noqa: S608 - names only
        cursor.execute(f"WITH {parts} SELECT {counts_sql}",  # ORM-compiled SQL only, values as parameters
                       tuple(param for write in writes for param in write.params))
        return [int(count) for count in cursor.fetchone()]
