"""A team's alert rules: tighter than the platform's, never looser — in the service, the API and the Team page.

A looser value, or one that is not a rule at all, is refused with field errors (a 400) and
nothing is written; what applies is always the tighter of the team's and the platform's, even
after staff tighten a default the team had already tightened less.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404

from teams.models import AuditEvent
from workloads.models import TeamAlertSettings
from workloads.telemetry.alert_rules import AlertKind
from workloads.telemetry.alert_settings import platform_rules, rules_for, set_team_alert_settings, team_view

pytestmark = pytest.mark.django_db
URL = "/api/v1/teams/ml-research/alerts/"


def own(team) -> tuple:
    row = TeamAlertSettings.objects.filter(team=team).first()
    return (row.idle_util_pct, row.idle_minutes, row.memory_pct, row.memory_minutes) if row else None


# -- the rule ----------------------------------------------------------------------------------------


def test_a_team_may_tighten_every_rule_and_give_a_rule_back_to_the_platform(team, team_admin):
    set_team_alert_settings(team_admin, team, {"idle_util_pct": 20, "idle_minutes": 10, "memory_pct": 90,
                                               "memory_minutes": 2})
    assert own(team) == (20.0, 10, 90.0, 2)
    rules = rules_for(TeamAlertSettings.objects.get(team=team))
    assert (rules[AlertKind.IDLE].threshold, rules[AlertKind.IDLE].after) == (20.0, timedelta(minutes=10))
    assert (rules[AlertKind.MEMORY].threshold, rules[AlertKind.MEMORY].after) == (90.0, timedelta(minutes=2))
    assert rules[AlertKind.HOT] == platform_rules()[AlertKind.HOT]  # staff's alone
    set_team_alert_settings(team_admin, team, {"idle_util_pct": None, "memory_minutes": None})
    assert own(team) == (None, 10, 90.0, None)
    # The platform's own values are no looser than themselves: allowed.
    set_team_alert_settings(team_admin, team, {"idle_util_pct": 10, "idle_minutes": 30})
    assert own(team)[:2] == (10.0, 30)
    changes = AuditEvent.objects.filter(action=AuditEvent.Action.TEAM_SETTINGS_CHANGED, target="alerts of team ml-research")
    assert [e.details for e in changes.order_by("pk")] == [
        {"idle_util_pct": 20.0, "idle_minutes": 10, "memory_pct": 90.0, "memory_minutes": 2},
        {"idle_util_pct": None, "memory_minutes": None}, {"idle_util_pct": 10.0, "idle_minutes": 30}]


@pytest.mark.parametrize(("values", "field", "words"), [
    ({"idle_util_pct": 5}, "idle_util_pct", "only tighten the platform's rule: at least 10 %"),
    ({"idle_minutes": 60}, "idle_minutes", "at most 30 min"),
    ({"memory_pct": 99}, "memory_pct", "at most 95 %"),
    ({"memory_minutes": 6}, "memory_minutes", "at most 5 min"),
    ({"idle_util_pct": "20"}, "idle_util_pct", "Must be a number"),
    ({"idle_util_pct": True}, "idle_util_pct", "Must be a number"),
    ({"memory_pct": float("nan")}, "memory_pct", "Must be a number"),
    ({"idle_util_pct": 100}, "idle_util_pct", "above 0 and under 100"),
    ({"memory_pct": 0}, "memory_pct", "above 0 and under 100"),
    ({"memory_pct": -3}, "memory_pct", "above 0 and under 100"),
    ({"idle_minutes": 0}, "idle_minutes", "whole number of minutes from 1"),
    ({"idle_minutes": 2.5}, "idle_minutes", "whole number of minutes from 1"),
    ({"idle_minutes": -5}, "idle_minutes", "whole number of minutes from 1"),
    # An integer past a float's range (math.isfinite of it raised OverflowError: a 500).
    ({"idle_minutes": 10 ** 400}, "idle_minutes", "whole number of minutes from 1"),
    ({"memory_pct": 10 ** 400}, "memory_pct", "above 0 and under 100"),
    ({"idle_util_pct": 10**400}, "idle_util_pct", "above 0 and under 100"),
    ({"memory_pct": -(10**400)}, "memory_pct", "above 0 and under 100"),
    ({"temp_c": 80}, "temp_c", "Unknown setting"),
])
def test_a_looser_or_nonsense_value_is_refused_with_its_field_and_nothing_is_written(team, team_admin, values, field,
                                                                                      words):
    set_team_alert_settings(team_admin, team, {"idle_minutes": 15})
    with pytest.raises(ValidationError) as refused:
        set_team_alert_settings(team_admin, team, {**values, "memory_pct": 90} if field != "memory_pct" else values)
    assert list(refused.value.message_dict) == [field] and words in refused.value.message_dict[field][0]
    assert own(team) == (None, 15, None, None)


def test_only_the_teams_admins_change_its_rules(team, member, viewer, outsider, staff):
    for user in (member, viewer):
        with pytest.raises(PermissionDenied):
            set_team_alert_settings(user, team, {"idle_minutes": 10})
    for user in (outsider, staff):
        with pytest.raises(Http404):
            set_team_alert_settings(user, team, {"idle_minutes": 10})
    assert own(team) is None


def test_what_applies_is_the_tighter_even_after_staff_tighten_the_default(team, team_admin, settings):
    set_team_alert_settings(team_admin, team, {"idle_util_pct": 15, "idle_minutes": 20, "memory_pct": 90})
    settings.SLIPWAY_ALERT_IDLE_UTIL_PCT = 25  # staff raise the idle threshold past the team's 15
    settings.SLIPWAY_ALERT_IDLE_MINUTES = 10  # and shorten the window below the team's 20
    views = {v.field.name: v for v in team_view(team)}
    assert (views["idle_util_pct"].own, views["idle_util_pct"].default, views["idle_util_pct"].effective) == (15.0, 25.0, 25.0)
    assert (views["idle_minutes"].own, views["idle_minutes"].effective) == (20, 10)
    assert (views["memory_pct"].own, views["memory_pct"].effective) == (90.0, 90.0)
    assert (views["memory_minutes"].own, views["memory_minutes"].effective) == (None, 5)


# -- the API ------------------------------------------------------------------------------------------


def test_members_read_the_rules_the_platforms_and_what_applies(api_client_for, viewer, team, team_admin):
    set_team_alert_settings(team_admin, team, {"idle_minutes": 10})
    response = api_client_for(viewer).get(URL)
    assert response.status_code == 200
    assert response.json() == {
        "team": {"idle_util_pct": None, "idle_minutes": 10, "memory_pct": None, "memory_minutes": None},
        "platform": {"idle_util_pct": 10.0, "idle_minutes": 30, "memory_pct": 95.0, "memory_minutes": 5,
                     "temp_c": 85.0, "temp_minutes": 5, "clear_minutes": 10},
        "effective": {"idle_util_pct": 10.0, "idle_minutes": 10, "memory_pct": 95.0, "memory_minutes": 5}}


def test_an_admin_tightens_through_the_api(api_client_for, team_admin, team):
    response = api_client_for(team_admin).patch(URL, {"idle_util_pct": 12.5, "memory_minutes": 3}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["effective"]["idle_util_pct"] == 12.5 and response.json()["team"]["memory_minutes"] == 3
    assert own(team) == (12.5, None, None, 3)


@pytest.mark.parametrize("body", [{"idle_util_pct": 5}, {"idle_minutes": "ten"}, {"memory_pct": [95]},
                                  {"idle_minutes": 10, "colour": "red"}, ["idle_minutes", 10]])
def test_the_api_refuses_a_looser_or_nonsense_body_with_field_errors_and_writes_nothing(api_client_for, team_admin, team,
                                                                                       body):
    response = api_client_for(team_admin).patch(URL, body, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert errors and all(isinstance(messages, list) and messages for messages in errors.values())
    assert own(team) is None


@pytest.mark.parametrize("field", ["idle_minutes", "memory_pct"])
def test_the_api_refuses_an_integer_past_a_floats_range_with_its_field(api_client_for, team_admin, team, field):
    body = f'{{"{field}": 1{"0" * 400}}}'  # JSON numbers have no size limit: this one is an int of 401 digits
    response = api_client_for(team_admin).patch(URL, body, content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]
    assert own(team) is None


def test_the_api_is_the_teams_alone(api_client_for, member, outsider, staff, team):
    assert api_client_for(member).patch(URL, {"idle_minutes": 10}, format="json").status_code == 403
    for user in (outsider, staff):  # staff set the platform's defaults, not a team's rules
        assert api_client_for(user).get(URL).status_code == 404
        assert api_client_for(user).patch(URL, {"idle_minutes": 10}, format="json").status_code == 404
    assert api_client_for(member).get("/api/v1/teams/nope/alerts/").status_code == 404
    assert own(team) is None


# -- the Team page ---------------------------------------------------------------------------------------


def test_the_team_page_shows_the_rules_and_its_admins_the_form(client, team, member, team_admin):
    set_team_alert_settings(team_admin, team, {"idle_util_pct": 20})
    client.force_login(member)
    html = client.get("/teams/ml-research/").content.decode()
    assert 'id="alert-rule-idle_util_pct"' in html and "<strong>20 %</strong>" in html
    assert 'action="/teams/ml-research/alerts/"' not in html
    client.force_login(team_admin)
    html = client.get("/teams/ml-research/").content.decode()
    assert 'action="/teams/ml-research/alerts/"' in html and 'name="idle_util_pct" value="20.0"' in html


def test_an_admin_saves_tighter_rules_on_the_team_page(client, team, team_admin):
    client.force_login(team_admin)
    response = client.post("/teams/ml-research/alerts/", {"idle_util_pct": "15", "idle_minutes": "",
                                                          "memory_pct": "", "memory_minutes": "2"})
    assert response.status_code == 302 and response.url == "/teams/ml-research/"
    assert own(team) == (15.0, None, None, 2)


@pytest.mark.parametrize(("data", "words"), [({"idle_minutes": "45"}, "at most 30 min"),
                                             ({"memory_pct": "lots"}, "Enter a number"),
                                             ({"idle_minutes": "1" + "0" * 400}, "whole number of minutes from 1")])
def test_the_team_page_refuses_a_looser_or_nonsense_rule_next_to_its_field(client, team, team_admin, data, words):
    client.force_login(team_admin)
    response = client.post("/teams/ml-research/alerts/", data)
    assert response.status_code == 400
    assert words in response.content.decode()
    assert own(team) is None
