"""teams.sso: reading the groups claim, mapping groups to teams, syncing memberships at sign-in, seeding the map.

The whole flow through a real provider is tests/sso/test_flow.py; here each rule on its own.
"""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from teams import sso
from teams.models import AuditEvent, GroupMapping, GroupMapSeed, Membership, Role
from tests.factories import add_member, make_team, make_user
from tests.threads import in_thread, paused_after, wait_until_lock_waiter


@pytest.mark.parametrize(("claims", "path", "groups"), [
    ({"groups": ["a", "b", "a"]}, "groups", ["a", "b"]),
    ({"groups": "solo"}, "groups", ["solo"]),
    ({"groups": []}, "groups", []),
    ({"groups": ["a", 7, True, None, {"x": 1}, ""]}, "groups", ["a", "7"]),
    ({"realm_access": {"roles": ["ml-admins"]}}, "realm_access.roles", ["ml-admins"]),
])
def test_it_reads_the_groups_claim_at_a_dotted_path(claims, path, groups):
    assert sso.claim_groups(claims, path) == groups


@pytest.mark.parametrize("claims", [{}, {"groups": None}, {"groups": {"a": 1}}, {"realm_access": ["x"]},
                                    {"realm_access": {"groups": []}}])
def test_a_missing_groups_claim_is_an_error_not_no_groups(claims):
    path = "realm_access.roles" if "realm_access" in claims else "groups"
    with pytest.raises(sso.MissingGroupsClaimError, match=path.replace(".", r"\.")):
        sso.claim_groups(claims, path)


def test_the_highest_role_wins_when_several_groups_name_one_team(db):
    ml, cv = make_team("ml"), make_team("cv")
    GroupMapping.objects.create(claim_value="ml-read", team=ml, role=Role.VIEWER)
    GroupMapping.objects.create(claim_value="ml-leads", team=ml, role=Role.ADMIN)
    GroupMapping.objects.create(claim_value="ml-users", team=ml, role=Role.MEMBER)
    GroupMapping.objects.create(claim_value="cv-read", team=cv, role=Role.VIEWER)
    grants = sso.grants_for(["ml-users", "ml-read", "ml-leads", "cv-read", "unmapped"])
    assert [(g.team.slug, g.role, sorted(g.groups)) for g in grants] == [
        ("cv", Role.VIEWER, ["cv-read"]), ("ml", Role.ADMIN, ["ml-leads", "ml-read", "ml-users"])]


def test_sync_adds_changes_and_removes_only_provider_memberships_and_audits_each(db):
    ml, cv, ops, old = make_team("ml"), make_team("cv"), make_team("ops"), make_team("old")
    for group, team, role in (("ml", ml, Role.ADMIN), ("cv", cv, Role.MEMBER), ("ops", ops, Role.ADMIN)):
        GroupMapping.objects.create(claim_value=group, team=team, role=role)
    user = make_user("pat")
    Membership.objects.create(team=cv, user=user, role=Role.VIEWER, source=Membership.Source.OIDC)
    Membership.objects.create(team=old, user=user, role=Role.MEMBER, source=Membership.Source.OIDC)
    add_member(ops, user, Role.VIEWER)  # by hand: the ops group's admin grant leaves it alone

    sso.sync_memberships(user, {"groups": ["ml", "cv", "ops"]})

    held = {m.team.slug: (m.role, m.source) for m in Membership.objects.filter(user=user)}
    assert held == {"ml": (Role.ADMIN, "oidc"), "cv": (Role.MEMBER, "oidc"), "ops": (Role.VIEWER, "manual")}
    events = AuditEvent.objects.filter(action=AuditEvent.Action.MEMBERSHIP_CHANGED).order_by("team__slug")
    assert [(e.team.slug, e.details["change"], e.details["reason"], e.details["role"]) for e in events] == [
        ("cv", "changed", "synced at login", Role.MEMBER), ("ml", "added", "synced at login", Role.ADMIN),
        ("old", "removed", "synced at login", Role.MEMBER)]
    assert events.get(team=cv).details["old_role"] == Role.VIEWER

    # The same claims again: nothing to change, nothing audited.
    sso.sync_memberships(user, {"groups": ["ml", "cv", "ops"]})
    assert AuditEvent.objects.filter(action=AuditEvent.Action.MEMBERSHIP_CHANGED).count() == 3


def test_the_provider_may_lower_or_remove_a_teams_last_admin_and_one_added_by_hand_stays(db):
    """docs/sso.md: the Team page's "a team keeps an admin" does not bind the sync, the provider is the source of
    truth for the memberships it gave; an admin added by hand is the one a team keeps."""
    ml, cv = make_team("ml"), make_team("cv")
    lead, kept = make_user("lead"), make_user("kept")
    Membership.objects.create(team=ml, user=lead, role=Role.ADMIN, source=Membership.Source.OIDC)
    Membership.objects.create(team=cv, user=lead, role=Role.ADMIN, source=Membership.Source.OIDC)
    add_member(cv, kept, Role.ADMIN)
    GroupMapping.objects.create(claim_value="ml-users", team=ml, role=Role.MEMBER)

    sso.sync_memberships(lead, {"groups": ["ml-users"]})

    assert not Membership.objects.filter(team=ml, role=Role.ADMIN).exists()  # ml has no admin now
    assert list(Membership.objects.filter(team=cv).values_list("user__username", "role")) == [("kept", Role.ADMIN)]


def test_sync_refuses_claims_without_the_groups_claim_and_changes_nothing(db):
    ml = make_team("ml")
    user = make_user()
    Membership.objects.create(team=ml, user=user, role=Role.MEMBER, source=Membership.Source.OIDC)
    with pytest.raises(sso.MissingGroupsClaimError):
        sso.sync_memberships(user, {"sub": "x"})
    assert Membership.objects.filter(user=user, team=ml).exists()


def test_the_group_map_is_seeded_once_per_entry_when_its_team_exists(db, settings):
    settings.SLIPWAY_OIDC_GROUP_MAP = (("gpu-ml", "ml", "member"), ("gpu-cv", "cv", "viewer"), ("x", "ml", "boss"))
    ml = make_team("ml")
    assert sso.seed_group_map() == 1  # cv does not exist yet; "boss" is no role (system check E002 says so)
    assert sso.seed_group_map() == 0
    GroupMapping.objects.filter(claim_value="gpu-ml").delete()  # staff removed it: it stays removed
    make_team("cv")
    assert sso.seed_group_map() == 1
    assert [str(m) for m in GroupMapping.objects.all()] == ["gpu-cv → cv (viewer)"]
    assert sorted(GroupMapSeed.objects.values_list("key", flat=True)) == ["gpu-cv=cv", "gpu-ml=ml"]
    assert ml.group_mappings.count() == 0


def test_a_group_map_with_an_unknown_role_stops_the_portal_at_start(settings):
    settings.SLIPWAY_OIDC_GROUP_MAP = (("gpu-ml", "ml", "owner"),)
    with pytest.raises(SystemCheckError, match=r"slipway\.E002.*gpu-ml=ml:owner names no role"):
        call_command("check")


@pytest.mark.postgres
def test_two_sign_ins_of_one_person_at_once_add_each_membership_once(transactional_db):
    """Both read "not in ml" before either wrote; the team lock makes the second re-read after the first commits."""
    ml = make_team("ml")
    GroupMapping.objects.create(claim_value="gpu-ml", team=ml, role=Role.MEMBER)
    user = make_user("quinn")
    inside, go, errors = threading.Event(), threading.Event(), []

    def first():
        with paused_after('INSERT INTO "portal_membership"', inside, go):
            sso.sync_memberships(user, {"groups": ["gpu-ml"]})

    held = in_thread(first, errors)
    assert inside.wait(10)
    second = in_thread(lambda: sso.sync_memberships(user, {"groups": ["gpu-ml"]}), errors)
    wait = wait_until_lock_waiter(second)
    assert "portal_team" in wait.query and "FOR NO KEY UPDATE" in wait.query
    go.set()
    held.join(10)
    second.join(10)
    assert errors == []
    assert Membership.objects.filter(user=user).count() == 1
    assert AuditEvent.objects.filter(action=AuditEvent.Action.MEMBERSHIP_CHANGED, details__change="added").count() == 1


def test_password_sign_in_may_be_kept_for_staff(db, settings):
    staff, person = make_user(staff=True), make_user()
    assert sso.password_sign_in_allowed(person) and sso.password_sign_in_allowed(staff)
    settings.SLIPWAY_LOCAL_LOGIN = "staff"
    assert not sso.password_sign_in_allowed(person) and sso.password_sign_in_allowed(staff)
