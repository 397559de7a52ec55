"""Access checks: the one place that decides who may see or do what in a team.

Outsiders get 404, never 403, so the existence of another team's objects is not revealed
(docs/design.md "Security rules"). A member whose role is too low gets 403. HTML views and the API use the
same helpers.

Who may *end* a workload (cancel a run, delete an endpoint) is decided by :func:`may_end`
alone; the services enforce it (:func:`check_may_end`) and the pages use it to show or hide
their buttons, so the portal, the API and the admin console cannot disagree; a refused button
says why (:func:`end_refusal`, the same words the service answers with).

Platform staff may *read* every team's workloads — their pages, logs, events and manifests in
the portal, ``GET`` in the API — so the admin console's links work for them (``staff_reads``
of :func:`get_for_user`, :func:`read_membership`). They never change another team's work
from the portal or the API: writes ask for a membership as before, so a staff user outside the
team gets 404 there. Staff end and scale other teams' work in the admin console, where each
action is confirmed and audited. A team's quotas and quota sharing are the other way round:
only platform staff change them, in the console or the API (:func:`team_for_staff_change`),
and the team's members read them.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404

from teams.models import Membership, Role, Team


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


def report_teams(user, slug: str | None = None) -> list[Team]:
    """The teams a cost report covers: team ``slug`` alone, or without one every team the caller
    reads. Members read their own teams (404 for any other, as everywhere); platform staff read
    every team's costs (they see them all on the showback page): any ``slug``, and all teams
    without one."""
    if user.is_staff:
        teams = Team.objects.order_by("slug")
        if slug is None:
            return list(teams)
        team = teams.filter(slug=slug).first()
        if team is None:
            raise Http404("No such team.")
        return [team]
    if slug is not None:
        return [require_team(user, slug).team]
    return list(Team.objects.for_user(user))


def team_for_reading(user, slug: str) -> tuple[Team, Membership | None]:
    """Team ``slug`` and the caller's membership, for reading its settings and quotas: its members
    (any role) and platform staff (any team, membership None); 404 for anyone else."""
    membership = get_membership(user, slug)
    if membership is not None:
        return membership.team, membership
    team = Team.objects.filter(slug=slug).first() if user.is_authenticated and user.is_staff else None
    if team is None:
        raise Http404("No such team.")
    return team, None


def team_for_staff_change(user, slug: str, perm: str, what: str) -> Team:
    """Team ``slug`` for a change only platform staff make (its quotas and quota sharing, docs/api.md
    "Quota as code"): staff holding ``perm`` (:func:`require_staff_permission`), any team; other
    staff, and its members, who may read what would change, 403; anyone else 404, as for any
    other team."""
    team, membership = team_for_reading(user, slug)
    if membership is not None and not user.is_staff:
        raise PermissionDenied("Only platform staff change a team's quotas and quota sharing.")
    require_staff_permission(user, perm, what)
    return team


def visible_to(queryset: QuerySet, user, team_field: str = "team") -> QuerySet:
    """Restrict ``queryset`` to rows of the user's teams (:meth:`TeamQuerySet.for_user` is the rule)."""
    if not user.is_authenticated:
        return queryset.none()
    return queryset.filter(**{f"{team_field}__in": Team.objects.for_user(user)})


def get_for_user(queryset: QuerySet, user, role: str = Role.VIEWER, team_field: str = "team",
                 staff_reads: bool = False, **lookup) -> Model:
    """Fetch one team-scoped object for ``user``: 404 for outsiders, 403 for a too-low role.

    Every team-owned model goes through this (via a thin per-model wrapper), so the API and
    the HTML views cannot disagree about who sees what. ``staff_reads`` (read-only pages and
    API reads, never an action) lets platform staff fetch any team's object.
    """
    if staff_reads and role == Role.VIEWER and user.is_authenticated and user.is_staff:
        obj = queryset.filter(**lookup).first()
        if obj is None:
            raise Http404("Not found.")
        return obj
    obj = visible_to(queryset, user, team_field).filter(**lookup).first()
    if obj is None:
        raise Http404("Not found.")
    if role != Role.VIEWER:
        require_team(user, getattr(obj, team_field), role)
    return obj


#: Beside every submit control a viewer sees disabled (New run, New endpoint, Run again, the forms).
VIEWERS_CANNOT_SUBMIT = "Viewers can't submit — ask a team admin."


def submit_refusal(membership: Membership) -> str:
    """Why the member of ``membership`` may not submit work in its team, or '' when they may."""
    return "" if membership.allows(Role.MEMBER) else VIEWERS_CANNOT_SUBMIT


def submitting_teams(user) -> list[Team]:
    """The teams ``user`` may submit work in, by name: those where :func:`submit_refusal` says nothing (a form's
    choice of team offers these alone)."""
    if not user.is_authenticated:
        return []
    memberships = Membership.objects.select_related("team").filter(user=user).order_by("team__name", "team__slug")
    return [m.team for m in memberships if not submit_refusal(m)]


def read_membership(user, team: Team) -> Membership | None:
    """The membership behind a read-only page of ``team``'s object: None for platform staff outside it.

    Anyone else outside the team gets 404. A page given None shows no control (staff read, never
    change, another team's work there).
    """
    membership = get_membership(user, team)
    if membership is None and not user.is_staff:
        raise Http404("No such team.")
    return membership


def end_refusal(user, workload, membership: Membership | None) -> str:
    """Why ``user`` may not end ``workload`` (shown beside a disabled button), or '' when :func:`may_end`."""
    if may_end(user, workload, membership):
        return ""
    if membership is None and user.is_staff:
        return f"Your staff account may not stop another team's work: it lacks {change_permission(workload)}."
    if membership is not None and not membership.allows(Role.MEMBER):
        return "Viewers can't cancel or delete the team's work — ask a team admin."
    return (f"Only {workload.team.name}'s admins and {workload.created_by.username} (who started it) may stop it: "
            "the team does not let members cancel their teammates' work.")


def may_correct_checkpoint(user, workload, membership: Membership | None) -> bool:
    """Whether ``user`` may report a checkpoint of ``workload`` by hand (a correction): its owner or an
    admin of its team. Its pods report with the run token; a teammate never may (security review 4 #7)."""
    if membership is None or membership.team_id != workload.team_id or not membership.allows(Role.MEMBER):
        return False
    return membership.allows(Role.ADMIN) or workload.created_by_id == user.pk


def staff_may(user, perm: str) -> bool:
    """Whether ``user`` is platform staff holding Django's permission ``perm`` (``"quotas.change_teamquota"``).

    Staff is who may enter the admin console and read every team; what a staff user may *change*
    is their permissions (a group: :mod:`front.roles`), as in the admin console itself, where
    Django checks the same ones (security review 4 #3). Superusers hold every permission.
    """
    return bool(user.is_authenticated and user.is_staff and user.has_perm(perm))


def require_staff_permission(user, perm: str, what: str) -> None:
    """403 unless :func:`staff_may`; the words name what and which permission (``what``: "change quotas")."""
    if not staff_may(user, perm):
        raise PermissionDenied(f"Your staff account may not {what}: it lacks the permission {perm} "
                               "(a platform admin gives it through a staff group).")


def change_permission(model_or_object) -> str:
    """The ``change_…`` permission of a model (or of an object's model): ``"<app label>.change_<model>"``."""
    meta = model_or_object._meta
    return f"{meta.app_label}.change_{meta.model_name}"


def may_end(user, workload, membership: Membership | None) -> bool:
    """Whether ``user`` may end ``workload`` (cancel a run, delete an endpoint): the one rule.

    Platform staff may end any team's work when they may change work of its kind (the admin
    console; :func:`staff_may`). In the workload's team an admin may end any of it; a member
    their own, and their teammates' when the team lets members do so
    (``Team.members_may_cancel_teammates_work``); a viewer never.
    ``membership`` is the user's membership of the workload's team (None: not in it), which
    every caller already holds — the pages that poll ask no further query.
    """
    if staff_may(user, change_permission(workload)):
        return True
    if membership is None or membership.team_id != workload.team_id or not membership.allows(Role.MEMBER):
        return False
    if membership.allows(Role.ADMIN) or workload.created_by_id == user.pk:
        return True
    return membership.team.members_may_cancel_teammates_work


def check_may_end(user, workload) -> None:
    """Raise unless :func:`may_end`: Http404 for outsiders (existence hidden), PermissionDenied otherwise."""
    if staff_may(user, change_permission(workload)):
        return
    if user.is_staff and get_membership(user, workload.team) is None:
        require_staff_permission(user, change_permission(workload), "stop another team's work")
    membership = require_team(user, workload.team, Role.MEMBER)
    refusal = end_refusal(user, workload, membership)
    if refusal:
        raise PermissionDenied(refusal)
