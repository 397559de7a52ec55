"""``/api/v1/flavors/``, ``/api/v1/teams/{slug}/usage/`` and the ``/api/v1/usage/`` cost report."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from billing.ledger import record_usage
from quotas.admission import admit
from quotas.decide import ResourceRequest

FLAVORS_URL = "/api/v1/flavors/"
USAGE_URL = "/api/v1/usage/"


def team_usage_url(slug: str) -> str:
    return f"/api/v1/teams/{slug}/usage/"


def test_it_lists_active_flavors_with_prices(api, flavors):
    flavors["h100-80gb"].active = False
    flavors["h100-80gb"].save()
    response = api.get(FLAVORS_URL)
    assert response.status_code == 200
    rows = {row["name"]: row for row in response.json()["results"]}
    assert set(rows) == {"a100-80gb", "l4", "a100-1g.10gb", "a100-2g.20gb", "a100-3g.40gb", "t4-ts4", "a10g-mps2"}
    mig = rows["a100-1g.10gb"]
    assert (mig["resource_name"], mig["mig_profile"], mig["gpu_memory_gb"]) == ("nvidia.com/mig-1g.10gb", "1g.10gb", 10)
    assert mig["gpu_fraction"] == pytest.approx(1 / 7, abs=1e-6)
    assert (mig["price_per_hour"], mig["spot_price_per_hour"]) == ("0.5857", "0.2343")
    assert rows["l4"]["mig_profile"] is None


def test_it_needs_credentials_for_flavors(db):
    assert APIClient().get(FLAVORS_URL).status_code == 401


def test_it_refuses_to_write_flavors(api, flavors):
    assert api.post(FLAVORS_URL, {"name": "x"}, format="json").status_code == 405


def test_it_reports_a_teams_quota_use_and_budget(api, budget_team):
    admit(budget_team, ResourceRequest("a100-80gb", 6, 6), "run:1")
    admit(budget_team, ResourceRequest("a100-80gb", 4, 4), "run:2")
    response = api.get(team_usage_url("ml-research"))
    assert response.status_code == 200
    body = response.json()
    assert {"flavor": "a100-80gb", "limit": 8, "in_use": 6, "queued": 4, "free": 2, "borrowed": 0,
            "borrowable": 0} in body["quotas"]
    assert body["budget"] == {"monthly_limit": "100.00", "spent_month": "0.00", "currency": "USD",
                              "alert_threshold_pct": 80, "alert": False, "committed": "0.00",
                              "burn_per_hour": "0.0000", "projected_month_end": "0.00", "runs_out_at": None}


def test_it_hides_other_teams_usage(api_client_for, outsider, quota_team):
    assert api_client_for(outsider).get(team_usage_url("ml-research")).status_code == 404
    assert api_client_for(outsider).get(team_usage_url("no-such-team")).status_code == 404


def test_it_shows_usage_to_viewers(api_client_for, viewer, quota_team):
    response = api_client_for(viewer).get(team_usage_url("ml-research"))
    assert response.status_code == 200
    assert response.json()["budget"]["monthly_limit"] is None


@pytest.fixture
def ledger(quota_team, member, viewer, flavors):
    """Three intervals in November 2026: two days, two flavors, two users, two workloads."""
    day1 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    day2 = day1 + timedelta(days=1)
    record_usage(quota_team, "run:1", "a100-80gb", member, day1, day1 + timedelta(hours=1), 2, False)  # 8.20
    record_usage(quota_team, "run:1", "a100-80gb", member, day2, day2 + timedelta(hours=1), 2, False)  # 8.20
    record_usage(quota_team, "ep:7", "l4", viewer, day2, day2 + timedelta(hours=1), 1, True)  # 0.32
    record_usage(quota_team, "ep:7", "l4", viewer, day2 + timedelta(hours=1), day2 + timedelta(hours=2), 1, True,
                 idle=True)  # 0.32, idle
    return quota_team


REPORT = {"since": "2026-11-01", "until": "2026-11-30"}


@pytest.mark.parametrize(("group_by", "expected"), [
    ("day", [("2026-11-02", "2.0000", "8.20", "0.0000", "0.00"), ("2026-11-03", "4.0000", "8.84", "1.0000", "0.32")]),
    ("flavor", [("a100-80gb", "4.0000", "16.40", "0.0000", "0.00"), ("l4", "2.0000", "0.64", "1.0000", "0.32")]),
    ("user", [("mia", "4.0000", "16.40", "0.0000", "0.00"), ("vic", "2.0000", "0.64", "1.0000", "0.32")]),
    # Costliest first (not "ep:7" before "run:1" as text sorts them).
    ("workload", [("run:1", "4.0000", "16.40", "0.0000", "0.00"), ("ep:7", "2.0000", "0.64", "1.0000", "0.32")]),
    # The workload kind by its noun (its refs' prefix is "ep"), each kind's idle cost apart.
    ("kind", [("run", "4.0000", "16.40", "0.0000", "0.00"), ("endpoint", "2.0000", "0.64", "1.0000", "0.32")]),
])
def test_it_reports_cost_grouped(api, ledger, group_by, expected):
    response = api.get(USAGE_URL, {**REPORT, "team": "ml-research", "group_by": group_by})
    assert response.status_code == 200
    rows = [(r["group"], r["gpu_hours"], r["cost"], r["idle_gpu_hours"], r["idle_cost"])
            for r in response.json()["results"]]
    assert rows == expected
    assert {r["currency"] for r in response.json()["results"]} == {"USD"}


def test_it_reports_cost_as_csv(api, ledger):
    response = api.get(USAGE_URL, {**REPORT, "group_by": "flavor", "format": "csv"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows == [["group", "gpu_hours", "cost", "idle_gpu_hours", "idle_cost", "borrowed_gpu_hours", "preempted_gpu_hours", "preempted_cost", "currency", "unit_hours", "physical_gpu_hours"],
                    ["a100-80gb", "4.0000", "16.40", "0.0000", "0.00", "0.0000", "0.0000", "0.00", "USD", "4.0000", "4.0000"],
                    ["l4", "2.0000", "0.64", "1.0000", "0.32", "0.0000", "0.0000", "0.00", "USD", "2.0000", "2.0000"]]


def test_it_reports_cost_by_kind_as_csv_named_for_it(api, ledger):
    response = api.get(USAGE_URL, {**REPORT, "team": "ml-research", "group_by": "kind", "format": "csv"})
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="usage-ml-research-2026-11-by-kind.csv"'
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][0] == "group" and [(row[0], row[2], row[4]) for row in rows[1:]] == [
        ("run", "16.40", "0.00"), ("endpoint", "0.64", "0.32")]


def test_it_limits_the_report_to_the_period(api, ledger):
    response = api.get(USAGE_URL, {"since": "2026-11-03", "until": "2026-11-03", "group_by": "day"})
    assert [r["group"] for r in response.json()["results"]] == ["2026-11-03"]


def test_it_rejects_bad_report_parameters(api, ledger):
    response = api.get(USAGE_URL, {"group_by": "planet", "since": "yesterday"})
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"group_by", "since"}
    response = api.get(USAGE_URL, {"since": "2026-11-05", "until": "2026-11-01"})
    assert response.status_code == 400 and "until" in response.json()["errors"]


def test_it_hides_other_teams_cost(api_client_for, outsider, ledger):
    client = api_client_for(outsider)
    assert client.get(USAGE_URL, {**REPORT, "team": "ml-research"}).status_code == 404
    assert client.get(USAGE_URL, REPORT).json()["results"] == []  # only the caller's own teams


# -- staff read any team's report (docs/api.md) -------------------------------------------------

@pytest.fixture
def other_ledger(other_team, outsider, flavors):
    day = datetime(2026, 11, 4, 9, 0, tzinfo=UTC)
    record_usage(other_team, "run:2", "l4", outsider, day, day + timedelta(hours=1), 1, False)  # 0.80
    return other_team


def test_staff_read_any_teams_report_and_every_team_without_one(api_client_for, staff, ledger, other_ledger):
    client = api_client_for(staff)  # a member of no team
    one = client.get(USAGE_URL, {**REPORT, "team": "vision", "group_by": "flavor"})
    assert one.status_code == 200
    assert [(r["group"], r["cost"]) for r in one.json()["results"]] == [("l4", "0.80")]
    every = client.get(USAGE_URL, {**REPORT, "group_by": "workload"}).json()["results"]
    assert {(r["team"], r["group"]) for r in every} == {("ml-research", "run:1"), ("ml-research", "ep:7"),
                                                        ("vision", "run:2")}
    csv_all = client.get(USAGE_URL, {**REPORT, "format": "csv"})
    assert csv_all["Content-Disposition"] == 'attachment; filename="usage-all-teams-2026-11-by-day.csv"'
    assert client.get(USAGE_URL, {**REPORT, "team": "no-such-team"}).status_code == 404


def test_members_still_get_404_for_another_team(api_client_for, outsider, member, ledger, other_ledger):
    assert api_client_for(outsider).get(USAGE_URL, {**REPORT, "team": "ml-research"}).status_code == 404
    assert api_client_for(member).get(USAGE_URL, {**REPORT, "team": "vision"}).status_code == 404
    rows = api_client_for(member).get(USAGE_URL, {**REPORT, "group_by": "workload"}).json()["results"]
    assert {r["team"] for r in rows} == {"ml-research"}


def test_a_zero_cost_row_prints_0_00_in_json_and_csv(api, quota_team, member, flavors):
    # A free flavor's row costs exactly nothing: plain cents, never 0E-10.
    flavors["l4"].price_per_hour = 0
    flavors["l4"].save()
    day = datetime(2026, 11, 5, 9, 0, tzinfo=UTC)
    record_usage(quota_team, "run:3", "l4", member, day, day + timedelta(hours=1), 1, False, idle=True)
    [row] = api.get(USAGE_URL, {**REPORT, "team": "ml-research", "group_by": "flavor"}).json()["results"]
    assert (row["cost"], row["idle_cost"]) == ("0.00", "0.00")
    body = api.get(USAGE_URL, {**REPORT, "group_by": "flavor", "format": "csv"}).content.decode()
    assert list(csv.reader(io.StringIO(body)))[1] == ["l4", "1.0000", "0.00", "1.0000", "0.00", "0.0000", "0.0000", "0.00", "USD", "1.0000", "1.0000"]
    assert "E-" not in body
