"""Usage per key in money (inference.key_costs): the pure split and the report over real ledger rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing import ledger
from billing.models import QuotaHold, UsageRecord
from inference import key_costs, keys
from inference.key_costs import split_cents, split_hour
from inference.models import KeyUsage

CENT = Decimal("0.01")

costs = st.decimals(min_value=0, max_value=10_000, places=10, allow_nan=False, allow_infinity=False)
usage = st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 10**6)), max_size=12)


@given(costs, usage)
@settings(max_examples=400, deadline=None)
def test_an_hours_shares_sum_exactly_to_its_cost_to_the_cent(cost, rows):
    shares, idle = split_hour(cost, [(key, tokens, requests) for key, (tokens, requests) in enumerate(rows)])
    assert sum(shares.values(), idle) == cost.quantize(CENT)
    assert all(share >= 0 and share == share.quantize(CENT) for share in shares.values())
    tokens, requests = sum(t for t, _r in rows), sum(r for _t, r in rows)
    weights = [t for t, _r in rows] if tokens else [r for _t, r in rows]
    if not (tokens or requests):
        assert idle == cost.quantize(CENT) and not any(shares.values())
        return
    assert idle == 0
    cents = key_costs.to_cents(cost)
    for key, weight in enumerate(weights):  # never more than a cent off its exact share
        exact = Fraction(cents * weight, sum(weights))
        assert abs(Fraction(int(shares[key] * 100)) - exact) < 1


@given(st.lists(st.tuples(costs, usage), max_size=24))
@settings(max_examples=200, deadline=None)
def test_any_mix_of_keys_and_hours_sums_to_the_cent(hours):
    """Over many hours, the keys' totals and the idle lines sum to the hours' costs, each to the cent."""
    totals: dict[int | None, Decimal] = {}
    for cost, rows in hours:
        shares, idle = split_hour(cost, [(key, t, r) for key, (t, r) in enumerate(rows)])
        for key, share in shares.items():
            totals[key] = totals.get(key, Decimal(0)) + share
        totals[None] = totals.get(None, Decimal(0)) + idle
    assert sum(totals.values(), Decimal(0)) == sum((cost.quantize(CENT) for cost, _rows in hours), Decimal(0))


def test_largest_remainders_get_the_leftover_cents_ties_to_the_first():
    assert split_cents(100, [("a", 1), ("b", 1), ("c", 1)]) == {"a": 34, "b": 33, "c": 33}
    assert split_cents(10, [("a", 2), ("b", 7), ("c", 1)]) == {"a": 2, "b": 7, "c": 1}
    assert split_cents(1, [("a", 1), ("b", 2)]) == {"a": 0, "b": 1}
    assert split_cents(0, [("a", 5)]) == {"a": 0}
    with pytest.raises(ValueError, match="positive"):
        split_cents(5, [("a", 0)])


def test_tokens_decide_when_the_hour_has_them_requests_otherwise():
    shares, idle = split_hour(Decimal("3.00"), [(1, 100, 1), (2, 200, 50), (3, 0, 10)])
    assert shares == {1: Decimal("1.00"), 2: Decimal("2.00"), 3: Decimal("0.00")} and idle == 0
    shares, idle = split_hour(Decimal("1.00"), [(1, 0, 3), (2, 0, 1)])
    assert shares == {1: Decimal("0.75"), 2: Decimal("0.25")} and idle == 0
    shares, idle = split_hour(Decimal("0.505"), [])
    assert shares == {} and idle == Decimal("0.51")


# -- the report over real ledger rows ----------------------------------------------------------------------


def _usage(key, endpoint, hour, **counts):
    return KeyUsage.objects.create(key=key, endpoint=endpoint, team=endpoint.team, hour=hour, **counts)


@pytest.mark.django_db
def test_per_key_costs_of_an_endpoint_sum_to_its_ledger_cost_to_the_cent(member, team, create):
    endpoint = create()
    own, _ = keys.create_key(member, team, endpoint, "app")
    shared, _ = keys.create_key(member, team, None, "batch")
    start = datetime(2026, 11, 2, 9, 0, 7, tzinfo=UTC)
    # Real ledger rows: three replicas' worth of units over 3 h 41 min, cut at hour boundaries by the ledger.
    ledger.record_usage(team, endpoint.ref, endpoint.flavor, member, start, start + timedelta(minutes=221), 3, False)
    ledger.record_usage(team, endpoint.ref, endpoint.flavor, member, start + timedelta(minutes=221),
                        start + timedelta(minutes=245, seconds=13), 1, False)
    hours = [datetime(2026, 11, 2, h, tzinfo=UTC) for h in (9, 10, 11, 12, 13)]
    _usage(own, endpoint, hours[0], requests_2xx=10, input_tokens=1001, output_tokens=333)
    _usage(shared, endpoint, hours[0], requests_2xx=7, requests_5xx=2, errors=1, input_tokens=77, output_tokens=1)
    _usage(own, endpoint, hours[1], requests_2xx=3, requests_4xx=1)  # no tokens this hour: by requests
    _usage(shared, endpoint, hours[1], requests_2xx=1)
    _usage(shared, endpoint, hours[3], requests_4xx=5)  # hour 11 has cost and no request: idle
    report = key_costs.endpoint_key_usage(endpoint, hours[0], hours[-1] + timedelta(hours=1),
                                          now=hours[-1] + timedelta(hours=2))

    per_hour = {r.hour: r.cost for r in UsageRecord.objects.filter(ref=endpoint.ref)}
    assert len(per_hour) == 5
    ledger_cents = sum((cost.quantize(CENT) for cost in per_hour.values()), Decimal(0))
    assert report.ledger_cost == ledger_cents
    assert sum((t.cost for t in report.totals), Decimal(0)) == ledger_cents
    for hour, cost in per_hour.items():
        assert sum((line.cost for line in report.hours if line.hour == hour), Decimal(0)) == cost.quantize(CENT)
    idle = {line.hour: line.cost for line in report.hours if line.key_id is None}
    assert set(idle) == {hours[2], hours[4]}
    totals = {t.key_id: t for t in report.totals}
    assert totals[own.pk].requests == 14 and totals[own.pk].tokens == 1334
    assert totals[shared.pk].requests_5xx == 2 and totals[shared.pk].errors == 1
    first = {line.key_id: line.cost for line in report.hours if line.hour == hours[0]}
    assert first[own.pk] > first[shared.pk] * 10  # 1334 tokens against 78
    second = {line.key_id: line.cost for line in report.hours if line.hour == hours[1]}
    assert abs(second[own.pk] - per_hour[hours[1]] * 4 / 5) < CENT  # 4 requests of 5
    assert key_costs.team_key_usage(team, hours[0], hours[-1] + timedelta(hours=1),
                                    now=hours[-1] + timedelta(hours=2)).ledger_cost == ledger_cents


@pytest.mark.django_db
def test_the_open_segment_of_the_current_hour_is_counted(member, team, create):
    endpoint = create()
    key, _ = keys.create_key(member, team, endpoint, "app")
    hour = ledger.usage_hour(datetime(2026, 11, 3, 15, 20, tzinfo=UTC))
    now = hour + timedelta(minutes=30)
    # Its hold's open segment: 1 unit at 2.40/h since 10 minutes into the hour.
    QuotaHold.objects.held().filter(ref=endpoint.ref).update(billed_until=hour + timedelta(minutes=10), open_units=1,
                                                             charged_price=Decimal("2.40"))
    _usage(key, endpoint, hour, requests_2xx=1, input_tokens=5)
    report = key_costs.endpoint_key_usage(endpoint, hour, hour + timedelta(hours=1), now=now)
    assert report.ledger_cost == Decimal("0.80")  # 20 minutes at 2.40/h, not yet in the ledger
    assert [(t.key_id, t.cost) for t in report.totals] == [(key.pk, Decimal("0.80"))]
