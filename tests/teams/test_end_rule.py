"""Who may end a workload (cancel a run, delete an endpoint): one rule, the same in every door.

Team admins end any of the team's work; members their own, and their teammates' only when the
team's setting lets them; viewers never; outsiders get 404; staff any team's (admin console).
The services enforce it, the API answers 403 in its error shape, and the pages show a cancel
or delete button exactly when the rule allows.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404

from inference import services as endpoints
from inference.constants import EndpointState
from jobs import services as runs
from jobs.constants import RunState
from teams.models import Role, Team
from teams.permissions import check_may_end, get_membership, may_end
from tests.factories import add_member, make_user
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db


@pytest.fixture
def teammate(team):
    user = make_user("tom")
    add_member(team, user, Role.MEMBER)
    return user


@pytest.fixture
def teammates_run(teammate, team, quota, published):
    return runs.submit_run(teammate, team, {k: v for k, v in run_payload().items() if k != "team"})


@pytest.fixture
def teammates_endpoint(teammate, team, ep_quota, published):
    return endpoints.create_endpoint(teammate, team, endpoint_payload())


def members_may_cancel_teammates_work(team: Team, allowed: bool) -> None:
    Team.objects.filter(pk=team.pk).update(members_may_cancel_teammates_work=allowed)


# -- the rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("actor", "setting", "allowed"), [
    ("team_admin", False, True), ("team_admin", True, True),
    ("teammate", False, True), ("teammate", True, True),  # their own work
    ("member", True, True), ("member", False, False),  # a teammate's work
    ("viewer", True, False), ("viewer", False, False),
    ("outsider", True, False),
    ("staff", False, True),
])
def test_it_decides_who_may_end_a_run(request, team, teammates_run, actor, setting, allowed):
    members_may_cancel_teammates_work(team, setting)
    user = request.getfixturevalue(actor)
    assert may_end(user, teammates_run, get_membership(user, team)) is allowed


def test_it_hides_the_work_from_outsiders_with_404_and_refuses_too_low_roles_with_403(
        team, teammates_run, outsider, viewer, member):
    members_may_cancel_teammates_work(team, False)
    with pytest.raises(Http404):
        check_may_end(outsider, teammates_run)
    with pytest.raises(PermissionDenied, match="needs the member role"):
        check_may_end(viewer, teammates_run)
    with pytest.raises(PermissionDenied, match="does not let members cancel their teammates' work"):
        check_may_end(member, teammates_run)


def test_the_services_enforce_it_and_change_nothing_when_refused(team, teammates_run, teammates_endpoint, member,
                                                                 team_admin):
    members_may_cancel_teammates_work(team, False)
    endpoint_state = teammates_endpoint.state
    with pytest.raises(PermissionDenied):
        runs.cancel_run(member, teammates_run)
    with pytest.raises(PermissionDenied):
        endpoints.delete_endpoint(member, teammates_endpoint)
    teammates_run.refresh_from_db()
    teammates_endpoint.refresh_from_db()
    assert (teammates_run.state, teammates_endpoint.state) == (RunState.ADMITTED, endpoint_state)
    assert runs.cancel_run(team_admin, teammates_run).state == RunState.CANCELLED
    assert endpoints.delete_endpoint(team_admin, teammates_endpoint).state == EndpointState.DELETING


# -- the API -------------------------------------------------------------------------------------


def test_the_api_refuses_a_member_cancelling_a_teammates_run_with_403(api, team, teammates_run):
    members_may_cancel_teammates_work(team, False)
    response = api.post(f"/api/v1/runs/{teammates_run.pk}/cancel/")
    assert response.status_code == 403
    assert list(response.json()) == ["errors"] and "teammates' work" in response.json()["errors"]["detail"][0]
    teammates_run.refresh_from_db()
    assert teammates_run.state == RunState.ADMITTED


def test_the_api_tells_callers_what_their_team_allows(api, team):
    members_may_cancel_teammates_work(team, False)
    assert api.get("/api/v1/teams/").json()["results"][0]["members_may_cancel_teammates_work"] is False


def test_the_api_lets_a_member_cancel_a_teammates_run_when_the_team_allows_it(api, team, teammates_run):
    members_may_cancel_teammates_work(team, True)
    response = api.post(f"/api/v1/runs/{teammates_run.pk}/cancel/")
    assert response.status_code == 202 and response.json()["state"] == "cancelled"


def test_the_api_lets_a_team_admin_cancel_any_run(api_client_for, team_admin, team, teammates_run):
    members_may_cancel_teammates_work(team, False)
    response = api_client_for(team_admin).post(f"/api/v1/runs/{teammates_run.pk}/cancel/")
    assert response.status_code == 202 and response.json()["reason"] == "cancelled by ada"


def test_the_api_refuses_a_member_deleting_a_teammates_endpoint_with_403(api, team, teammates_endpoint):
    members_may_cancel_teammates_work(team, False)
    response = api.delete(f"/api/v1/endpoints/{teammates_endpoint.pk}/")
    assert response.status_code == 403 and "teammates' work" in response.json()["errors"]["detail"][0]
    teammates_endpoint.refresh_from_db()
    assert teammates_endpoint.state != EndpointState.DELETING


def test_the_api_lets_a_member_end_their_own_work_whatever_the_setting(api_client_for, teammate, team, teammates_run,
                                                                      teammates_endpoint):
    members_may_cancel_teammates_work(team, False)
    api = api_client_for(teammate)
    assert api.post(f"/api/v1/runs/{teammates_run.pk}/cancel/").status_code == 202
    assert api.delete(f"/api/v1/endpoints/{teammates_endpoint.pk}/").status_code == 202


# -- the pages: buttons shown exactly when the rule allows ---------------------------------------


def test_a_member_sees_no_cancel_button_on_a_teammates_run_when_the_team_forbids_it(client, member, team,
                                                                                   teammates_run):
    members_may_cancel_teammates_work(team, False)
    client.force_login(member)
    html = client.get(f"/runs/{teammates_run.pk}/").content.decode()
    assert f"/runs/{teammates_run.pk}/cancel/" not in html and f"/runs/new/?from={teammates_run.pk}" in html
    # The button is there, disabled, and the page says why (the same words as the refusal).
    why = ("Only ML Research&#x27;s admins and tom (who started it) may stop it: the team does not let members "
           "cancel their teammates&#x27; work.")
    assert f'<button type="button" class="danger" disabled title="{why}"' in html
    assert f'<p class="muted small why-not" id="cancel-refused">{why}</p>' in html
    assert client.post(f"/runs/{teammates_run.pk}/cancel/").status_code == 403
    teammates_run.refresh_from_db()
    assert teammates_run.state == RunState.ADMITTED


@pytest.mark.parametrize(("actor", "setting"), [("member", True), ("team_admin", False), ("teammate", False)])
def test_the_cancel_button_shows_where_the_rule_allows_and_works(request, client, team, teammates_run, actor,
                                                                 setting):
    members_may_cancel_teammates_work(team, setting)
    client.force_login(request.getfixturevalue(actor))
    html = client.get(f"/runs/{teammates_run.pk}/").content.decode()
    assert f'action="/runs/{teammates_run.pk}/cancel/"' in html
    assert client.post(f"/runs/{teammates_run.pk}/cancel/").status_code == 302
    teammates_run.refresh_from_db()
    assert teammates_run.state == RunState.CANCELLED


def test_a_member_sees_no_delete_button_on_a_teammates_endpoint_when_the_team_forbids_it(
        client, member, team_admin, team, teammates_endpoint):
    members_may_cancel_teammates_work(team, False)
    client.force_login(member)
    html = client.get(f"/endpoints/{teammates_endpoint.pk}/").content.decode()
    assert f"/endpoints/{teammates_endpoint.pk}/delete/" not in html
    assert 'id="delete-refused">Only ML Research&#x27;s admins and tom (who started it) may stop it' in html
    assert f"/endpoints/{teammates_endpoint.pk}/edit/" in html  # changing it is still a member's right
    assert client.get(f"/endpoints/{teammates_endpoint.pk}/delete/").status_code == 403
    assert client.post(f"/endpoints/{teammates_endpoint.pk}/delete/").status_code == 403
    teammates_endpoint.refresh_from_db()
    assert teammates_endpoint.state != EndpointState.DELETING
    client.force_login(team_admin)
    assert f"/endpoints/{teammates_endpoint.pk}/delete/" in client.get(f"/endpoints/{teammates_endpoint.pk}/").content.decode()


def test_a_viewer_sees_neither_cancel_nor_delete_whatever_the_setting(client, viewer, team, teammates_run,
                                                                      teammates_endpoint):
    members_may_cancel_teammates_work(team, True)
    client.force_login(viewer)
    assert "/cancel/" not in client.get(f"/runs/{teammates_run.pk}/").content.decode()
    assert "/delete/" not in client.get(f"/endpoints/{teammates_endpoint.pk}/").content.decode()


def test_staff_outside_the_team_read_its_pages_without_controls(client, staff, team, teammates_run,
                                                                 teammates_endpoint):
    client.force_login(staff)
    run_page = client.get(f"/runs/{teammates_run.pk}/").content.decode()
    assert "You are reading ML Research's run as platform staff" in run_page
    assert "/cancel/" not in run_page and "/runs/new/?from=" not in run_page and "disabled" not in run_page
    endpoint_page = client.get(f"/endpoints/{teammates_endpoint.pk}/").content.decode()
    assert "as platform staff" in endpoint_page and "/delete/" not in endpoint_page and "/edit/" not in endpoint_page
    for path in (f"/runs/{teammates_run.pk}/cancel/", f"/endpoints/{teammates_endpoint.pk}/delete/",
                 f"/endpoints/{teammates_endpoint.pk}/edit/"):
        assert client.post(path).status_code == 404, path
    teammates_run.refresh_from_db()
    assert teammates_run.state == RunState.ADMITTED
