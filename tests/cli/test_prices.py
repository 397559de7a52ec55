"""One price everywhere (issue 46): what finished work shows is the rate it was charged — on its page, in
the API, on the command line and in the e-mails' figures — and a price change by staff moves none of it.

The flavors' prices read the same on the command line as on the portal's flavor page: the price now, the
cluster it is that of, the range across clusters. Money per hour has one rounding on both.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import ClusterPrice, UsageRecord
from billing.segments import bill_past
from core.formatting import format_rate
from fleet.models import Cluster, GpuFlavor
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.policy import flavor_rows
from slipway.output import rate

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def east_west(flavors):
    """East sells an A100-hour at 3.00, west at the flavor's 4.10."""
    east = Cluster.objects.create(name="east", region="us-east")
    Cluster.objects.create(name="west", region="us-west")
    ClusterPrice.objects.create(flavor=flavors["a100-80gb"], cluster=east, price_per_hour=Decimal("3.00"))
    return east


@pytest.fixture
def finished(east_west, team, member, flavors):
    """A run placed on east that ran 2 units for two hours, billed by the live rule, then ended."""
    end = timezone.now().replace(microsecond=0) - timedelta(days=8)
    start = end - timedelta(hours=2)
    run = TrainingRun.objects.create(team=team, created_by=member, name="bert-base-sweep", flavor=flavors["a100-80gb"],
                                     image="ghcr.io/acme/train:1", command=["python"], gpus_per_worker=2,
                                     state=RunState.SUCCEEDED, admitted_at=start, started_at=start, finished_at=end,
                                     cluster=east_west, placed_at=start)
    bill_past(run, start, [(start, 2, False)], end)
    return run


def test_finished_work_shows_its_charged_rate_everywhere_after_staff_change_the_prices(
        cli, client, member, finished, east_west, flavors):
    run = finished
    rows = UsageRecord.objects.filter(ref=run.ref)
    assert sum(r.cost for r in rows) == Decimal("12.00") and sum(r.unit_hours for r in rows) == 4  # 3.00/h
    # Staff change the prices since: east's and the flavor's own.
    ClusterPrice.objects.filter(cluster=east_west).update(price_per_hour=Decimal("9.00"))
    GpuFlavor.objects.filter(pk=flavors["a100-80gb"].pk).update(price_per_hour=Decimal("7.00"))
    run = TrainingRun.objects.get(pk=run.pk)

    assert run.price_quote().price == Decimal("3.00")  # the one function
    assert run.cost_per_hour_at(2) == Decimal("6.00")  # the e-mails' cost per hour (workloads.telemetry.alerts)
    client.force_login(member)
    api = client.get(f"/api/v1/runs/{run.pk}/").json()
    assert (api["price_per_hour"], api["estimated_cost_per_hour"], api["cost_to_date"], api["currency"]) == (
        "3.0000", "6.0000", "12.0000", "USD")
    listed = next(r for r in client.get("/api/v1/runs/").json()["results"] if r["id"] == run.pk)
    assert listed["price_per_hour"] == "3.0000"
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert re.search(r'id="run-price">3\.00 USD/h on east a unit<', page)
    assert "6.00 USD per hour" in page
    out = cli("describe", str(run.pk))
    assert out.exit_code == 0, out.output
    lines = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in out.stdout.splitlines() if ":" in line}
    assert lines["Price"] == "3.00 USD/h a unit on east"
    assert lines["Cost/hour"] == "6.00 USD/h"
    assert lines["Cost to date"] == "12.00 USD"


def test_the_flavors_command_shows_the_price_cluster_and_range_as_the_flavor_page(cli, client, member, east_west):
    client.force_login(member)
    portal = next(row.price for row in flavor_rows("USD") if row.flavor.name == "a100-80gb")
    assert "3.00" in portal and "4.10" in portal  # the range across east and west
    out = cli("flavors")
    assert out.exit_code == 0, out.output
    row = next(line for line in out.stdout.splitlines() if line.startswith("a100-80gb "))
    assert row.endswith(portal)
    assert portal in client.get("/help/flavors/").content.decode()


@pytest.mark.parametrize("amount", ["3.6000", "98.4000", "0.5857", "1.0286", "0.1000", "1234.5000", "0.0050"])
def test_the_command_line_rounds_money_per_hour_as_the_portal(amount):
    assert rate(amount, "USD") == format_rate(Decimal(amount), "USD")
