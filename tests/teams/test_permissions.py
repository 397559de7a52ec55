"""Role checks: outsiders get 404 (existence hidden), members with too low a role get 403."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import Http404

from teams.models import Membership, Role, Team
from teams.permissions import get_for_user, get_membership, require_team, visible_to


@pytest.mark.parametrize(("user_fixture", "role", "allowed"), [
    ("viewer", Role.VIEWER, True), ("viewer", Role.MEMBER, False), ("viewer", Role.ADMIN, False),
    ("member", Role.VIEWER, True), ("member", Role.MEMBER, True), ("member", Role.ADMIN, False),
    ("team_admin", Role.VIEWER, True), ("team_admin", Role.MEMBER, True), ("team_admin", Role.ADMIN, True),
])
def test_it_ranks_roles(request, team, user_fixture, role, allowed):
    user = request.getfixturevalue(user_fixture)
    if allowed:
        assert require_team(user, team, role).user == user
    else:
        with pytest.raises(PermissionDenied, match=f"needs the {role} role"):
            require_team(user, team, role)


def test_it_hides_a_team_from_outsiders_with_404(team, outsider):
    with pytest.raises(Http404):
        require_team(outsider, team)
    with pytest.raises(Http404):
        require_team(outsider, "ml-research", Role.ADMIN)  # 404 even where a member would get 403


def test_it_answers_404_for_a_team_that_does_not_exist(member):
    with pytest.raises(Http404):
        require_team(member, "no-such-team")


def test_it_accepts_a_team_or_its_slug(team, member):
    assert require_team(member, team) == require_team(member, "ml-research")


def test_it_gives_anonymous_users_nothing(team, member):
    anonymous = AnonymousUser()
    assert get_membership(anonymous, team) is None
    assert not visible_to(Membership.objects.all(), anonymous).exists()
    assert not Team.objects.for_user(anonymous).exists()
    with pytest.raises(Http404):
        require_team(anonymous, team)


def test_it_does_not_let_staff_status_stand_in_for_membership(team, staff):
    with pytest.raises(Http404):
        require_team(staff, team)


def test_it_fetches_team_objects_for_their_members_only(team, member, viewer, outsider):
    theirs = Membership.objects.get(user=outsider)
    mine = Membership.objects.get(user=member)
    assert get_for_user(Membership.objects.all(), member, pk=mine.pk) == mine
    assert get_for_user(Membership.objects.all(), viewer, pk=mine.pk) == mine  # same team: visible
    with pytest.raises(Http404):
        get_for_user(Membership.objects.all(), member, pk=theirs.pk)


def test_it_checks_the_role_on_fetched_objects(team, member, viewer):
    mine = Membership.objects.get(user=member)
    assert get_for_user(Membership.objects.all(), member, Role.MEMBER, pk=mine.pk) == mine
    with pytest.raises(PermissionDenied):
        get_for_user(Membership.objects.all(), viewer, Role.MEMBER, pk=mine.pk)


def test_it_restricts_querysets_to_the_users_teams(team, other_team, member, outsider):
    assert set(visible_to(Membership.objects.all(), member).values_list("user__username", flat=True)) == {"mia"}
    assert list(Team.objects.for_user(member)) == [team]


def test_it_derives_the_namespace_from_the_slug(db, settings):
    settings.SLIPWAY_NAMESPACE_PREFIX = "gpu-"
    assert Team.objects.create(slug="speech", name="Speech").namespace == "gpu-speech"
    assert Team.objects.create(slug="asr", name="ASR", namespace="custom").namespace == "custom"
