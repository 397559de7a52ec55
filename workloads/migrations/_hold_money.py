"""The data move of issue 48's "money state where money lives", shared by each kind app's migration.

Billing's open segment (``billed_until``, ``open_units``, ``open_idle``, ``charged_price``) moved
from the kinds' tables to the quota hold (:class:`billing.models.QuotaHold`), with what a hold now
carries for commitments and reports (``committed_units``, ``limit_minutes``, ``started_at``,
``user``, ``cluster``). :func:`move_segments` gives each kind's migration its forward and backward
step, with historical models only (``apps.get_model``), so it runs against the schema of its
migration, never today's models.

Forward, per workload row:

* its held hold (at most one) takes the open segment and the commitment facts — the units of its
  kind's committing columns, its runtime limit, its attempt's start (what the limit counts from);
* work that has ended (neither queued nor holding) keeps its last charged rate on its newest hold,
  which one is created (released, at its end) for billed work that never had a hold (the demo's
  history, billed after the fact); queued work shows a quote again, as it did;
* a queue entry takes what its hold will carry.

Backward, the kinds' columns are filled from the hold whose money the workload shows
(``workloads.models.Workload.segment``'s rule). ``tests/workloads/test_one_table_migration.py`` runs both
on a seeded database and compares every figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable

BATCH = 500


def move_segments(app_label: str, model_name: str, prefix: str, active_states: tuple[str, ...],
                  committed: tuple[str, ...] = (), limit: str | None = None) -> tuple[Callable, Callable]:
    """``(forward, backward)`` for ``migrations.RunPython``: the kind ``app_label.model_name`` whose refs
    are ``prefix:<pk>``, queued or holding quota in ``active_states`` (written out in the migration:
    historical models carry no class constants), committing the product of its ``committed`` columns
    until its ``limit`` column."""
    active = set(active_states)

    def forward(apps, schema_editor) -> None:
        model = apps.get_model(app_label, model_name)
        hold_model = apps.get_model("quotas", "QuotaHold")
        queued_model = apps.get_model("quotas", "QueuedRequest")
        for rows in _batches(model.objects.order_by("pk")):
            refs = [f"{prefix}:{row.pk}" for row in rows]
            holds = _holds_by_ref(hold_model, refs)
            queued = {entry.ref: entry for entry in queued_model.objects.filter(ref__in=refs)}
            for row, ref in zip(rows, refs, strict=True):
                units = math.prod(int(getattr(row, column) or 0) for column in committed) if committed else 0
                minutes = getattr(row, limit) if limit else None
                mine = holds.get(ref, [])
                held = next((hold for hold in mine if hold.released_at is None), None)
                if held is not None:
                    _set(held, billed_until=row.billed_until, open_units=row.open_units, open_idle=row.open_idle,
                         charged_price=row.charged_price, cluster_id=row.cluster_id, user_id=row.created_by_id,
                         committed_units=units, limit_minutes=minutes, started_at=_attempt_started(row))
                elif row.charged_price is not None and row.state not in active:
                    last = mine[0] if mine else _released_hold(hold_model, row, ref, units)
                    _set(last, billed_until=row.billed_until, charged_price=row.charged_price, open_units=0,
                         cluster_id=last.cluster_id or row.cluster_id, user_id=row.created_by_id)
                if ref in queued:
                    _set(queued[ref], committed_units=units, limit_minutes=minutes, user_id=row.created_by_id)

    def backward(apps, schema_editor) -> None:
        model = apps.get_model(app_label, model_name)
        hold_model = apps.get_model("quotas", "QuotaHold")
        for rows in _batches(model.objects.order_by("pk")):
            refs = [f"{prefix}:{row.pk}" for row in rows]
            holds = _holds_by_ref(hold_model, refs)
            for row, ref in zip(rows, refs, strict=True):
                mine = holds.get(ref, [])
                shown = next((hold for hold in mine if hold.released_at is None), None)
                if shown is None and mine and row.state not in active:
                    shown = mine[0]
                if shown is not None:
                    model.objects.filter(pk=row.pk).update(
                        billed_until=shown.billed_until, open_units=shown.open_units, open_idle=shown.open_idle,
                        charged_price=shown.charged_price)

    return forward, backward


def _attempt_started(row):
    """When the row's current attempt's pods started (``Workload.attempt_started``'s rule): what billing
    records on the hold it holds, and commitments count its runtime limit from."""
    if row.attempt_started_at is not None:
        return row.attempt_started_at
    return row.started_at if row.attempt == 1 else None


def _batches(queryset):
    batch = []
    for row in queryset.iterator(chunk_size=BATCH):
        batch.append(row)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _holds_by_ref(hold_model, refs: list[str]) -> dict[str, list]:
    """The holds of ``refs``, newest first each."""
    found: dict[str, list] = {}
    for hold in hold_model.objects.filter(ref__in=refs).order_by("ref", "-created_at", "-pk"):
        found.setdefault(hold.ref, []).append(hold)
    return found


def _released_hold(hold_model, row, ref: str, units: int):
    """A released hold for billed work that never had one: the units it ran with, from its start to its end."""
    start = row.started_at or row.created_at
    hold = hold_model.objects.create(team_id=row.team_id, ref=ref, flavor_id=row.flavor_id, units=max(units, 1),
                                     spot=row.spot, description=row.name[:200],
                                     released_at=row.finished_at or row.billed_until or start)
    hold_model.objects.filter(pk=hold.pk).update(created_at=start)
    return hold


def _set(obj, **values) -> None:
    type(obj).objects.filter(pk=obj.pk).update(**values)
    for name, value in values.items():
        setattr(obj, name, value)
