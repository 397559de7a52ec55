"""Team self-service actions (teams.services): add a member, change a role, remove one, team settings.

Only the team's admins may; the last admin cannot be demoted or removed; every change writes an
audit event; a removed member loses the team at once, session and tokens alike.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404
from rest_framework.test import APIClient

from teams.events import membership_changed
from teams.models import AuditEvent, Membership, Role, Team
from teams.services import add_member, change_role, create_api_token, remove_member, set_team_settings
from tests.factories import make_user
from tests.threads import in_thread

pytestmark = pytest.mark.django_db


def membership_of(user) -> Membership:
    return Membership.objects.select_related("team", "user").get(user=user)


def membership_events() -> list[tuple]:
    return [(e.actor_name, e.team.slug, e.target, e.details)
            for e in AuditEvent.objects.filter(action=AuditEvent.Action.MEMBERSHIP_CHANGED).order_by("pk")]


# -- add -----------------------------------------------------------------------------------------


def test_it_adds_an_existing_user_with_a_role_and_audits_it(team, team_admin):
    newcomer = make_user("nina")
    membership = add_member(team_admin, team, "nina", Role.MEMBER, ip="10.0.0.7")
    assert (membership.team, membership.user, membership.role) == (team, newcomer, Role.MEMBER)
    assert membership_events() == [("ada", "ml-research", "nina", {"change": "added", "role": "member"})]
    assert AuditEvent.objects.get(action=AuditEvent.Action.MEMBERSHIP_CHANGED).ip_address == "10.0.0.7"


@pytest.mark.parametrize(("username", "role", "field", "message"), [
    ("nobody", Role.MEMBER, "username", "No active user is named 'nobody'."),
    ("mia", Role.VIEWER, "username", "mia is already in the team (member)."),
    ("nina", "owner", "role", "Pick one of: viewer, member, admin."),
])
def test_it_refuses_bad_additions_with_a_field_error_and_writes_nothing(team, team_admin, member, username, role,
                                                                        field, message):
    make_user("nina")
    before = Membership.objects.count()
    with pytest.raises(ValidationError) as caught:
        add_member(team_admin, team, username, role)
    assert caught.value.message_dict == {field: [message]}
    assert Membership.objects.count() == before and membership_events() == []


def test_it_does_not_add_deactivated_accounts(team, team_admin):
    gone = make_user("gone")
    gone.is_active = False
    gone.save(update_fields=["is_active"])
    with pytest.raises(ValidationError, match="No active user"):
        add_member(team_admin, team, "gone", Role.MEMBER)


# -- who may -------------------------------------------------------------------------------------


@pytest.mark.parametrize("actor", ["member", "viewer"])
def test_only_team_admins_manage_the_team(request, team, team_admin, actor):
    user = request.getfixturevalue(actor)
    make_user("nina")
    target = membership_of(team_admin)
    for action in (lambda: add_member(user, team, "nina", Role.MEMBER), lambda: change_role(user, target, Role.VIEWER),
                   lambda: remove_member(user, target), lambda: set_team_settings(user, team, False)):
        with pytest.raises(PermissionDenied, match="needs the admin role"):
            action()
    assert membership_of(team_admin).role == Role.ADMIN and Team.objects.get().members_may_cancel_teammates_work
    assert not AuditEvent.objects.exists()


def test_an_outsider_gets_404_even_as_admin_of_their_own_team(team, other_team, member):
    boss = make_user("boss")
    Membership.objects.create(team=other_team, user=boss, role=Role.ADMIN)
    make_user("nina")
    with pytest.raises(Http404):
        add_member(boss, team, "nina", Role.ADMIN)
    with pytest.raises(Http404):
        remove_member(boss, membership_of(member))
    with pytest.raises(Http404):
        set_team_settings(boss, team, False)


# -- change a role -------------------------------------------------------------------------------


def test_it_changes_a_role_and_audits_old_and_new(team, team_admin, member):
    changed = change_role(team_admin, membership_of(member), Role.ADMIN)
    assert changed.role == Role.ADMIN and membership_of(member).role == Role.ADMIN
    assert membership_events() == [("ada", "ml-research", "mia",
                                    {"change": "changed", "role": "admin", "old_role": "member"})]


def test_it_writes_nothing_when_the_role_is_unchanged(team, team_admin, member):
    change_role(team_admin, membership_of(member), Role.MEMBER)
    assert membership_events() == []


def test_the_last_admin_cannot_demote_themselves(team, team_admin, member):
    with pytest.raises(ValidationError) as caught:
        change_role(team_admin, membership_of(team_admin), Role.MEMBER)
    assert caught.value.message_dict == {"role": ["ada is the team's last admin: make someone else admin first."]}
    assert membership_of(team_admin).role == Role.ADMIN and membership_events() == []


def test_a_deactivated_admin_is_not_another_admin(team, team_admin, member):
    """An account staff deactivated cannot sign in: its admin role leaves the team nobody to manage it."""
    change_role(team_admin, membership_of(member), Role.ADMIN)
    member.is_active = False
    member.save(update_fields=["is_active"])
    with pytest.raises(ValidationError) as caught:
        change_role(team_admin, membership_of(team_admin), Role.MEMBER)
    assert caught.value.message_dict == {"role": ["ada is the team's last admin: make someone else admin first."]}
    with pytest.raises(ValidationError, match="last admin"):
        remove_member(team_admin, membership_of(team_admin))
    assert membership_of(team_admin).role == Role.ADMIN


def test_an_admin_may_step_down_once_another_admin_is_there(team, team_admin, member):
    change_role(team_admin, membership_of(member), Role.ADMIN)
    change_role(team_admin, membership_of(team_admin), Role.VIEWER)
    assert membership_of(team_admin).role == Role.VIEWER
    with pytest.raises(PermissionDenied):  # and is no admin any more
        change_role(team_admin, membership_of(member), Role.MEMBER)


def test_it_refuses_an_unknown_role(team, team_admin, member):
    with pytest.raises(ValidationError) as caught:
        change_role(team_admin, membership_of(member), "root")
    assert list(caught.value.message_dict) == ["role"]
    assert membership_of(member).role == Role.MEMBER


def test_a_membership_saved_with_another_user_team_or_role_is_news_and_nothing_else_is(team, other_team, team_admin,
                                                                                       member):
    """teams.events.membership_changed: what the apps above close a lost way in by (workspaces' tokens), sent for
    the Team page's role change as for any save of the row, with the values it replaced; never for a save that
    changes none of the three."""
    heard: list[tuple] = []

    def listen(sender, before, membership, **kwargs):
        heard.append((before.user.username, before.team.slug, before.role,
                      membership.user.username, membership.team.slug, membership.role))

    membership_changed.connect(listen, sender=Membership, dispatch_uid="test-listen")
    try:
        stale = membership_of(member)  # read while a member
        change_role(team_admin, membership_of(member), Role.VIEWER)
        same = membership_of(member)
        same.source = Membership.Source.OIDC
        same.save()
        stale.team = other_team  # the values replaced are the row's (viewer), not this instance's (member)
        stale.save()
    finally:
        membership_changed.disconnect(dispatch_uid="test-listen", sender=Membership)
    assert heard == [("mia", team.slug, "member", "mia", team.slug, "viewer"),
                     ("mia", team.slug, "viewer", "mia", other_team.slug, "member")]


# -- remove --------------------------------------------------------------------------------------


def test_it_removes_a_member_and_audits_it(team, team_admin, member):
    remove_member(team_admin, membership_of(member), ip="10.0.0.8")
    assert not Membership.objects.filter(user=member).exists()
    assert membership_events() == [("ada", "ml-research", "mia", {"change": "removed", "role": "member"})]


def test_removing_twice_is_harmless(team, team_admin, member):
    membership = membership_of(member)
    remove_member(team_admin, membership)
    remove_member(team_admin, membership)
    assert len(membership_events()) == 1


def test_the_last_admin_cannot_be_removed(team, team_admin):
    with pytest.raises(ValidationError, match="last admin"):
        remove_member(team_admin, membership_of(team_admin))
    assert Membership.objects.filter(user=team_admin).exists() and membership_events() == []


def test_a_removed_member_loses_the_team_at_once_in_the_portal_and_with_tokens(client, team, team_admin, member,
                                                                             quota):
    client.force_login(member)
    _token, raw = create_api_token(member, "ci")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/teams/ml-research/").status_code == 200
    assert api.get("/api/v1/teams/ml-research/usage/").status_code == 200
    remove_member(team_admin, membership_of(member))
    assert client.get("/teams/ml-research/").status_code == 404
    assert api.get("/api/v1/teams/ml-research/usage/").status_code == 404
    assert api.get("/api/v1/teams/").json()["results"] == []
    assert "ml-research" not in client.get("/", follow=True).content.decode()


def test_a_lowered_role_applies_at_the_next_request(team, team_admin, member, api_client_for, quota):
    api = api_client_for(member)
    change_role(team_admin, membership_of(member), Role.VIEWER)
    response = api.post("/api/v1/runs/", {"team": "ml-research", "name": "x", "image": "busybox",
                                          "command": ["true"], "flavor": "l4"}, format="json")
    assert response.status_code == 403


# -- settings ------------------------------------------------------------------------------------


def test_it_changes_the_team_setting_and_audits_only_real_changes(team, team_admin):
    set_team_settings(team_admin, team, True)  # already so: nothing to record
    assert not AuditEvent.objects.exists()
    assert set_team_settings(team_admin, team, False).members_may_cancel_teammates_work is False
    event = AuditEvent.objects.get(action=AuditEvent.Action.TEAM_SETTINGS_CHANGED)
    assert (event.actor_name, event.team, event.details) == ("ada", team, {"members_may_cancel_teammates_work": False})


# -- races (PostgreSQL: SQLite serialises write transactions as a whole) -------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_admins_demoting_each_other_at_once_leave_the_team_an_admin(team, team_admin):
    bea = make_user("bea")
    Membership.objects.create(team=team, user=bea, role=Role.ADMIN)
    errors: list[Exception] = []
    with transaction.atomic():
        # ada demotes bea and has not committed yet: bea's demotion of ada must wait for it...
        change_role(team_admin, membership_of(bea), Role.MEMBER)
        demoting = in_thread(lambda: change_role(bea, membership_of(team_admin), Role.MEMBER), errors)
        demoting.join(1)
        assert demoting.is_alive()
    demoting.join(10)
    # ...and then finds bea no admin any more.
    assert len(errors) == 1 and isinstance(errors[0], PermissionDenied)
    assert sorted(Membership.objects.values_list("user__username", "role")) == [("ada", "admin"), ("bea", "member")]
