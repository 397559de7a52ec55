"""``slipway alerts``: a team's alert rules from the terminal, against a live server (tighten only, as the API)."""

from __future__ import annotations

import json

import pytest

from teams.services import create_api_token
from workloads.models import TeamAlertSettings

pytestmark = pytest.mark.django_db(transaction=True)


def rows(stdout: str) -> dict[str, list[str]]:
    """The table's rows by rule (the words before the first figure)."""
    found = {}
    for line in stdout.splitlines()[2:]:
        words, _sep, figures = line.partition("  ")
        found[words.strip()] = figures.split()
    return found


def test_a_member_reads_the_teams_rules_the_platforms_and_what_applies(cli, team):
    TeamAlertSettings.objects.create(team=team, idle_minutes=10)
    result = cli("alerts")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "Team ml-research"
    assert result.stdout.splitlines()[1].split() == ["RULE", "TEAM'S", "PLATFORM'S", "APPLIES"]
    table = rows(result.stdout)
    assert table["idle: for at least"] == ["10", "min", "30", "min", "10", "min"]
    assert table["idle: GPU utilization under"] == ["-", "10", "%", "10", "%"]
    assert json.loads(cli("alerts", "--team", "ml-research", "-o", "json").stdout)["effective"]["idle_minutes"] == 10


def test_an_admin_tightens_and_resets_and_a_looser_rule_is_refused_naming_the_field(cli, team, team_admin):
    _token, raw = create_api_token(team_admin, "cli")
    tightened = cli("alerts", "--team", "ml-research", "--idle-pct", "20", "--memory-minutes", "2", SLIPWAY_TOKEN=raw)
    assert tightened.exit_code == 0, tightened.output
    assert rows(tightened.stdout)["idle: GPU utilization under"][-2:] == ["20", "%"]
    row = TeamAlertSettings.objects.get(team=team)
    assert (row.idle_util_pct, row.memory_minutes) == (20.0, 2)
    loose = cli("alerts", "--team", "ml-research", "--idle-minutes", "90", SLIPWAY_TOKEN=raw)
    assert loose.exit_code == 1 and "idle_minutes" in loose.stderr and "at most 30 min" in loose.stderr
    reset = cli("alerts", "--team", "ml-research", "--reset", "idle_util_pct", SLIPWAY_TOKEN=raw)
    assert reset.exit_code == 0 and TeamAlertSettings.objects.get(team=team).idle_util_pct is None


def test_a_member_may_not_change_them_and_a_change_needs_a_team(cli, team):
    assert cli("alerts", "--team", "ml-research", "--idle-minutes", "10").exit_code == 4
    assert cli("alerts", "--idle-minutes", "10").exit_code == 2
    assert not TeamAlertSettings.objects.exists()
