"""The team Usage page (charts, month picker, by person / flavor / workload with idle share) and staff showback."""

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

from billing.ledger import month_end, month_start, record_usage
from billing.models import BudgetMonth, PreemptionEvent, TeamBudget, UsageRecord
from billing.reports import usage_report
from inference.models import InferenceEndpoint
from jobs.models import TrainingRun
from quotas.demo import seed_flavors, seed_team_quotas
from quotas.services import set_team_budget
from teams.models import Role
from tests.factories import add_member, hold_of
from workloads.registry import kind_names, kind_nouns
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def spend(team, member, viewer):
    """This month: a run on 2 A100s for 1 h (busy) and an L4 run for 2 h, one of them idle."""
    flavors = {f.name: f for f in seed_flavors()}
    seed_team_quotas(team, {"a100-80gb": 8, "l4": 2}, Decimal("1000"))
    start = month_start()  # inside this month whatever the day the test runs
    big = TrainingRun.objects.create(team=team, created_by=member, name="big-train", flavor=flavors["a100-80gb"],
                                     state="succeeded", image="r.example.com/t:1", command=["python"])
    small = TrainingRun.objects.create(team=team, created_by=viewer, name="small-eval", flavor=flavors["l4"],
                                       state="succeeded", image="r.example.com/t:1", command=["python"])
    record_usage(team, big.ref, "a100-80gb", member, start, start + timedelta(hours=1), 2, False)  # 8.20
    record_usage(team, small.ref, "l4", viewer, start, start + timedelta(hours=1), 1, False)  # 0.80
    record_usage(team, small.ref, "l4", viewer, start + timedelta(hours=1), start + timedelta(hours=2), 1, False,
                 idle=True)  # 0.80 idle
    return {"start": start, "big": big, "small": small}


def page(client, user, query=""):
    client.force_login(user)
    response = client.get(f"/usage/{query}")
    return response, response.content.decode()


def test_it_shows_the_months_totals_with_the_idle_share(client, member, spend):
    response, body = page(client, member)
    assert response.status_code == 200
    summary = re.search(r'id="usage-summary">(.*?)</p>', body, re.S).group(1)
    assert "9.80 USD" in summary and "0.80 USD" in summary and "(8%)" in summary  # 0.80 of 9.80 idle


def test_the_daily_chart_stacks_flavors_with_patterns_titles_and_a_table(client, member, spend):
    _response, body = page(client, member)
    chart = re.search(r'<section class="card" id="daily-chart">(.*?)</section>', body, re.S).group(1)
    bars = re.findall(r'<rect class="stack"[^>]*data-pattern="(\w+)"><title>([^<]*)</title>', chart)
    day = f"{spend['start']:%b} {spend['start'].day}"
    assert bars == [("solid", f"{day}, a100-80gb: 8.20 USD"), ("diagonal", f"{day}, l4: 1.60 USD")]
    assert "<title id=\"daily-title\">Cost per day (USD), stacked by GPU flavor</title>" in chart
    table = re.search(r'<table class="small" id="daily-table">(.*?)</table>', chart, re.S).group(1)
    assert re.findall(r'<td class="num">([^<]*)</td>', table) == ["8.20", "1.60", "9.80"]


def test_the_burn_chart_draws_spend_the_one_projection_and_the_budget(client, member, spend):
    _response, body = page(client, member)
    chart = re.search(r'<section class="card" id="burn-chart">(.*?)</section>', body, re.S).group(1)
    assert re.findall(r'<polyline class="series (\w+)"', chart) == ["actual", "projected"]  # one projection
    assert 'class="budget-line"' in chart and "budget 1,000.00 USD" in chart
    table = dict(re.findall(r'<th scope="row">([^<]*)</th><td class="num">([^<]*)</td>', chart))
    assert table["Spent"] == "9.80 USD" and table["Budget"] == "1,000.00 USD"
    assert table["Projected month end"] == "9.80 USD"  # nothing running: the pace is zero


def test_workloads_show_their_name_and_page_costliest_first_with_idle_share(client, member, spend):
    _response, body = page(client, member)
    table = re.search(r'<table class="shares" id="workload-table">(.*?)</table>', body, re.S).group(1)
    links = re.findall(r'<a href="([^"]+)">([^<]+)</a>', table)
    assert links == [(f"/runs/{spend['big'].pk}/", "big-train"), (f"/runs/{spend['small'].pk}/", "small-eval")]
    assert "0.80 USD (50%)" in table  # half of small-eval's cost paid for idle GPUs
    people = re.search(r'<table class="shares" id="person-table">(.*?)</table>', body, re.S).group(1)
    assert people.index("mia") < people.index("vic")


def test_the_month_picker_shows_an_earlier_month_and_refuses_bad_input(client, member, spend):
    earlier = month_start(spend["start"] - timedelta(days=1))
    response, body = page(client, member, f"?month={earlier:%Y-%m}")
    assert response.status_code == 200
    assert f'<option value="{earlier:%Y-%m}" selected>' in body
    assert "big-train" not in body and "Nothing spent in this period." in body
    assert 'class="series projected"' not in body  # a month that is over has no projection
    for bad in ("2026-13", "junk", "9999-01", "1999-12", "2026-1-1"):
        response, body = page(client, member, f"?month={bad}")
        assert response.status_code == 400, bad
        assert "Pick a month from the list" in body


def burn_budget(body: str) -> str | None:
    chart = re.search(r'<section class="card" id="burn-chart">(.*?)</section>', body, re.S)
    found = re.search(r'<text class="bound-label"[^>]*>budget ([^<]*)</text>', chart.group(1)) if chart else None
    return found.group(1) if found else None


def test_a_past_months_burn_down_keeps_the_budget_it_had(client, member, staff, team, spend):
    """The budget was 800 last month, is raised to 1,500 this month: each month shows its own."""
    earlier = month_start(spend["start"] - timedelta(days=1))
    record_usage(team, spend["big"].ref, "a100-80gb", member, earlier, earlier + timedelta(hours=1), 2, False)
    set_team_budget(staff, team, Decimal("800"), now=earlier + timedelta(days=3))
    set_team_budget(staff, team, Decimal("1500"))
    assert burn_budget(page(client, member, f"?month={earlier:%Y-%m}")[1]) == "800.00 USD"
    assert burn_budget(page(client, member)[1]) == "1,500.00 USD"
    # Removed this month: last month keeps its line, this month has none.
    set_team_budget(staff, team, None)
    assert burn_budget(page(client, member, f"?month={earlier:%Y-%m}")[1]) == "800.00 USD"
    assert burn_budget(page(client, member)[1]) is None
    assert list(BudgetMonth.objects.filter(team=team).values_list("month", "monthly_limit")) == [
        (spend["start"].date(), None), (earlier.date(), Decimal("800"))]


def test_months_before_the_history_use_its_oldest_budget(client, member, staff, team, spend):
    earlier = month_start(spend["start"] - timedelta(days=1))
    record_usage(team, spend["big"].ref, "a100-80gb", member, earlier, earlier + timedelta(hours=1), 2, False)
    set_team_budget(staff, team, Decimal("700"))  # the history begins this month
    assert burn_budget(page(client, member, f"?month={earlier:%Y-%m}")[1]) == "700.00 USD"


def test_the_migration_seeds_the_history_from_todays_budgets(team, other_team):
    """0007 records every team's budget of today as this month's, and nothing for teams without one."""
    TeamBudget.objects.create(team=team, monthly_limit=Decimal("250"), currency="EUR")
    seed = importlib.import_module("quotas.migrations.0007_budget_months").seed_from_budgets
    # The models as that migration knew them (budgets were quotas' then).
    seed(MigrationLoader(connection).project_state(("quotas", "0007_budget_months")).apps, None)
    assert list(BudgetMonth.objects.values_list("team__slug", "month", "monthly_limit", "currency")) == [
        ("ml-research", month_start().date(), Decimal("250"), "EUR")]


def test_it_shows_nothing_of_other_teams(client, outsider, spend):
    _response, body = page(client, outsider)
    # The user as a word: a random CSRF token may hold the letters ("…k7miaC3…", the clean-clone CI once).
    assert "big-train" not in body and not re.search(r"\bmia\b", body)
    assert "Nothing used in this period." in body


def test_it_serves_the_linked_csv_to_the_session(client, member, spend):
    client.force_login(member)
    response = client.get("/api/v1/usage/?team=ml-research&group_by=flavor&format=csv")
    assert response.status_code == 200
    assert response.content.decode().splitlines()[1] == "a100-80gb,2.0000,8.20,0.0000,0.00,0.0000,0.0000,0.00,USD,2.0000,2.0000"


def period(start) -> str:
    """The whole month of ``start`` (as the Usage page's CSV links ask for it)."""
    return f"since={start:%Y-%m-%d}&until={month_end(start) - timedelta(days=1):%Y-%m-%d}"


def csv_rows(response) -> list[list[str]]:
    return list(csv.reader(io.StringIO(response.content.decode())))


def test_the_csv_by_workload_says_what_each_one_is_costliest_first(client, member, spend, flavors):
    """Issue 20: it held only ``run:13`` / ``ep:2``, sorted as text. Issue 34.7: and ``label`` says each as
    every message does ("run big-train (#13) of team ml-research"), in the last column."""
    cheap = InferenceEndpoint.objects.create(team=spend["big"].team, created_by=member, name="chat",
                                             flavor=flavors["l4"], image="r.example.com/s:1", state="ready")
    start = spend["start"]
    record_usage(cheap.team, cheap.ref, "l4", member, start, start + timedelta(minutes=30), 1, False)  # 0.40
    client.force_login(member)
    response = client.get(f"/api/v1/usage/?team=ml-research&{period(start)}&group_by=workload&format=csv")
    assert response["Content-Disposition"] == (
        f'attachment; filename="usage-ml-research-{timezone.localtime(start):%Y-%m}-by-workload.csv"')
    rows = csv_rows(response)
    assert rows[0] == ["group", "name", "kind", "team", "user", "flavor", "gpu_hours", "cost", "idle_gpu_hours",
                       "idle_cost", "borrowed_gpu_hours", "preempted_gpu_hours", "preempted_cost", "currency", "label",
                       "unit_hours", "physical_gpu_hours"]
    big, small = spend["big"], spend["small"]
    assert rows[1:] == [
        [big.ref, "big-train", "run", "ml-research", "mia", "a100-80gb", "2.0000", "8.20", "0.0000", "0.00",
         "0.0000", "0.0000", "0.00", "USD", f"run big-train (#{big.pk}) of team ml-research", "2.0000", "2.0000"],
        [small.ref, "small-eval", "run", "ml-research", "vic", "l4", "2.0000", "1.60", "1.0000", "0.80", "0.0000",
         "0.0000", "0.00", "USD", f"run small-eval (#{small.pk}) of team ml-research", "2.0000", "2.0000"],
        [cheap.ref, "chat", "endpoint", "ml-research", "mia", "l4", "0.5000", "0.40", "0.0000", "0.00", "0.0000",
         "0.0000", "0.00", "USD", f"endpoint chat (#{cheap.pk}) of team ml-research", "0.5000", "0.5000"],
    ]
    # The JSON report keeps its fields and adds the same ones.
    body = client.get(f"/api/v1/usage/?team=ml-research&{period(start)}&group_by=workload").json()
    assert [(r["group"], r["name"], r["kind"], r["cost"], r["label"]) for r in body["results"]] == [
        (big.ref, "big-train", "run", "8.20", f"run big-train (#{big.pk}) of team ml-research"),
        (small.ref, "small-eval", "run", "1.60", f"run small-eval (#{small.pk}) of team ml-research"),
        (cheap.ref, "chat", "endpoint", "0.40", f"endpoint chat (#{cheap.pk}) of team ml-research")]
    flavors_only = client.get(f"/api/v1/usage/?team=ml-research&{period(start)}&group_by=flavor").json()
    assert set(flavors_only["results"][0]) == {"group", "gpu_hours", "cost", "idle_gpu_hours", "idle_cost",
                                                  "borrowed_gpu_hours", "preempted_gpu_hours", "preempted_cost",
                                                  "currency", "unit_hours", "physical_gpu_hours"}


def test_every_download_is_named_for_what_and_when(client, member, staff, spend, other_team):
    client.force_login(member)
    month = f"{timezone.localtime(spend['start']):%Y-%m}"
    for group in ("day", "flavor", "user"):
        response = client.get(f"/api/v1/usage/?team=ml-research&{period(spend['start'])}&group_by={group}&format=csv")
        assert response["Content-Disposition"] == f'attachment; filename="usage-ml-research-{month}-by-{group}.csv"'
    week = client.get("/api/v1/usage/?since=2026-11-03&until=2026-11-09&format=csv")  # their one team
    assert week["Content-Disposition"] == 'attachment; filename="usage-ml-research-2026-11-03-to-2026-11-09-by-day.csv"'
    add_member(other_team, member, Role.MEMBER)
    both = client.get("/api/v1/usage/?since=2026-11-03&until=2026-11-09&format=csv")
    assert both["Content-Disposition"] == 'attachment; filename="usage-my-teams-2026-11-03-to-2026-11-09-by-day.csv"'
    client.force_login(staff)
    showback = client.get(f"/admin/showback/?month={month}&format=csv")
    assert showback["Content-Disposition"] == f'attachment; filename="showback-{month}-by-team-and-flavor.csv"'


def test_csv_money_is_rounded_to_the_cent_as_people_read_it(client, member, spend):
    """Half up, as on every page (the API's decimals rounded half to even: 0.125 became 0.12)."""
    start = spend["start"] + timedelta(hours=3)
    # 562.5 s of an L4 at 0.80 an hour cost exactly 0.125.
    record_usage(spend["small"].team, "run:777777", "l4", member, start, start + timedelta(seconds=562.5), 1, False)
    client.force_login(member)
    rows = csv_rows(client.get(f"/api/v1/usage/?team=ml-research&{period(start)}&group_by=workload"
                               "&format=csv"))
    assert [rows[-1][0], rows[-1][7], rows[-1][13]] == ["run:777777", "0.13", "USD"]


def test_it_asks_anonymous_users_to_log_in_and_refuses_other_methods(client, member):
    assert client.get("/usage/").status_code == 302
    client.force_login(member)
    assert client.post("/usage/").status_code == 405


# -- staff showback ------------------------------------------------------------------------


@pytest.fixture
def other_spend(other_team, outsider):
    seed_team_quotas(other_team, {"a100-80gb": 8})
    start = month_start()
    record_usage(other_team, "run:999", "a100-80gb", outsider, start, start + timedelta(hours=2), 1, False,
                 idle=True)  # 8.20, all idle
    return start


def test_showback_lists_every_team_costliest_first_with_budget_state(client, staff, spend, other_spend):
    client.force_login(staff)
    response = client.get("/admin/showback/")
    assert response.status_code == 200
    body = response.content.decode()
    rows = re.findall(r'<tr data-team="([^"]+)">(.*?)</tr>', body, re.S)
    assert [slug for slug, _ in rows] == ["ml-research", "vision"]
    research, vision = (cells for _slug, cells in rows)
    assert "9.80 USD" in research and "1%" in research and "notify" in research  # 9.80 of a 1,000 budget
    assert "8.20 USD (100%)" in vision and "no budget" in vision
    assert re.search(r'id="showback-total">.*18.00 USD.*9.00 USD', body, re.S)


def test_showback_csv_is_per_team_and_flavor(client, staff, spend, other_spend):
    client.force_login(staff)
    response = client.get(f"/admin/showback/?month={timezone.localtime(other_spend):%Y-%m}&format=csv")
    assert response["Content-Type"].startswith("text/csv")
    rows = csv_rows(response)
    assert rows[0] == ["team", "flavor", "gpu_hours", "cost", "idle_gpu_hours", "idle_cost", "borrowed_gpu_hours", "preempted_gpu_hours", "preempted_cost", "currency", "unit_hours", "physical_gpu_hours", "cluster"]
    # Cents and four-place GPU-hours, as people read them: zero is 0.00, never 0E-10.
    assert rows[1:] == [["ml-research", "a100-80gb", "2.0000", "8.20", "0.0000", "0.00", "0.0000", "0.0000", "0.00", "USD", "2.0000", "2.0000", ""],
                        ["ml-research", "l4", "2.0000", "1.60", "1.0000", "0.80", "0.0000", "0.0000", "0.00", "USD", "2.0000", "2.0000", ""],
                        ["vision", "a100-80gb", "2.0000", "8.20", "2.0000", "8.20", "0.0000", "0.0000", "0.00", "USD", "2.0000", "2.0000", ""]]


def test_showback_is_for_staff_only(client, member, team_admin):
    for user in (member, team_admin):
        client.force_login(user)
        response = client.get("/admin/showback/")
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    client.logout()
    assert client.get("/admin/showback/?format=csv").status_code == 302


def test_showback_csv_prints_a_zero_cost_row_as_0_00(client, staff, team, member, flavors):
    flavors["l4"].price_per_hour = 0
    flavors["l4"].save()
    start = month_start()
    record_usage(team, "run:5", "l4", member, start, start + timedelta(hours=1), 1, False, idle=True)
    client.force_login(staff)
    response = client.get(f"/admin/showback/?month={timezone.localtime(start):%Y-%m}&format=csv")
    assert csv_rows(response)[1:] == [["ml-research", "l4", "1.0000", "0.00", "1.0000", "0.00", "0.0000", "0.0000", "0.00", "USD", "1.0000", "1.0000", ""]]
    assert "E-" not in response.content.decode()


@pytest.fixture
def sharing(spend, member, viewer, team):
    """On top of ``spend``: 1 of big-train's 2 GPU-hours ran borrowed; small-eval was preempted once
    (0.5 GPU-hours lost, 0.40); and a run that never billed anything lost 1 GPU-hour (4.10)."""
    UsageRecord.objects.filter(ref=spend["big"].ref).update(borrowed_gpu_hours=Decimal(1))
    at = spend["start"] + timedelta(hours=3)
    PreemptionEvent.objects.create(ref=spend["small"].ref, team=team, user=viewer, flavor=spend["small"].flavor,
                                   units=1, reason="preempted", lost_gpu_hours=Decimal("0.5"),
                                   lost_cost=Decimal("0.4"), at=at)
    PreemptionEvent.objects.create(ref="run:999999", team=team, user=member, flavor=spend["big"].flavor, units=1,
                                   reason="preempted", lost_gpu_hours=Decimal(1), lost_cost=Decimal("4.1"), at=at)
    return spend


def sums(row) -> tuple:
    return row["borrowed_gpu_hours"], row["preempted_gpu_hours"], row["preempted_cost"]


def test_reports_carry_borrowed_and_preempted_figures_in_every_grouping(team, sharing):
    since, until = sharing["start"], month_end(sharing["start"])
    by_workload = {row["group"]: row for row in usage_report([team], since, until, "workload")}
    assert sums(by_workload[sharing["big"].ref]) == (1, 0, 0)
    assert sums(by_workload[sharing["small"].ref]) == (0, Decimal("0.5"), Decimal("0.4"))
    lost_only = by_workload["run:999999"]  # preemptions without usage: a row of its own
    assert (lost_only["gpu_hours"], lost_only["cost"], lost_only["user"], lost_only["flavor"]) == (
        0, 0, "mia", "a100-80gb")
    assert sums(lost_only) == (0, 1, Decimal("4.1"))
    by_user = {row["group"]: row for row in usage_report([team], since, until, "user")}
    assert sums(by_user["mia"]) == (1, 1, Decimal("4.1")) and sums(by_user["vic"]) == (0, Decimal("0.5"),
                                                                                          Decimal("0.4"))
    by_flavor = {row["group"]: row for row in usage_report([team], since, until, "flavor")}
    assert sums(by_flavor["a100-80gb"]) == (1, 1, Decimal("4.1"))
    by_day = usage_report([team], since, until, "day")
    assert sum(row["preempted_cost"] for row in by_day) == Decimal("4.5")
    assert usage_report([team], since + timedelta(hours=4), until, "workload") == []  # the period counts


def test_an_open_segment_counts_its_holds_borrowed_units(team, member, flavors):
    now = timezone.now()
    run = TrainingRun.objects.create(team=team, created_by=member, name="open", flavor=flavors["a100-80gb"],
                                     state="running", image="r.example.com/t:1", command=["python"])
    hold_of(run, now - timedelta(minutes=30), 2, borrowed_units=1)
    [row] = usage_report([team], now - timedelta(hours=2), now + timedelta(hours=1), "workload", now)
    tenth = Decimal("1E-10")  # the ledger's precision: a piece cut at an hour boundary rounds on its own
    assert abs(row["gpu_hours"] - 1) <= tenth and abs(row["borrowed_gpu_hours"] - Decimal("0.5")) <= 2 * tenth


def test_the_usage_page_shows_borrowed_and_lost_work_beside_idle_waste(client, member, sharing):
    _response, body = page(client, member)
    figures = re.search(r'id="usage-sharing">(.*?)</p>', body, re.S).group(1)
    assert "<strong>1.00</strong> GPU-hours" in figures and "<strong>1.50</strong> GPU-hours (4.50 USD)" in figures


def test_the_usage_page_says_nothing_of_sharing_without_any(client, member, spend):
    _response, body = page(client, member)
    assert 'id="usage-sharing"' not in body


def test_the_csv_and_the_showback_carry_them(client, member, staff, sharing):
    client.force_login(member)
    rows = csv_rows(client.get(f"/api/v1/usage/?team=ml-research&{period(sharing['start'])}&group_by=flavor"
                               "&format=csv"))
    assert rows[1] == ["a100-80gb", "2.0000", "8.20", "0.0000", "0.00", "1.0000", "1.0000", "4.10", "USD", "2.0000", "2.0000"]
    client.force_login(staff)
    body = client.get("/admin/showback/").content.decode()
    assert re.search(r'id="showback-total">.*work lost to preemption: <strong>4.50 USD', body, re.S)


@pytest.fixture
def idle_workspace(spend, team, member, flavors):
    """On top of ``spend``: a workspace on an L4 busy for 1 h (0.80), then left idle for 2 h (1.60), and
    preempted once (0.5 GPU-hours lost, 0.40)."""
    workspace = Workspace.objects.create(team=team, created_by=member, name="notebook", flavor=flavors["l4"],
                                         image="r.example.com/nb:1")
    start = spend["start"]
    record_usage(team, workspace.ref, "l4", member, start, start + timedelta(hours=1), 1, False)
    record_usage(team, workspace.ref, "l4", member, start + timedelta(hours=1), start + timedelta(hours=3), 1, False,
                 idle=True)
    PreemptionEvent.objects.create(ref=workspace.ref, team=team, user=member, flavor=flavors["l4"], units=1,
                                   reason="preempted", lost_gpu_hours=Decimal("0.5"), lost_cost=Decimal("0.4"),
                                   at=start + timedelta(hours=1))
    return {**spend, "workspace": workspace}


def kind_table(body: str) -> list[tuple[str, str, str]]:
    """The page's card by kind: ``(label, cost, idle)`` per row as shown."""
    table = re.search(r'<table class="shares" id="kind-table">(.*?)</table>', body, re.S).group(1)
    return [(label, cells[2], cells[3]) for label, cells in
            ((row[0], re.findall(r'<td class="num[^"]*">([^<]*)</td>', row[1]))
             for row in re.findall(r"<tr>\s*<td>([^<]*)</td>(.*?)</tr>", table, re.S))]


def test_the_card_by_kind_shows_a_workspaces_idle_cost_in_its_kinds_row(client, member, idle_workspace):
    _response, body = page(client, member)
    names = kind_names()
    workspaces, runs = names[idle_workspace["workspace"].KIND_PREFIX], names[idle_workspace["big"].KIND_PREFIX]
    assert kind_table(body) == [(runs, "9.80 USD", "0.80 USD (8%)"), (workspaces, "2.40 USD", "1.60 USD (67%)")]
    # The summary splits the idle cost by kind, the costliest first: the workspace's idle waste apart.
    split = re.search(r'<span id="usage-idle-by-kind">(.*?)</span>', body, re.S).group(1)
    assert split == f"{workspaces} 1.60 USD, {runs} 0.80 USD"
    assert "<h2>By workload</h2>" in body and "By run and endpoint" not in body


def test_the_card_by_kind_shows_the_apis_report_by_kind(client, member, idle_workspace):
    """One rule per figure: the card and ``GET /usage/?group_by=kind`` both read billing.ledger.usage_rows."""
    _response, body = page(client, member)
    api = client.get(f"/api/v1/usage/?team=ml-research&{period(idle_workspace['start'])}&group_by=kind").json()
    # The API calls each kind by its noun, the page by the registry's heading for it: both from one prefix.
    names = {kind_nouns()[prefix]: name for prefix, name in kind_names().items()}
    assert kind_table(body) == [
        (names[row["group"]], f"{row['cost']} USD",
         f"{row['idle_cost']} USD ({Decimal(row['idle_cost']) / Decimal(row['cost']) * 100:.0f}%)"
         if Decimal(row["idle_cost"]) else "—")
        for row in api["results"]]
    assert {row["group"]: row["preempted_cost"] for row in api["results"]}["workspace"] == "0.40"
    csv_link = re.search(r'<section class="card" id="by-kind">.*?<a class="small" href="([^"]+)">CSV</a>', body,
                         re.S).group(1)
    assert csv_rows(client.get(csv_link.replace("&amp;", "&")))[1][0] == "run"


def test_an_open_idle_workspace_counts_in_its_kinds_row(team, member, flavors):
    now = timezone.now()
    workspace = Workspace.objects.create(team=team, created_by=member, name="open", flavor=flavors["l4"],
                                         image="r.example.com/nb:1", state="running")
    hold_of(workspace, now - timedelta(minutes=30), 1, open_idle=True)
    [row] = usage_report([team], now - timedelta(hours=2), now + timedelta(hours=1), "kind", now)
    tenth = Decimal("1E-10")  # the ledger's precision: a piece cut at an hour boundary rounds on its own
    assert row["group"] == "workspace" and workspace.KIND_PREFIX == "ws"  # the noun, not the refs' prefix
    assert abs(row["idle_cost"] - Decimal("0.4")) <= 2 * tenth and row["idle_cost"] == row["cost"]


def test_the_showback_splits_each_teams_idle_cost_by_kind_as_its_usage_page_does(client, member, staff,
                                                                                idle_workspace):
    _response, usage = page(client, member)
    split = re.search(r'<span id="usage-idle-by-kind">(.*?)</span>', usage, re.S).group(1)
    client.force_login(staff)
    body = client.get("/admin/showback/").content.decode()
    line = re.search(r'<tr data-team="ml-research">.*?<span class="quiet idle-by-kind">(.*?)</span>', body, re.S)
    assert line.group(1).split(" · ") == split.split(", ") and len(split.split(", ")) == 2
