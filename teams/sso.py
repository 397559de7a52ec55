"""Team membership that follows the identity provider's groups (single sign-on, docs/sso.md).

The groups claim (``SLIPWAY_OIDC_GROUPS_CLAIM``, a dotted path such as ``realm_access.roles``)
lists the person's groups; staff's :class:`~teams.models.GroupMapping` rows turn groups into
(team, role) grants, the highest role winning when several groups name one team. At every
sign-in :func:`sync_memberships` makes the person's ``oidc`` memberships match the grants:
added, role changed, removed — each audited "synced at login". Memberships added by hand
(``manual``) are never touched, and a grant for a team the person is already in by hand is
left to that membership.

``SLIPWAY_OIDC_GROUP_MAP`` seeds mappings at first use (:func:`seed_group_map`, called by every
sign-in and by the staff preview page): each entry once, when its team exists, so what staff
changed or deleted in the admin console since stays so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction

from teams import services
from teams.models import ROLE_RANK, AuditEvent, GroupMapping, GroupMapSeed, Membership, Role, Team
from teams.usernames import lookalike_of

logger = logging.getLogger(__name__)

#: Why a membership changed, in its audit event's details.
SYNC_REASON = "synced at login"


class MissingGroupsClaimError(Exception):
    """The claims carry no groups claim at the configured path, so Slipway cannot tell the person's teams."""

    def __init__(self, path: str) -> None:
        super().__init__(f"The identity provider sent no “{path}” claim (SLIPWAY_OIDC_GROUPS_CLAIM).")
        self.path = path


def claim_groups(claims: dict, path: str | None = None) -> list[str]:
    """The groups in ``claims`` at the dotted ``path`` (default: the setting), as strings, in order, once each.

    A single string counts as one group. Raises :class:`MissingGroupsClaimError` when the path
    does not lead to a string or list (absent, null, an object).
    """
    path = path or settings.SLIPWAY_OIDC_GROUPS_CLAIM
    value: object = claims
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise MissingGroupsClaimError(path)
    return list(dict.fromkeys(str(item) for item in value
                              if (isinstance(item, str) and item) or (isinstance(item, int) and not isinstance(item, bool))))


@dataclass(frozen=True)
class Grant:
    """A team and role the groups give, and the groups that gave it."""

    team: Team
    role: str
    groups: tuple[str, ...]


def grants_for(groups: Iterable[str]) -> list[Grant]:
    """The teams and roles ``groups`` give through staff's mappings, by team slug; the highest role wins."""
    by_team: dict[int, Grant] = {}
    for mapping in GroupMapping.objects.select_related("team").filter(claim_value__in=list(groups)):
        known = by_team.get(mapping.team_id)
        if known is None:
            by_team[mapping.team_id] = Grant(mapping.team, mapping.role, (mapping.claim_value,))
            continue
        role = max(known.role, mapping.role, key=lambda r: ROLE_RANK[Role(r)])
        by_team[mapping.team_id] = Grant(known.team, role, (*known.groups, mapping.claim_value))
    return sorted(by_team.values(), key=lambda grant: grant.team.slug)


def group_map_problems(entries: Iterable[tuple[str, str, str]]) -> list[str]:
    """What is wrong with ``SLIPWAY_OIDC_GROUP_MAP``'s entries that settings cannot see: unknown roles."""
    return [f"SLIPWAY_OIDC_GROUP_MAP: {group}={slug}:{role} names no role (pick one of {', '.join(Role.values)})"
            for group, slug, role in entries if role not in Role.values]


def seed_group_map() -> int:
    """Create the mappings of ``SLIPWAY_OIDC_GROUP_MAP`` not seeded before; the number created.

    Idempotent: each entry is seeded once (recorded in :class:`GroupMapSeed`), and only once its
    team exists (an entry naming a team not created yet is tried again at the next call).
    """
    entries = [entry for entry in settings.SLIPWAY_OIDC_GROUP_MAP if entry[2] in Role.values]
    if not entries:
        return 0
    seeded = set(GroupMapSeed.objects.filter(key__in=[f"{g}={s}" for g, s, _ in entries]).values_list("key", flat=True))
    teams = {team.slug: team for team in Team.objects.filter(slug__in=[s for _, s, _ in entries])}
    created = 0
    for group, slug, role in entries:
        key = f"{group}={slug}"
        if key in seeded:
            continue
        if slug not in teams:
            logger.warning("SLIPWAY_OIDC_GROUP_MAP: no team %r yet; %s is seeded once it exists", slug, key)
            continue
        try:
            with transaction.atomic():
                GroupMapSeed.objects.create(key=key)
                _mapping, made = GroupMapping.objects.get_or_create(claim_value=group, team=teams[slug],
                                                                    defaults={"role": role})
        except IntegrityError:
            continue  # another sign-in seeded it a moment ago
        created += made
    return created


def sync_memberships(user, claims: dict) -> list[Grant]:
    """Make ``user``'s single sign-on memberships match the groups in ``claims``; every change audited.

    Returns the grants. Raises :class:`MissingGroupsClaimError` (nothing changed) when the claims
    have no groups claim: an absent claim must not read as "in no group" and strip every team.
    """
    groups = claim_groups(claims)
    seed_group_map()
    grants = grants_for(groups)
    wanted = {grant.team.pk: grant for grant in grants}
    to_change = _changes(user, wanted)
    if not to_change:
        return grants  # the usual sign-in: nothing to change, no team locked
    with transaction.atomic():
        # Each team to change is locked, in one order for every sign-in: membership changes of a
        # team serialise with its admins' (teams.services), and two sign-ins cannot deadlock.
        for pk in sorted(to_change):
            services.lock_team(to_change[pk])
        held = {m.team_id: m for m in Membership.objects.select_related("team").filter(user=user)}
        for pk in sorted(to_change):  # decided again on what is there under the lock
            _sync_one(user, held.get(pk), wanted.get(pk), groups)
    return grants


def _changes(user, wanted: dict[int, Grant]) -> dict[int, Team]:
    """The teams whose membership of ``user`` differs from ``wanted`` and sign-in may change, by team pk."""
    held = {m.team_id: m for m in Membership.objects.select_related("team").filter(user=user)}
    changes = {}
    for pk in {*wanted, *held}:
        membership, grant = held.get(pk), wanted.get(pk)
        if membership is not None and membership.source != Membership.Source.OIDC:
            continue
        if membership is None or grant is None or membership.role != grant.role:
            changes[pk] = grant.team if grant is not None else membership.team
    return changes


def _sync_one(user, membership: Membership | None, grant: Grant | None, groups: list[str]) -> None:
    """Bring one team's membership in line with its grant (the caller holds the team's lock)."""
    if membership is not None and membership.source != Membership.Source.OIDC:
        return  # added by hand: sign-in leaves it alone
    if membership is None and grant is not None:
        created = Membership.objects.create(team=grant.team, user=user, role=grant.role, source=Membership.Source.OIDC)
        _audit(user, created, "added", role=grant.role, groups=list(grant.groups))
    elif membership is not None and grant is None:
        membership.delete()
        _audit(user, membership, "removed", role=membership.role, groups=groups)
    elif membership is not None and grant is not None and membership.role != grant.role:
        old_role, membership.role = membership.role, grant.role
        membership.save(update_fields=["role"])  # save(), not update(): a role lost is news (teams.events)
        _audit(user, membership, "changed", role=grant.role, old_role=old_role, groups=list(grant.groups))


def _audit(user, membership: Membership, change: str, **details) -> None:
    services.audit(AuditEvent.Action.MEMBERSHIP_CHANGED, actor=user, team=membership.team, target=user.username,
                   change=change, reason=SYNC_REASON, source=Membership.Source.OIDC, **details)


def password_sign_in_allowed(user) -> bool:
    """Whether ``user`` may sign in with a password: everyone, or staff only (``SLIPWAY_LOCAL_LOGIN=staff``,
    the break-glass door once everyone else signs in through the provider)."""
    return settings.SLIPWAY_LOCAL_LOGIN == "all" or user.is_staff


def safe_username(username: str, subject: str) -> str:
    """``username`` unless it imitates another (:func:`teams.usernames.lookalike_of`, the rule of every
    place that names a user); then a plainly different one made from the provider's subject
    (``sso-<subject>``, letters, digits, '-', '.', '_' only)."""
    if lookalike_of(username) is None:
        return username
    cleaned = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-._") else "-" for ch in subject).strip("-")
    return f"sso-{cleaned or 'user'}"[:150]
