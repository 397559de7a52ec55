"""Unit-hours and physical GPU-hours: two figures, each from one function, the same on every surface (issue 37.6).

The ledger's ``gpu_hours`` always were physical GPU time (units × ``gpu_fraction`` × hours,
:func:`billing.ledger.interval_gpu_hours`), now also named ``physical_gpu_hours``; ``unit_hours`` is the
flavor's units held × hours (:func:`billing.ledger.interval_unit_hours`), what prices are per. Four
time-sliced ×4 T4 units for an hour are 4 unit-hours and 1 physical GPU-hour; an A100 for an hour is 1
and 1. The report API (JSON and CSV), the Usage page, the staff Showback page and its CSV all show them
(the CLI's ``cost``: tests/cli/test_flavors.py).
"""

from __future__ import annotations

import csv
import importlib
import io
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone

from billing.ledger import interval_gpu_hours, interval_unit_hours, month_end, month_start, record_usage, usage_table
from billing.models import UsageRecord
from inference.models import InferenceEndpoint
from quotas.demo import seed_team_quotas
from tests.factories import hold_of
from tests.shared_flavors import make_shared_flavors

pytestmark = pytest.mark.django_db

#: flavor → (unit-hours, physical GPU-hours, cost) of the ledger below.
EXPECTED = {"t4-ts4": (Decimal(4), Decimal(1), Decimal("0.40")), "a100-80gb": (Decimal(1), Decimal(1), Decimal("4.10"))}


@pytest.fixture
def ledger(team, member, flavors):
    make_shared_flavors()
    seed_team_quotas(team, {"t4-ts4": 4, "a100-80gb": 1}, Decimal("1000"))
    start = month_start()
    record_usage(team, "ep:900", "t4-ts4", member, start, start + timedelta(hours=1), 4, False)
    record_usage(team, "run:901", "a100-80gb", member, start, start + timedelta(hours=1), 1, False)
    return start


def test_one_function_each_and_the_ledger_keeps_both(ledger):
    hour = (ledger, ledger + timedelta(hours=1))
    assert interval_unit_hours(4, *hour) == 4 and interval_gpu_hours(Decimal("0.25"), 4, *hour) == 1
    rows = {r.flavor.name: (r.unit_hours, r.gpu_hours, r.cost) for r in UsageRecord.objects.select_related("flavor")}
    assert rows == EXPECTED
    for unit_hours, _physical, cost in rows.values():  # cost = unit-hours × the unit-hour's price
        assert cost in (unit_hours * Decimal("0.10"), unit_hours * Decimal("4.10"))


def test_an_open_segment_counts_both_too(team, member, flavors):
    flavor = make_shared_flavors()["t4-ts4"]
    now = timezone.now()
    endpoint = InferenceEndpoint.objects.create(team=team, created_by=member, name="chat", flavor=flavor, state="ready",
                                                image="r.example.com/s:1")
    hold_of(endpoint, now - timedelta(minutes=30), 2)
    [row] = usage_table([team], now - timedelta(hours=2), now + timedelta(hours=1), ("flavor",), now)
    tenth = Decimal("1E-10")  # a piece cut at an hour boundary rounds on its own
    assert abs(row["unit_hours"] - 1) <= 2 * tenth and abs(row["physical_gpu_hours"] - Decimal("0.25")) <= 2 * tenth
    assert row["physical_gpu_hours"] == row["gpu_hours"]


def test_every_surface_shows_the_same_two_figures(client, member, staff, ledger):
    since, until = ledger, month_end(ledger)
    table = {row["flavor"]: row for row in usage_table([member.memberships.get().team], since, until, ("flavor",))}
    assert {name: (r["unit_hours"], r["physical_gpu_hours"], r["cost"]) for name, r in table.items()} == EXPECTED
    period = f"since={since:%Y-%m-%d}&until={until - timedelta(days=1):%Y-%m-%d}"
    client.force_login(member)

    # The report API, JSON and CSV.
    body = client.get(f"/api/v1/usage/?team=ml-research&{period}&group_by=flavor").json()["results"]
    assert {r["group"]: (r["unit_hours"], r["physical_gpu_hours"], r["gpu_hours"]) for r in body} == {
        name: (f"{u:.4f}", f"{p:.4f}", f"{p:.4f}") for name, (u, p, _c) in EXPECTED.items()}
    text = client.get(f"/api/v1/usage/?team=ml-research&{period}&group_by=flavor&format=csv").content.decode()
    assert {r["group"]: (r["unit_hours"], r["physical_gpu_hours"]) for r in csv.DictReader(io.StringIO(text))} == {
        name: (f"{u:.4f}", f"{p:.4f}") for name, (u, p, _c) in EXPECTED.items()}

    # The Usage page: the month's summary and the by-flavor table.
    html = client.get("/usage/").content.decode()
    assert re.search(r'id="usage-unit-hours">5.00<', html) and re.search(r'id="usage-physical-gpu-hours">2.00<', html)
    flavor_table = re.search(r'<table class="shares" id="flavor-table">(.*?)</table>', html, re.S).group(1)
    for name, (unit_hours, physical, _cost) in EXPECTED.items():
        row = re.search(rf"{re.escape(name)}</td>(.*?)</tr>", flavor_table, re.S).group(1)
        assert f'<td class="num unit-hours">{unit_hours:.2f}</td>' in row
        assert f'<td class="num physical-gpu-hours">{physical:.2f}</td>' in row

    # The staff Showback page and its CSV.
    client.force_login(staff)
    html = client.get("/admin/showback/").content.decode()
    team_row = re.search(r'<tr data-team="ml-research">(.*?)</tr>', html, re.S).group(1)
    assert '<span class="unit-hours">5.00</span> / <span class="physical-gpu-hours">2.00</span>' in team_row
    text = client.get(f"/admin/showback/?month={timezone.localtime(ledger):%Y-%m}&format=csv").content.decode()
    assert {r["flavor"]: (r["unit_hours"], r["physical_gpu_hours"]) for r in csv.DictReader(io.StringIO(text))} == {
        name: (f"{u:.4f}", f"{p:.4f}") for name, (u, p, _c) in EXPECTED.items()}


def test_the_migration_gives_rows_written_before_their_unit_hours(ledger):
    """Rows from before the column (unit_hours 0) get gpu_hours ÷ their flavor's fraction."""
    migration = importlib.import_module("quotas.migrations.0014_usage_unit_hours")
    UsageRecord.objects.update(unit_hours=0)
    # The models as that migration knew them (the flavor and the ledger were quotas' then).
    then = MigrationLoader(connection).project_state(("quotas", "0014_usage_unit_hours")).apps
    migration.backfill(then, None)
    assert {r.flavor.name: r.unit_hours for r in UsageRecord.objects.select_related("flavor")} == {
        name: unit_hours for name, (unit_hours, _p, _c) in EXPECTED.items()}
