"""Fast bulk reads and writes for the tick, bypassing the ORM's per-row costs.

A tick touches every live object and pod. Django model instances (signals, descriptors)
and ``bulk_update``'s ``CASE WHEN pk=… THEN …`` expressions cost milliseconds per row, too
slow for 10,000 workloads. So the tick reads rows with ``values_list`` into plain slotted
records, and writes with one parameterised ``executemany`` per table; values are adapted
per column type the way the ORM would (JSON via the field, datetimes via the backend), so
this works on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import connection, models

from core.rawsql import sql_datetime


class Record:
    """A row as a plain object: attributes named like the model's ``attname``s, plus ``pk``."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)
        self.pk = values.get("id")

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes not set yet: JSON columns loaded lazily (see load()).
        raw = self.__dict__.get(f"_raw_{name}", _MISSING)
        if raw is _MISSING:
            raise AttributeError(name)
        value = json.loads(raw) if isinstance(raw, str | bytes) else raw
        self.__dict__[name] = value
        return value

    def __repr__(self) -> str:
        return f"Record({self.__dict__!r})"


_MISSING = object()


def _reader(field: models.Field) -> Callable[[Any], Any] | None:
    """How to turn a raw driver value into the Python value (None: use as is)."""
    if isinstance(field, models.JSONField):
        # SQLite hands back text; psycopg already decodes jsonb.
        return lambda value: json.loads(value) if isinstance(value, str | bytes) else value
    if isinstance(field, models.DateTimeField):
        # SQLite stores naive UTC (Django's driver converter may already parse it); PostgreSQL
        # returns aware datetimes.
        return sql_datetime
    return None


def load(queryset: models.QuerySet, columns: Sequence[str] | None = None, lazy: Sequence[str] = ()) -> list[Record]:
    """Rows of ``queryset`` as :class:`Record` s: the ORM's SQL, run on a raw cursor.

    Skipping the ORM's per-value converter machinery is what makes reading 10,000+ rows per
    tick cheap; the few conversions needed (JSON text, datetime text) are done here. JSON
    columns named in ``lazy`` are decoded on first access only: a quiet workload's status is
    never parsed.
    """
    meta = queryset.model._meta
    names = list(columns or [f.attname for f in meta.concrete_fields])
    readers = [(i, reader) for i, name in enumerate(names)
               if name not in lazy and (reader := _reader(meta.get_field(name))) is not None]
    keys = [f"_raw_{name}" if name in lazy else name for name in names]
    sql, params = queryset.values_list(*names).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    out = []
    for row in rows:
        values = list(row)
        for i, reader in readers:
            values[i] = reader(values[i])
        out.append(Record(**dict(zip(keys, values, strict=True))))
    return out


def new(model: type[models.Model], **values: Any) -> Record:
    """A record of a row to insert, with the model's field defaults filled in."""
    row: dict[str, Any] = {}
    for field in model._meta.concrete_fields:
        # get_default() is "" for text columns without a default, as the ORM would save them.
        row[field.attname] = None if field.primary_key else field.get_default()
    row.update(values)
    return Record(**row)


def _adapter(field: models.Field) -> Callable[[Any], Any]:
    if isinstance(field, models.JSONField):
        return lambda value: field.get_db_prep_save(value, connection)
    if isinstance(field, models.DateTimeField):
        return connection.ops.adapt_datetimefield_value
    return lambda value: value


def _rows(objs: Iterable[Any], fields: Sequence[models.Field], extra: Callable[[Any], list] = lambda o: []):
    adapters = [(field.attname, _adapter(field)) for field in fields]
    return [[adapt(getattr(obj, name)) for name, adapt in adapters] + extra(obj) for obj in objs]


def fast_update(model: type[models.Model], objs: Sequence[Any], field_names: Sequence[str]) -> None:
    """``UPDATE … SET f1=%s, … WHERE pk=%s`` for every object, in one executemany."""
    if not objs:
        return
    meta = model._meta
    fields = [meta.get_field(name) for name in field_names]
    quote = connection.ops.quote_name
    sets = ", ".join(f"{quote(f.column)} = %s" for f in fields)
    # Only quoted identifiers from model metadata are interpolated; every value is a parameter.
    sql = f"UPDATE {quote(meta.db_table)} SET {sets} WHERE {quote(meta.pk.column)} = %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.executemany(sql, _rows(objs, fields, lambda obj: [obj.pk]))


def fast_insert(model: type[models.Model], objs: Sequence[Any]) -> None:
    """``INSERT`` rows without reading back their primary keys (the tick never needs them)."""
    if not objs:
        return
    meta = model._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({placeholders})"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.executemany(sql, _rows(objs, fields))
