"""Idle pool capacity where it shows: the Usage page for staff (never a team's members), the staff showback page
and staff's ``GET /api/v1/usage/idle-pools/``; one function's figures in all three."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.utils import timezone

from billing import pool_idle
from billing.ledger import month_end, month_start
from core.formatting import format_money, plain_amount
from fleet.models import Cluster, NodePool
from teams.models import Role
from tests.billing.test_pool_idle import node
from tests.factories import add_member, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def idle_month(flavors):
    """This month on east: an H100 pool with 4 of 8 units idle for 30 min, a MIG pool (1/7 of a GPU a unit) with
    7 idle for 30 min: 2 + 3.5 unit-hours."""
    east = Cluster.objects.create(name="east")
    h100, mig = flavors["h100-80gb"], flavors["a100-1g.10gb"]
    for flavor in (h100, mig):
        NodePool.objects.create(cluster=east, flavor=flavor, max_nodes=2)
    east = Cluster.objects.prefetch_related("pools__flavor").get(pk=east.pk)
    start = month_start()
    nodes = [node("h-0", h100, in_use=4), node("m-0", mig, in_use=mig.max_units_per_node - 7)]
    for minutes in range(0, 35, 5):  # a reading every 5 minutes: 30 minutes integrated
        pool_idle.record_readings(east, nodes, start + timedelta(minutes=minutes))
    return pool_idle.idle_pool_capacity(start, month_end(start))


@pytest.fixture
def staff_member(team):
    """Platform staff who belong to the team (the Usage page is a team's)."""
    user = make_user("stella", staff=True)
    add_member(team, user, Role.MEMBER)
    return user


def usage_card(client, user) -> str | None:
    client.force_login(user)
    response = client.get("/usage/")
    assert response.status_code == 200
    found = re.search(r'<section class="card" id="idle-pools">(.*?)</section>', response.content.decode(), re.S)
    return found.group(1) if found else None


def shown(html: str) -> tuple[dict[str, tuple[str, str]], tuple[str, str]]:
    """``({cluster/flavor: (GPU-hours, cost)}, (total GPU-hours, total cost))`` as a page shows them."""
    rows = {pool: (hours, cost) for pool, hours, cost in re.findall(
        r'<tr data-pool="([^"]+)">.*?<td class="num gpu-hours">([^<]*)</td><td class="num cost">([^<]*)</td>',
        html, re.S)}
    total = re.search(r'<tfoot>.*?<td class="num gpu-hours">([^<]*)</td><td class="num cost">([^<]*)</td>', html, re.S)
    return rows, total.groups()


def test_the_figures_are_exact(idle_month, flavors):
    mig_price = flavors["a100-1g.10gb"].price_per_hour
    assert [(r.flavor, r.unit_hours, r.gpu_hours, r.cost) for r in idle_month.rows] == [
        ("h100-80gb", Decimal(2), Decimal(2), Decimal("13.76")),  # 4 units × 30 min at 6.88
        # 3.5 unit-hours × a unit's 0.142857 of a GPU (the ledger's fraction) = 0.4999995 physical GPU-hours
        ("a100-1g.10gb", Decimal("3.5"), Decimal("0.4999995"), (Decimal("3.5") * mig_price).quantize(Decimal("1E-10")))]


def test_staff_see_it_on_the_usage_page_and_the_showback_page_and_the_api_with_the_same_figures(
        client, staff_member, idle_month, api_client_for):
    expected = ({f"east/{r.flavor}": (f"{r.gpu_hours:.2f}", format_money(r.cost)) for r in idle_month.rows},
                (f"{idle_month.gpu_hours:.2f}", format_money(idle_month.cost)))
    on_usage = usage_card(client, staff_member)
    assert on_usage is not None and shown(on_usage) == expected
    showback = client.get("/admin/showback/").content.decode()
    assert shown(re.search(r'<div class="module" id="idle-pools">(.*?)</div>\s*</div>', showback, re.S).group(1)) \
        == expected
    answer = api_client_for(staff_member).get("/api/v1/usage/idle-pools/").json()
    assert {f"{p['cluster']}/{p['flavor']}": (f"{Decimal(p['gpu_hours']):.2f}", format_money(Decimal(p["cost"])))
            for p in answer["pools"]} == expected[0]
    assert (f"{Decimal(answer['gpu_hours']):.2f}", format_money(Decimal(answer["cost"])), answer["currency"]) == \
        (*expected[1], "USD")
    # The Showback page's CSV, same month: a row per pool under the teams', the API's figures to the file's places.
    in_csv = [row for row in csv.DictReader(io.StringIO(client.get(
        f"/admin/showback/?month={timezone.localtime(month_start()):%Y-%m}&format=csv").content.decode()))
        if row["team"] == "idle pool capacity"]
    assert {f"{r['cluster']}/{r['flavor']}": (r["unit_hours"], r["physical_gpu_hours"], r["gpu_hours"], r["cost"],
                                              r["idle_gpu_hours"], r["idle_cost"], r["currency"]) for r in in_csv} == {
        f"{p['cluster']}/{p['flavor']}": (hours(p["unit_hours"]), hours(p["gpu_hours"]), hours(p["gpu_hours"]),
                                          plain_amount(Decimal(p["cost"])), hours(p["gpu_hours"]),
                                          plain_amount(Decimal(p["cost"])), "USD") for p in answer["pools"]}
    assert {f"{r['cluster']}/{r['flavor']}": (f"{Decimal(r['gpu_hours']):.2f}", format_money(Decimal(r["cost"])))
            for r in in_csv} == expected[0]


def hours(figure: str) -> str:
    """A GPU-hours figure as the showback CSV writes it (four places)."""
    return f"{Decimal(figure).quantize(Decimal('0.0001'), ROUND_HALF_UP):f}"


@pytest.mark.parametrize("role", [Role.VIEWER, Role.MEMBER, Role.ADMIN])
def test_no_team_member_sees_it(client, team, idle_month, api_client_for, role):
    """It is nobody's bill: not on a team's Usage page, whatever the role, nor in the API (404, as clusters)."""
    user = make_user(f"user-{role}")
    add_member(team, user, role)
    assert usage_card(client, user) is None
    assert "Idle pool capacity" not in client.get("/usage/").content.decode()
    # Nor in a file: the showback CSV is staff's (to the login), their team's report CSV has no such rows.
    showback_csv = client.get("/admin/showback/?format=csv")
    assert showback_csv.status_code == 302 and "/admin/login/" in showback_csv["Location"]
    for group in ("flavor", "day"):
        report = client.get(f"/api/v1/usage/?team={team.slug}&group_by={group}&format=csv")
        assert report.status_code == 200 and "idle pool capacity" not in report.content.decode()
    api = api_client_for(user)
    assert api.get("/api/v1/usage/idle-pools/").status_code == 404
    assert api.head("/api/v1/usage/idle-pools/").status_code == 404
    assert api.post("/api/v1/usage/idle-pools/").status_code == 405  # a method it never answers, for anyone


def test_the_api_refuses_a_bad_period_with_a_field_error(staff_member, api_client_for):
    api = api_client_for(staff_member)
    backwards = api.get("/api/v1/usage/idle-pools/?since=2026-11-10&until=2026-11-01")
    assert (backwards.status_code, backwards.json()) == (400, {"errors": {"until": ["Must be after since."]}})
    unreadable = api.get("/api/v1/usage/idle-pools/?since=yesterday")
    assert unreadable.status_code == 400 and list(unreadable.json()["errors"]) == ["since"]
    empty = api.get("/api/v1/usage/idle-pools/?since=2020-01-01&until=2020-01-31").json()
    assert empty == {"pools": [], "gpu_hours": "0.0000", "cost": "0.00", "currency": "USD"}
