"""Raw cursor values read as the ORM would give them, whatever the driver handed back."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from core.rawsql import sql_datetime, sql_decimal


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
