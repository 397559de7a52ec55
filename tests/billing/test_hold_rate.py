"""One rule for the rate a quota hold is charged (``billing.models.hold_rate``), and the places it shows.

The rule is asked in Python (``QuotaHold.rate``: admission weighs a raised minimum at it; billing closes an
open segment at it) and kept in SQL (``billing.ledger._priced``: spend, budgets and commitments price every
hold in one statement). "One rule per figure, with a test comparing the places it shows": each hold here is
priced both ways — its charged rate set, unset on a cluster that prices its flavor, unset on spot (the
cluster's spot price, or the flavor's where the cluster sets none), unset and not placed — before and after
staff change the prices. On the database the suite runs on (SQLite's decimals come back as floats).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing import services as billing_services
from billing.ledger import committed, cost_ahead, month_end, open_segments
from billing.models import QuotaHold, hold_rate
from billing.segments import plan_billing
from fleet.models import Cluster
from tests.factories import hold_of, make_team
from tests.workloads.tinykind.models import Notebook

NOW = datetime(2026, 11, 17, 14, 41, 27, tzinfo=UTC)
SINCE = NOW - timedelta(minutes=20)

pytestmark = pytest.mark.django_db


@pytest.fixture
def clusters(flavors):
    """east prices the A100 at 5.00 (its spot price the flavor's); west at 4.50, spot 2.22."""
    east, west = Cluster.objects.create(name="east"), Cluster.objects.create(name="west")
    a100 = flavors["a100-80gb"]
    billing_services.set_cluster_price(None, a100, east, Decimal("5.00"))
    billing_services.set_cluster_price(None, a100, west, Decimal("4.50"), Decimal("2.22"))
    return {"east": east, "west": west}


#: name: (charged rate, spot, cluster) — every way a hold's rate is found.
CASES = {
    "charged": (Decimal("3.9000"), False, "east"),
    "charged-spot": (Decimal("1.1000"), True, "west"),
    "cluster-price": (None, False, "east"),
    "cluster-price-spot-unset": (None, True, "east"),
    "cluster-spot-price": (None, True, "west"),
    "not-placed": (None, False, None),
    "not-placed-spot": (None, True, None),
}


@pytest.fixture
def holds(flavors, clusters):
    """One hold per case, each of a team of its own (committed money is summed per team), running 2 units
    since :data:`SINCE` and committing them to the month's end."""
    made = {}
    for name, (charged, spot, cluster) in CASES.items():
        made[name] = QuotaHold.objects.create(
            team=make_team(name), ref=f"run:{len(made) + 1}", flavor=flavors["a100-80gb"], units=2, spot=spot,
            cluster=clusters[cluster] if cluster else None, charged_price=charged, billed_until=SINCE,
            open_units=2, committed_units=2)
    return made


def sql_rates(holds: dict[str, QuotaHold]) -> dict[str, Decimal]:
    """Each hold's rate as the ledger's SQL prices its open segment (``open_segments``)."""
    by_ref = {s.ref: s.price for s in open_segments([h.team_id for h in holds.values()], NOW)}
    return {name: by_ref[hold.ref] for name, hold in holds.items()}


def python_rates(holds: dict[str, QuotaHold]) -> dict[str, Decimal]:
    """Each hold's rate by the rule, read afresh (a flavor instance keeps the cluster prices it read)."""
    return {name: QuotaHold.objects.select_related("flavor").get(pk=hold.pk).rate() for name, hold in holds.items()}


def test_the_sql_prices_every_hold_at_the_rule(holds):
    rates = python_rates(holds)
    assert sql_rates(holds) == rates
    # The cases are the ones named: each way of finding the rate is taken.
    assert rates == {"charged": Decimal("3.90"), "charged-spot": Decimal("1.10"), "cluster-price": Decimal("5.00"),
                     "cluster-price-spot-unset": Decimal("1.64"), "cluster-spot-price": Decimal("2.22"),
                     "not-placed": Decimal("4.10"), "not-placed-spot": Decimal("1.64")}


def test_committed_money_is_each_holds_units_at_the_rule(holds):
    for name, hold in holds.items():
        fresh = QuotaHold.objects.select_related("flavor").get(pk=hold.pk)
        assert committed(hold.team_id, NOW) == cost_ahead(fresh.rate(), 2, NOW, month_end(NOW)), name


def test_after_a_price_change_the_sql_and_the_rule_still_agree(holds, flavors, clusters):
    a100 = flavors["a100-80gb"]
    billing_services.set_flavor_prices(None, a100, Decimal("4.40"), Decimal("1.80"))
    billing_services.set_cluster_price(None, a100, clusters["east"], Decimal("5.50"))
    billing_services.set_cluster_price(None, a100, clusters["west"], Decimal("4.60"), Decimal("2.30"))
    rates = python_rates(holds)
    assert sql_rates(holds) == rates
    # A charged rate stays; a hold not charged yet is priced at today's table.
    assert rates == {"charged": Decimal("3.90"), "charged-spot": Decimal("1.10"), "cluster-price": Decimal("5.50"),
                     "cluster-price-spot-unset": Decimal("1.80"), "cluster-spot-price": Decimal("2.30"),
                     "not-placed": Decimal("4.40"), "not-placed-spot": Decimal("1.80")}
    for name, hold in holds.items():
        assert committed(hold.team_id, NOW) == cost_ahead(rates[name], 2, NOW, month_end(NOW)), name


def test_the_rule_is_the_functions_of_a_holds_columns(holds):
    for hold in holds.values():
        fresh = QuotaHold.objects.select_related("flavor").get(pk=hold.pk)
        assert fresh.rate() == hold_rate(fresh.charged_price, fresh.flavor, fresh.spot, fresh.cluster_id)


def test_billing_closes_an_open_segment_at_the_rate_spend_showed_for_it(team, member, flavors, clusters):
    """A segment open without a recorded rate (billed before rates were recorded), of work not placed:
    spend priced it at the rule (the flavor's price: 4.10); billing closed it at the quote of the cluster
    placement would choose (east's 5.00), so the ledger took more than the Usage page and the budget showed."""
    notebook = Notebook.objects.create(team=team, created_by=member, name="nb", flavor=flavors["a100-80gb"],
                                       state="running", gpus=2)
    hold_of(notebook, SINCE, 2)
    shown = {s.ref: s.price for s in open_segments([team.pk], NOW)}[notebook.ref]
    plan = plan_billing(notebook, 3, None, None, NOW)  # its units change: the segment closes
    assert [piece.price for piece in plan.intervals] == [shown] == [Decimal("4.10")]
