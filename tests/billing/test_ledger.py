"""The usage ledger: one row per workload and hour, exact sums, replays never charged twice."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from billing.ledger import (
    cost_by_ref,
    month_start,
    record_usage,
    ref_prefix,
    spent_month,
    usage_hour,
    usage_rows,
)
from billing.models import PreemptionEvent, QuotaHold, UsageRecord, flavor_price

HOUR = datetime(2026, 11, 10, 9, 0, tzinfo=UTC)
TICK = timedelta(seconds=5)


def bill_ticks(team, ref, flavor, start, ticks, units=1, spot=False, tick=TICK):
    """Bill ``ticks`` contiguous intervals from ``start`` like the reconciler does; the total charged."""
    total = Decimal(0)
    for i in range(ticks):
        total += record_usage(team, ref, flavor, None, start + i * tick, start + (i + 1) * tick, units, spot)
    return total


def test_a_reconciled_hour_is_one_row_and_bills_exactly_the_hour(quota_team, flavors):
    # 720 five-second intervals of an L4 at the spot price (0.32/h): one row, and 0.32 to the cent.
    # (Rounding each interval to 1/100 cent, 0.000444 -> 0.0004, would have billed 0.288.)
    charged = bill_ticks(quota_team, "run:1", "l4", HOUR, 720, spot=True)
    row = UsageRecord.objects.get(ref="run:1")
    assert (row.hour, row.start, row.end) == (HOUR, HOUR, HOUR + timedelta(hours=1))
    assert charged.quantize(Decimal("0.01")) == Decimal("0.32")
    assert abs(row.cost - Decimal("0.32")) < Decimal("0.000001")
    assert abs(row.gpu_hours - Decimal(1)) < Decimal("0.000001")
    assert row.cost == charged


def test_the_next_hour_gets_its_own_row(quota_team, flavors):
    bill_ticks(quota_team, "run:1", "a100-80gb", HOUR + timedelta(minutes=59), 24, units=2)  # 59:00 → 01:00:00
    rows = list(UsageRecord.objects.filter(ref="run:1").order_by("hour"))
    assert [r.hour for r in rows] == [HOUR, HOUR + timedelta(hours=1)]
    assert [r.end - r.start for r in rows] == [timedelta(minutes=1), timedelta(minutes=1)]
    # 2 x A100 at 4.10/h for 2 minutes.
    assert sum(r.cost for r in rows).quantize(Decimal("0.0001")) == Decimal("0.2733")


def test_a_replayed_or_overlapping_interval_is_not_charged(quota_team, flavors):
    first = record_usage(quota_team, "run:1", "a100-80gb", None, HOUR, HOUR + TICK, 1, False)
    assert first > 0
    assert record_usage(quota_team, "run:1", "a100-80gb", None, HOUR, HOUR + TICK, 1, False) == 0
    # The reconciler and a cancel racing from the same billed_until: the second one is ignored.
    assert record_usage(quota_team, "run:1", "a100-80gb", None, HOUR, HOUR + 3 * TICK, 1, False) == 0
    row = UsageRecord.objects.get(ref="run:1")
    assert (row.end, row.cost) == (HOUR + TICK, first)
    # Billing moves on from where the row ends.
    assert record_usage(quota_team, "run:1", "a100-80gb", None, HOUR + TICK, HOUR + 2 * TICK, 1, False) == first
    assert UsageRecord.objects.get(ref="run:1").cost == 2 * first


def test_a_gap_is_not_billed_and_the_row_keeps_the_peak_units(quota_team, flavors):
    record_usage(quota_team, "run:1", "a100-80gb", None, HOUR, HOUR + timedelta(minutes=6), 4, False)
    # Nothing ran for 24 minutes (pods restarting), then 2 units for 30 minutes.
    record_usage(quota_team, "run:1", "a100-80gb", None, HOUR + timedelta(minutes=30), HOUR + timedelta(minutes=60),
                 2, False)
    row = UsageRecord.objects.get(ref="run:1")
    assert (row.start, row.end, row.units) == (HOUR, HOUR + timedelta(hours=1), 4)
    assert row.gpu_hours == Decimal("1.4")  # 4 x 0.1 h + 2 x 0.5 h
    assert row.cost == Decimal("5.74")  # x 4.10


def test_workloads_and_teams_have_separate_rows(quota_team, flavors, other_team):
    bill_ticks(quota_team, "run:1", "l4", HOUR, 3)
    bill_ticks(quota_team, "run:2", "l4", HOUR, 3)
    bill_ticks(other_team, "run:3", "l4", HOUR, 3)
    assert UsageRecord.objects.count() == 3
    totals = cost_by_ref(["run:1", "run:2", "run:3"])
    assert totals["run:1"] == totals["run:2"] == totals["run:3"] > 0


def test_rows_follow_local_hours_so_months_are_cut_where_the_budget_is(quota_team, flavors):
    # India is UTC+05:30: its hours (and its month) begin at :30 UTC.
    with override_settings(TIME_ZONE="Asia/Kolkata"), timezone.override("Asia/Kolkata"):
        month = month_start(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
        assert month == datetime(2026, 11, 30, 18, 30, tzinfo=UTC)
        assert usage_hour(month - timedelta(seconds=1)) == month - timedelta(hours=1)
        bill_ticks(quota_team, "run:1", "a100-80gb", month - timedelta(minutes=1), 24)  # 1 min each side
        rows = list(UsageRecord.objects.filter(ref="run:1").order_by("hour"))
        assert [r.hour for r in rows] == [month - timedelta(hours=1), month]
        in_december = spent_month(quota_team, now=month + timedelta(days=1))
        assert in_december == rows[1].cost and in_december > 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_same_interval_billed_from_two_connections_at_once_is_charged_once(flavors):
    from tests.factories import make_team

    team = make_team("ledger-race")
    barrier = threading.Barrier(8)
    results = []

    def bill():
        try:
            barrier.wait()
            results.append(record_usage(team, "run:9", "a100-80gb", None, HOUR, HOUR + TICK, 1, False))
        finally:
            connection.close()

    threads = [threading.Thread(target=bill) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    charged = [r for r in results if r > 0]
    assert len(results) == 8 and len(charged) == 1
    assert UsageRecord.objects.get(ref="run:9").cost == charged[0]


ODD_REFS = ("run:1", "run:2", "endpoint:3", "ab:c:4", "loose")


def test_the_report_by_kind_groups_by_the_refs_prefix_in_sql_as_in_python(quota_team, flavors):
    """The ledger rows' prefix is taken in SQL (PostgreSQL and SQLite alike) by the rule Python applies to
    open segments (:func:`billing.ledger.ref_prefix`): up to the first colon, a ref without one its own."""
    for ref in ODD_REFS:
        record_usage(quota_team, ref, "l4", None, HOUR, HOUR + timedelta(hours=1), 1, False,
                     idle=ref.startswith("endpoint"))
    rows = usage_rows([quota_team], HOUR, HOUR + timedelta(days=1), "kind", now=HOUR + timedelta(days=1))
    assert {row["group"] for row in rows} == {ref_prefix(ref) for ref in ODD_REFS} == {"run", "endpoint", "ab", "loose"}
    by_kind = {row["group"]: row for row in rows}
    assert by_kind["run"]["cost"] == 2 * by_kind["loose"]["cost"] > 0
    assert by_kind["endpoint"]["idle_cost"] == by_kind["endpoint"]["cost"] > 0 and by_kind["run"]["idle_cost"] == 0


def test_the_report_by_kind_adds_open_segments_and_preemptions_to_their_kinds_row(quota_team, flavors):
    """Each source of a report row reaches its kind's row: the ledger, an open segment (idle here, on the quota
    hold of a kind quotas knows nothing of) and the work a preemption lost (a kind with only that is a row too)."""
    l4 = flavors["l4"]
    record_usage(quota_team, "run:1", "l4", None, HOUR, HOUR + timedelta(hours=1), 1, False)
    QuotaHold.objects.create(team=quota_team, ref="nb:9", flavor=l4, units=1, billed_until=HOUR + timedelta(hours=1),
                             open_units=1, open_idle=True)
    PreemptionEvent.objects.create(ref="run:1", team=quota_team, flavor=l4, units=1, reason="preempted",
                                   lost_gpu_hours=Decimal("0.5"), lost_cost=Decimal("0.4"), at=HOUR)
    PreemptionEvent.objects.create(ref="ep:2", team=quota_team, flavor=l4, units=1, reason="preempted",
                                   lost_gpu_hours=Decimal(1), lost_cost=Decimal("0.8"), at=HOUR)
    rows = usage_rows([quota_team], HOUR, HOUR + timedelta(days=1), "kind", now=HOUR + timedelta(hours=3))
    by_kind = {row["group"]: row for row in rows}
    assert set(by_kind) == {"run", "nb", "ep"}
    price = flavor_price(l4, False)
    assert (by_kind["run"]["cost"], by_kind["run"]["preempted_cost"]) == (price, Decimal("0.4"))
    assert by_kind["nb"]["cost"] == by_kind["nb"]["idle_cost"] == 2 * price  # two hours open, idle
    assert (by_kind["ep"]["cost"], by_kind["ep"]["preempted_gpu_hours"]) == (0, 1)
