"""The Team page: every member sees people, roles, quota and budget; the team's admins manage it there.

Refusals follow the house style: outsiders 404, viewers and members 403 on the management
routes, bad input a 400 with the error next to what was refused and nothing written.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from quotas.services import set_team_budget
from teams.middleware import SESSION_KEY
from teams.models import AuditEvent, Membership, Role, Team
from tests.factories import add_member, make_team, make_user

pytestmark = pytest.mark.django_db

PAGE = "/teams/ml-research/"


def membership_of(user, team_slug: str = "ml-research") -> Membership:
    return Membership.objects.get(user=user, team__slug=team_slug)


@pytest.fixture
def team_admin_client(client, team_admin):
    client.force_login(team_admin)
    return client


# -- the page ------------------------------------------------------------------------------------


def test_the_navigation_leads_to_the_current_teams_page(client, member, team, other_team):
    add_member(other_team, member, Role.VIEWER)
    client.force_login(member)
    html = client.get("/").content.decode()
    assert '<a href="/teams/">Team</a>' in html
    assert client.get("/teams/").url == PAGE
    client.post("/team/switch/", {"team": "vision"})
    assert client.session[SESSION_KEY] == "vision" and client.get("/teams/").url == "/teams/vision/"
    assert 'href="/teams/" aria-current="page"' in client.get("/teams/vision/").content.decode()


def test_someone_in_no_team_is_told_to_ask_for_one(client, db):
    client.force_login(make_user("lonely"))
    response = client.get("/teams/")
    assert response.status_code == 200 and "not in any team" in response.content.decode().lower()


def test_staff_in_no_team_land_on_the_capacity_page(client, db):
    client.force_login(make_user("operator", staff=True))
    assert client.get("/teams/").url == "/admin/capacity/"


def test_every_member_sees_people_roles_quota_and_budget(client, viewer, member, team_admin, team, quota, staff):
    set_team_budget(staff, team, Decimal("500"))
    client.force_login(viewer)
    response = client.get(PAGE)
    html = response.content.decode()
    assert response.status_code == 200
    for username, role in (("ada", "Admin"), ("mia", "Member"), ("vic", "Viewer")):
        row = html[html.index(f'id="member-{Membership.objects.get(user__username=username).pk}"'):]
        row = row[:row.index("</tr>")]
        assert username in row and f'<span class="badge">{role}</span>' in row
    assert 'id="usage"' in html and "a100-80gb" in html and "0 / 8" in html  # the dashboard's quota table
    assert "spent this month of 500.00 USD" in html and 'id="budget-forecast"' in html  # and its budget card
    assert "Any member" in html  # members may cancel teammates' work (the default)


@pytest.mark.parametrize("user_fixture", ["viewer", "member"])
def test_viewers_and_members_see_no_management_controls(request, client, team, team_admin, user_fixture):
    client.force_login(request.getfixturevalue(user_fixture))
    html = client.get(PAGE).content.decode()
    assert "/role/" not in html and "/remove/" not in html and "/settings/" not in html
    assert 'id="add-member"' not in html and "the team's admins manage its members" in html


def test_a_team_admin_sees_the_management_controls(team_admin_client, member, team):
    html = team_admin_client.get(PAGE).content.decode()
    mia = membership_of(member).pk
    assert f'action="/teams/ml-research/members/{mia}/role/"' in html
    assert f'href="/teams/ml-research/members/{mia}/remove/"' in html
    assert 'action="/teams/ml-research/members/"' in html and 'action="/teams/ml-research/settings/"' in html
    assert 'id="id_members_may_cancel_teammates_work" checked' in html


def test_an_outsider_gets_404_for_the_page(client, outsider, team):
    client.force_login(outsider)
    assert client.get(PAGE).status_code == 404
    assert client.get("/teams/no-such-team/").status_code == 404


def test_the_page_refuses_posts_and_the_actions_refuse_gets(team_admin_client, member, team):
    mia = membership_of(member).pk
    assert team_admin_client.post(PAGE).status_code == 405
    for path in ("/teams/ml-research/members/", f"/teams/ml-research/members/{mia}/role/",
                 "/teams/ml-research/settings/"):
        assert team_admin_client.get(path).status_code == 405, path
    assert membership_of(member).role == Role.MEMBER


def test_it_reads_the_page_in_a_constant_number_of_queries(team_admin_client, team, quota, django_assert_num_queries):
    with CaptureQueriesContext(connection) as queries:
        assert team_admin_client.get(PAGE).status_code == 200
    few = len(queries)
    for n in range(12):
        add_member(team, make_user(f"extra{n}"), Role.MEMBER)
    with django_assert_num_queries(few):
        team_admin_client.get(PAGE)


# -- adding a member -----------------------------------------------------------------------------


def test_a_team_admin_adds_a_member_by_username(team_admin_client, team):
    newcomer = make_user("nina")
    response = team_admin_client.post("/teams/ml-research/members/", {"username": "nina", "role": "viewer"})
    assert response.status_code == 302 and response.url == PAGE
    assert membership_of(newcomer).role == Role.VIEWER
    assert "nina added as viewer." in team_admin_client.get(PAGE).content.decode()
    event = AuditEvent.objects.get(action=AuditEvent.Action.MEMBERSHIP_CHANGED)
    assert (event.actor_name, event.target, event.details) == ("ada", "nina", {"change": "added", "role": "viewer"})


@pytest.mark.parametrize(("data", "message"), [
    ({"username": "nobody", "role": "member"}, "No active user is named &#x27;nobody&#x27;."),
    ({"username": "mia", "role": "member"}, "mia is already in the team (member)."),
    ({"username": "", "role": "member"}, "This field is required."),
    ({"username": "nina", "role": "owner"}, "Select a valid choice. owner is not one of the available choices."),
])
def test_bad_additions_are_a_400_with_the_error_next_to_the_field(team_admin_client, member, team, data, message):
    make_user("nina")
    before = Membership.objects.count()
    response = team_admin_client.post("/teams/ml-research/members/", data)
    assert response.status_code == 400
    html = response.content.decode()
    assert message in html and "has-error" in html and 'id="add-member"' in html
    assert Membership.objects.count() == before and not AuditEvent.objects.filter(action=AuditEvent.Action.MEMBERSHIP_CHANGED).exists()


@pytest.mark.parametrize("user_fixture", ["viewer", "member"])
def test_viewers_and_members_cannot_add_members(request, client, team, user_fixture):
    make_user("nina")
    client.force_login(request.getfixturevalue(user_fixture))
    assert client.post("/teams/ml-research/members/", {"username": "nina", "role": "admin"}).status_code == 403
    assert not Membership.objects.filter(user__username="nina").exists()


# -- changing a role -----------------------------------------------------------------------------


def test_a_team_admin_changes_a_role(team_admin_client, member, team):
    mia = membership_of(member).pk
    response = team_admin_client.post(f"/teams/ml-research/members/{mia}/role/", {"role": "admin"})
    assert response.status_code == 302 and response.url == PAGE
    assert membership_of(member).role == Role.ADMIN
    assert "mia is now admin." in team_admin_client.get(PAGE).content.decode()
    event = AuditEvent.objects.get(action=AuditEvent.Action.MEMBERSHIP_CHANGED)
    assert event.details == {"change": "changed", "role": "admin", "old_role": "member"}


def test_the_last_admin_cannot_demote_themselves(team_admin_client, team_admin, member, team):
    ada = membership_of(team_admin).pk
    response = team_admin_client.post(f"/teams/ml-research/members/{ada}/role/", {"role": "member"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "ada is the team&#x27;s last admin: make someone else admin first." in html
    assert membership_of(team_admin).role == Role.ADMIN and not AuditEvent.objects.filter(action=AuditEvent.Action.MEMBERSHIP_CHANGED).exists()


def test_a_deactivated_admin_leaves_the_page_one_admin_who_manages_the_team(team_admin_client, team_admin, member,
                                                                           team):
    """The page offers no Remove for the only admin who can sign in, as the service refuses it."""
    Membership.objects.filter(user=member).update(role=Role.ADMIN)
    member.is_active = False
    member.save(update_fields=["is_active"])
    html = team_admin_client.get(PAGE).content.decode()
    ada = membership_of(team_admin).pk
    assert "the team's only admin" in html and f"/members/{ada}/remove/" not in html
    assert f"/members/{membership_of(member).pk}/remove/" in html  # the deactivated one may go


def test_an_unknown_role_is_a_400(team_admin_client, member, team):
    response = team_admin_client.post(f"/teams/ml-research/members/{membership_of(member).pk}/role/", {"role": "root"})
    assert response.status_code == 400 and "Select a valid choice" in response.content.decode()
    assert membership_of(member).role == Role.MEMBER


def test_a_member_cannot_promote_themselves(client, member, team, team_admin):
    client.force_login(member)
    response = client.post(f"/teams/ml-research/members/{membership_of(member).pk}/role/", {"role": "admin"})
    assert response.status_code == 403 and membership_of(member).role == Role.MEMBER


# -- removing a member ---------------------------------------------------------------------------


def test_a_team_admin_removes_a_member(team_admin_client, member, team):
    response = team_admin_client.post(f"/teams/ml-research/members/{membership_of(member).pk}/remove/")
    assert response.status_code == 302 and response.url == PAGE
    assert not Membership.objects.filter(user=member).exists()
    assert "mia removed from ML Research." in team_admin_client.get(PAGE).content.decode()


def test_remove_asks_first_and_only_the_confirmation_removes(team_admin_client, member, outsider, team):
    path = f"/teams/ml-research/members/{membership_of(member).pk}/remove/"
    asked = team_admin_client.get(path)
    html = asked.content.decode()
    assert asked.status_code == 200 and "Remove mia from ML Research?" in html and 'id="confirm-remove"' in html
    assert Membership.objects.filter(user=member).exists()
    for user, status in ((outsider, 404), (member, 403)):  # the confirmation page follows the action's rules
        other = Client()
        other.force_login(user)
        assert other.get(path).status_code == status
    assert team_admin_client.post(path).status_code == 302
    assert not Membership.objects.filter(user=member).exists()


def test_the_last_admin_cannot_be_removed(team_admin_client, team_admin, team):
    response = team_admin_client.post(f"/teams/ml-research/members/{membership_of(team_admin).pk}/remove/")
    assert response.status_code == 400 and "last admin" in response.content.decode()
    assert Membership.objects.filter(user=team_admin).exists()


def test_the_page_offers_no_remove_button_for_the_only_admin_until_there_is_a_second(team_admin_client, team_admin,
                                                                                     member, team):
    ada = membership_of(team_admin).pk
    html = team_admin_client.get(PAGE).content.decode()
    assert f'href="/teams/ml-research/members/{ada}/remove/"' not in html and "the team's only admin" in html
    Membership.objects.filter(user=member).update(role=Role.ADMIN)
    html = team_admin_client.get(PAGE).content.decode()
    assert f'href="/teams/ml-research/members/{ada}/remove/"' in html and "the team's only admin" not in html


def test_an_admin_who_leaves_goes_to_the_dashboard(team_admin_client, team_admin, member, other_team, team):
    add_member(other_team, team_admin, Role.MEMBER)  # still in a team, so the dashboard shows one
    Membership.objects.filter(user=member).update(role=Role.ADMIN)
    response = team_admin_client.post(f"/teams/ml-research/members/{membership_of(team_admin).pk}/remove/")
    assert response.status_code == 302 and response.url == "/"
    assert team_admin_client.get(PAGE).status_code == 404


def test_a_member_cannot_remove_anyone(client, member, team_admin, team):
    client.force_login(member)
    assert client.post(f"/teams/ml-research/members/{membership_of(team_admin).pk}/remove/").status_code == 403
    assert Membership.objects.filter(team=team).count() == 2


def test_an_admin_of_two_teams_cannot_move_a_membership_across_them(team_admin_client, team_admin, outsider, team):
    vision = Team.objects.get(slug="vision")
    add_member(vision, team_admin, Role.ADMIN)
    otto = membership_of(outsider, "vision").pk
    assert team_admin_client.post(f"/teams/ml-research/members/{otto}/remove/").status_code == 404
    assert team_admin_client.post(f"/teams/ml-research/members/{otto}/role/", {"role": "viewer"}).status_code == 404
    assert membership_of(outsider, "vision").role == Role.MEMBER


# -- settings ------------------------------------------------------------------------------------


def test_a_team_admin_turns_the_cancel_setting_off_and_on(team_admin_client, team):
    response = team_admin_client.post("/teams/ml-research/settings/", {})
    assert response.status_code == 302 and response.url == PAGE
    assert Team.objects.get(pk=team.pk).members_may_cancel_teammates_work is False
    assert "Admins only" in team_admin_client.get(PAGE).content.decode()
    team_admin_client.post("/teams/ml-research/settings/", {"members_may_cancel_teammates_work": "on"})
    assert Team.objects.get(pk=team.pk).members_may_cancel_teammates_work is True
    changes = AuditEvent.objects.filter(action=AuditEvent.Action.TEAM_SETTINGS_CHANGED).order_by("pk")
    assert [e.details["members_may_cancel_teammates_work"] for e in changes] == [False, True]


def test_settings_are_per_team(team_admin_client, team_admin, team):
    other = make_team("nlp")
    add_member(other, team_admin, Role.ADMIN)
    team_admin_client.post("/teams/nlp/settings/", {})
    assert Team.objects.get(slug="nlp").members_may_cancel_teammates_work is False
    assert Team.objects.get(pk=team.pk).members_may_cancel_teammates_work is True
