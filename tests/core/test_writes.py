"""Writes compiled by the ORM and run together: one statement on PostgreSQL, one each on SQLite, the same rows."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.writes import insert_of, run_together, update_of
from teams.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_an_insert_and_a_conditional_update_write_what_the_orm_would_in_one_round_trip_on_postgresql():
    moved = AuditEvent.objects.create(action=AuditEvent.Action.LOGIN, target="before")
    event = AuditEvent(action="run_submitted", target="run 1 (a)", details={"outcome": "admit", "units": 2})
    writes = [insert_of(event), update_of(AuditEvent.objects.filter(pk=moved.pk, target="before"), target="after")]
    with CaptureQueriesContext(connection) as ctx:
        assert run_together(writes) == [1, 1]
    assert len(ctx.captured_queries) == (1 if connection.vendor == "postgresql" else 2)
    written = AuditEvent.objects.get(action="run_submitted")
    assert (written.target, written.details, written.created_at) == ("run 1 (a)", {"outcome": "admit", "units": 2},
                                                                      event.created_at)
    assert AuditEvent.objects.get(pk=moved.pk).target == "after"


def test_a_conditional_update_that_finds_its_row_moved_counts_zero_and_the_others_are_written():
    moved = AuditEvent.objects.create(action=AuditEvent.Action.LOGIN, target="elsewhere")
    counts = run_together([update_of(AuditEvent.objects.filter(pk=moved.pk, target="before"), target="after"),
                           insert_of(AuditEvent(action=AuditEvent.Action.LOGIN, target="new"))])
    assert counts == [0, 1]
    assert AuditEvent.objects.get(pk=moved.pk).target == "elsewhere"
    assert AuditEvent.objects.filter(target="new").exists()


def test_nothing_to_write_runs_nothing():
    with CaptureQueriesContext(connection) as ctx:
        assert run_together([]) == []
    assert not ctx.captured_queries
