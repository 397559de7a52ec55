"""Access checks: the one place that decides who may see or do what in a team.

Outsiders get 404, never 403, so the existence of another team's objects is not revealed
(DESIGN.md §7). A member whose role is too low gets 403. HTML views and the API use the
same helpers.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404

from portal.models import Membership, Role, Team


def get_membership(user, team: Team | str) -> Membership | None:
    """The user's membership of ``team`` (a Team or slug), or None."""
    if not user.is_authenticated:
        return None
    lookup = {"team": team} if isinstance(team, Team) else {"team__slug": team}
    return Membership.objects.select_related("team").filter(user=user, **lookup).first()


def require_team(user, team: Team | str, role: str = Role.VIEWER) -> Membership:
    """The membership that lets ``user`` act in ``team`` with at least ``role``.

    Raises Http404 when the user is not in the team (or it does not exist) and
    PermissionDenied when they are, but with a lower role.
    """
    membership = get_membership(user, team)
    if membership is None:
        raise Http404("No such team.")
    if not membership.allows(role):
        raise PermissionDenied(f"This needs the {role} role in team {membership.team.slug}.")
    return membership


def visible_to(queryset: QuerySet, user, team_field: str = "team") -> QuerySet:
    """Restrict ``queryset`` to rows of the user's teams (:meth:`TeamQuerySet.for_user` is the rule)."""
    if not user.is_authenticated:
        return queryset.none()
    return queryset.filter(**{f"{team_field}__in": Team.objects.for_user(user)})


def get_for_user(queryset: QuerySet, user, role: str = Role.VIEWER, team_field: str = "team", **lookup) -> Model:
    """Fetch one team-scoped object for ``user``: 404 for outsiders, 403 for a too-low role.

    Every team-owned model goes through this (via a thin per-model wrapper), so the API and
    the HTML views cannot disagree about who sees what.
    """
    obj = visible_to(queryset, user, team_field).filter(**lookup).first()
    if obj is None:
        raise Http404("Not found.")
    if role != Role.VIEWER:
        require_team(user, getattr(obj, team_field), role)
    return obj
