"""Raw cursor values read as the ORM would give them, whatever the driver handed back."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from core.rawsql import read_together, sql_datetime, sql_decimal
from tests.roundtrips import round_trips


def test_sqlite_text_timestamps_read_as_aware_utc_and_aware_ones_stay():
    assert sql_datetime("2026-11-23 14:05:00.250000") == datetime(2026, 11, 23, 14, 5, 0, 250000, tzinfo=UTC)
    aware = datetime(2026, 11, 23, 14, 5, tzinfo=UTC)
    assert sql_datetime(aware) is aware
    assert sql_datetime(datetime(2026, 11, 23, 14, 5)) == aware  # naive: UTC, as Django stores it
    assert sql_datetime(None) is None


def test_floats_read_as_the_decimal_they_print_as_and_decimals_stay():
    assert sql_decimal(0.1) == Decimal("0.1")  # not 0.1000000000000000055511151231257827…
    assert sql_decimal(3) == Decimal(3)
    amount = Decimal("1.2345")
    assert sql_decimal(amount) is amount
    assert sql_decimal(None) is None


@pytest.mark.django_db
def test_statements_read_together_answer_in_order_in_one_round_trip_on_postgresql():
    statements = [("SELECT %s + 1", (1,)), ("SELECT %(word)s", {"word": "two"}), ("SELECT 3 WHERE false", ())]
    read_together([("SELECT 0", ())])  # the transaction begun, as it is where the product reads together
    with round_trips() as trips, CaptureQueriesContext(connection) as ctx:
        assert read_together(statements) == [[(2,)], [("two",)], []]
    assert len(ctx.captured_queries) == 3  # each its own statement, as Django logs them
    assert trips.count == (1 if connection.vendor == "postgresql" else 3)


@pytest.mark.django_db
def test_a_failing_statement_read_together_fails_the_call_as_a_database_error():
    with pytest.raises(DatabaseError), transaction.atomic():
        read_together([("SELECT 1", ()), ("SELECT * FROM no_such_table", ()), ("SELECT 2", ())])
    assert read_together([("SELECT 4", ())]) == [[(4,)]]  # the connection is usable again
