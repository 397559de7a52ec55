"""API keys of endpoints: one service function per user action, shared by the portal, the API, the CLI (through the
API) and the admin console (docs/serving.md "API keys").

A key is for one endpoint, or (no endpoint) for every endpoint of its team. The raw key — ``"sw-"`` and 43
URL-safe characters from :func:`secrets.token_urlsafe` (256 random bits) — is returned once by
:func:`create_key` and never stored: the row keeps its SHA-256 digest (:func:`teams.models.hash_token`, as API
tokens) and its first :data:`PREFIX_LENGTH` characters to tell keys apart.

Who may do what (the one rule, :func:`may_manage`):

* members and admins of the team create keys, for the team and for its endpoints; viewers read the list only;
* a member manages (revokes, disables, enables) the keys they created; a team admin every key of the team;
* platform staff read any team's keys and revoke or disable them — from the admin console, where each
  action is confirmed and audited (their staff permission ``inference.change_apikey``, as for endpoints);
* anyone outside the team gets 404 for its keys and endpoints, so their existence is not revealed.

Every change moves ``updated_at`` with one conditional ``filter(...).update(...)`` (the gateways refresh their
cache by it, so a revocation or a disable reaches every gateway replica within seconds) and is audited in the
same transaction. ``updated_at`` (and a new key's ``created_at``) is the database's clock at the write, not the
portal process's: a gateway reads the keys changed since the newest ``updated_at`` it saw, less a few seconds
(gateway.keys), so a change stamped by a portal host whose clock runs behind, or stamped before a wait for the
team's lock, would fall before that mark and never reach it — a revoked key left valid there.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from inference.constants import (
    AUDIT_KEY_CREATED,
    AUDIT_KEY_DISABLED,
    AUDIT_KEY_ENABLED,
    AUDIT_KEY_REVOKED,
    EndpointState,
)
from inference.models import ApiKey, InferenceEndpoint
from teams.models import Membership, Role, Team, hash_token
from teams.permissions import get_membership, require_staff_permission, require_team, staff_may
from teams.services import audit, lock_team

#: What every raw key starts with: tells a Slipway key from other secrets (and secret scanners can match it).
KEY_PREFIX = "sw-"
#: Characters of the raw key kept in clear (``"sw-"`` and 9 random ones): enough to tell a team's keys apart.
PREFIX_LENGTH = 12
#: Random bytes of a key: 32 (256 bits), so its digest needs no salt nor a slow hash.
KEY_BYTES = 32
NAME_MAX_LENGTH = 100
#: The largest limit a column holds (PostgreSQL's integer): larger is a 400, not a 500.
MAX_LIMIT = 2**31 - 1
#: Endpoints that take no new key: they will never serve again.
ENDED_STATES = (EndpointState.DELETING, EndpointState.DELETED, EndpointState.FAILED)
#: The staff permission that lets platform staff revoke or disable any team's key (admin console).
STAFF_PERMISSION = "inference.change_apikey"


class KeyConflict(Exception):
    """The key's state does not allow the action (revoked keys stay revoked): the API answers 409."""


class KeyState:
    ACTIVE = "active"
    DISABLED = "disabled"
    EXPIRED = "expired"
    REVOKED = "revoked"


def key_state(key: ApiKey, now: datetime | None = None) -> str:
    """Where a key stands, the most final first: revoked, disabled, expired, else active (what the gateway
    accepts: :meth:`ApiKeyQuerySet.usable`)."""
    now = now or timezone.now()
    if key.revoked_at is not None:
        return KeyState.REVOKED
    if key.disabled_at is not None:
        return KeyState.DISABLED
    if key.expires_at is not None and key.expires_at <= now:
        return KeyState.EXPIRED
    return KeyState.ACTIVE


def new_raw_key() -> str:
    """A fresh raw key: ``sw-`` and 43 URL-safe characters (256 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def _keys():
    return ApiKey.objects.select_related("team", "endpoint", "created_by")


# -- reading ----------------------------------------------------------------------------------------------


def keys_of_endpoint(endpoint: InferenceEndpoint):
    """The keys valid for ``endpoint``, newest first: its own and its team's (team keys work there too)."""
    from django.db.models import Q

    return _keys().filter(team=endpoint.team_id).filter(Q(endpoint=endpoint) | Q(endpoint__isnull=True))


def keys_of_team(team: Team):
    """Every key of ``team``, newest first: team keys and every endpoint's."""
    return _keys().filter(team=team)


def team_for_keys(user, slug: str, role: str = Role.VIEWER) -> Team:
    """Team ``slug`` for its keys: its members (``role`` or above; 403 below it); platform staff read any team's
    keys (``role`` viewer); 404 for anyone else."""
    membership = get_membership(user, slug)
    if membership is None and role == Role.VIEWER and user.is_authenticated and user.is_staff:
        team = Team.objects.filter(slug=slug).first()
        if team is not None:
            return team
    return require_team(user, slug, role).team


def get_key(user, pk, *, endpoint: InferenceEndpoint | None = None, team: Team | None = None) -> ApiKey:
    """Key ``pk`` as reached under ``endpoint`` (its own key or its team's) or ``team``: 404 when it is not there,
    or when ``user`` may not read that team's keys (the caller fetched ``endpoint``/``team`` for ``user``)."""
    from django.http import Http404

    queryset = keys_of_endpoint(endpoint) if endpoint is not None else keys_of_team(team)
    key = queryset.filter(pk=pk).first()
    if key is None:
        raise Http404("No such key.")
    return key


def may_create(membership: Membership | None) -> bool:
    return membership is not None and membership.allows(Role.MEMBER)


def may_manage(user, key: ApiKey, membership: Membership | None) -> bool:
    """Whether ``user`` may revoke, disable or enable ``key``: the one rule (the pages show buttons by it).

    ``membership``: the user's membership of the key's team (None: not in it). Staff act on another team's
    keys only in the admin console (:func:`check_may_manage` with ``staff=True``).
    """
    if membership is None or membership.team_id != key.team_id or not membership.allows(Role.MEMBER):
        return False
    return membership.allows(Role.ADMIN) or key.created_by_id == user.pk


def check_may_manage(user, key: ApiKey, staff: bool = False) -> None:
    """Raise unless ``user`` may change ``key``: Http404 outside its team, PermissionDenied for a viewer or a
    member's teammate's key. ``staff``: the admin console's actions, which staff holding
    :data:`STAFF_PERMISSION` take on any team's key."""
    if staff and staff_may(user, STAFF_PERMISSION):
        return
    if staff and user.is_staff and get_membership(user, key.team) is None:
        require_staff_permission(user, STAFF_PERMISSION, "revoke or disable another team's API keys")
    membership = require_team(user, key.team, Role.MEMBER)
    if not may_manage(user, key, membership):
        raise PermissionDenied(f"Only {key.team.name}'s admins and the key's creator may change it.")


# -- validation -------------------------------------------------------------------------------------------


def _limit_errors(name: str, value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, int):
        return ["Must be a whole number."]
    if value < 1 or value > MAX_LIMIT:
        return [f"Must be between 1 and {MAX_LIMIT} per minute (leave it out for no limit)."]
    return []


def validate_key(team: Team, name, expires_at, requests_per_minute, tokens_per_minute, now: datetime) -> str:
    """The field errors of a new key (raised as one ``ValidationError``), else its cleaned name.

    The name is unique among the team's live (not revoked) keys — the caller holds the team's lock, so two
    creations with one name cannot both pass.
    """
    errors: dict[str, list[str]] = {}
    clean = name.strip() if isinstance(name, str) else ""
    if not isinstance(name, str):
        errors["name"] = ["Must be a string of 1 to 100 characters."]
    elif not clean:
        errors["name"] = ["This field may not be blank."]
    elif len(clean) > NAME_MAX_LENGTH:
        errors["name"] = [f"At most {NAME_MAX_LENGTH} characters."]
    elif "\x00" in clean or any(ord(c) < 32 for c in clean):
        errors["name"] = ["Control characters are not allowed."]
    elif ApiKey.objects.filter(team=team, name=clean, revoked_at__isnull=True).exists():
        errors["name"] = [f"The team already has a key named {clean!r} that is not revoked."]
    if expires_at is not None:
        if not isinstance(expires_at, datetime) or timezone.is_naive(expires_at):
            errors["expires_at"] = ["Must be a date and time with its time zone."]
        elif expires_at <= now:
            errors["expires_at"] = ["Must be in the future."]
        else:
            try:
                # In UTC: Python takes offsets up to ±23:59, PostgreSQL only up to ±15:59.
                expires_at.astimezone(UTC)
            except OverflowError:
                errors["expires_at"] = ["Out of the calendar's range."]
    for field, value in (("requests_per_minute", requests_per_minute), ("tokens_per_minute", tokens_per_minute)):
        if _limit_errors(field, value):
            errors[field] = _limit_errors(field, value)
    if errors:
        raise ValidationError(errors)
    return clean


# -- actions ----------------------------------------------------------------------------------------------


def _target(key: ApiKey) -> str:
    return f"API key {key.pk} ({key.name})"


def _scope(key: ApiKey) -> str:
    return f"endpoint {key.endpoint_id}" if key.endpoint_id else "team"


def create_key(user, team: Team | str, endpoint: InferenceEndpoint | None, name, expires_at=None,
               requests_per_minute=None, tokens_per_minute=None) -> tuple[ApiKey, str]:
    """Create a key of ``team`` for ``endpoint`` (None: every endpoint of the team); returns the row and the raw
    key, which is never stored and cannot be shown again.

    Raises Http404 outside the team (or for another team's endpoint), PermissionDenied below the member role,
    ``ValidationError`` with field errors (nothing written): name 1–100 characters and unique among the team's
    live keys, ``expires_at`` in the future, limits whole numbers ≥ 1, an endpoint that still serves.
    """
    from django.http import Http404

    team = require_team(user, team, Role.MEMBER).team
    if endpoint is not None and endpoint.team_id != team.pk:
        raise Http404("Not found.")
    now = timezone.now()
    raw = new_raw_key()
    with transaction.atomic():
        lock_team(team)  # name uniqueness among live keys is checked and written under the team's lock
        if endpoint is not None:
            state = InferenceEndpoint.objects.filter(pk=endpoint.pk).values_list("state", flat=True).first()
            if state in ENDED_STATES:
                raise ValidationError({"endpoint": [f"The endpoint is {state}: it takes no new key."]})
        clean = validate_key(team, name, expires_at, requests_per_minute, tokens_per_minute, now)
        expires_at = expires_at.astimezone(UTC) if expires_at is not None else None
        key = ApiKey.objects.create(
            team=team, endpoint=endpoint, name=clean, prefix=raw[:PREFIX_LENGTH], digest=hash_token(raw),
            created_by=user, created_at=Now(), updated_at=Now(), expires_at=expires_at,
            requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute)
        key.refresh_from_db(fields=["created_at", "updated_at"])
        audit(AUDIT_KEY_CREATED, actor=user, team=team, target=_target(key), prefix=key.prefix, scope=_scope(key),
              expires_at=expires_at.isoformat() if expires_at else None,
              requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute)
    return key, raw


def _move(user, key: ApiKey, action: str, staff: bool, allowed: dict, changes: dict) -> ApiKey:
    """One conditional move of ``key`` (``allowed``: the filter its state must match) and its audit row; a key
    already where the move leads is left as it is (no second audit row); a revoked one is a conflict."""
    check_may_manage(user, key, staff=staff)
    now = timezone.now()
    with transaction.atomic():
        moved = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True, **allowed).update(
            updated_at=Now(), **{field: (now if value is True else value) for field, value in changes.items()})
        if moved:
            audit(action, actor=user, team=key.team, target=_target(key), prefix=key.prefix, scope=_scope(key),
                  **({"as_staff": True} if staff and get_membership(user, key.team) is None else {}))
    key.refresh_from_db()
    if not moved and key.revoked_at is not None and action != AUDIT_KEY_REVOKED:
        raise KeyConflict("The key is revoked: it cannot be used again (create a new one).")
    return key


def revoke_key(user, key: ApiKey, staff: bool = False) -> ApiKey:
    """Revoke ``key`` for good (idempotent: a revoked key stays as it was revoked)."""
    return _move(user, key, AUDIT_KEY_REVOKED, staff, {}, {"revoked_at": True})


def disable_key(user, key: ApiKey, staff: bool = False) -> ApiKey:
    """Disable ``key`` (the gateway refuses it) without deleting it; :func:`enable_key` takes it back.
    A disabled key stays disabled; a revoked one is a :class:`KeyConflict`."""
    return _move(user, key, AUDIT_KEY_DISABLED, staff, {"disabled_at__isnull": True}, {"disabled_at": True})


def enable_key(user, key: ApiKey) -> ApiKey:
    """Enable a disabled ``key`` again (an enabled key stays as it is; a revoked one is a :class:`KeyConflict`)."""
    return _move(user, key, AUDIT_KEY_ENABLED, False, {"disabled_at__isnull": False}, {"disabled_at": None})
