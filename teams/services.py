"""User actions on teams, tokens and the audit log (one function per action).

A team's admins manage it themselves (the portal's Team page): :func:`add_member`,
:func:`change_role`, :func:`remove_member` and :func:`set_team_settings` each check the admin
role, change one thing and write its audit event. Membership is read on every request (pages,
API, tokens — tokens belong to a user, not to a team), so a removed member or a lowered role
takes effect at the very next request.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.networks import address_in
from core.writes import Write, insert_of
from teams.models import ApiToken, AuditEvent, Membership, Role, Team, audit_actions, hash_token
from teams.permissions import require_team

#: The client address of the request being served (:func:`serving`), None outside a request.
_request_ip: ContextVar[str | None] = ContextVar("slipway_request_ip", default=None)


@contextmanager
def serving(request) -> Iterator[None]:
    """While ``request`` is served, audit events record its client address (:func:`client_ip`).

    Set once per request by :class:`teams.middleware.AuditAddressMiddleware`, so an event
    written by any service — a run submitted from the portal's form or the API, a member
    removed in the admin — records where it came from without every caller passing it.
    """
    token = _request_ip.set(client_ip(request))
    try:
        yield
    finally:
        _request_ip.reset(token)


def lock_team(team) -> None:
    """Take ``team``'s admission lock in the caller's transaction: its Team row, ``FOR NO KEY UPDATE``.

    Everything that decides or changes what the team may run takes it first and holds it to
    commit: :func:`quotas.admission.admit`, :func:`~quotas.admission.admit_waiting`, quota changes (admin console, services), and
    cancels (a queued run may be being admitted). One lock per team, taken first by all, so
    they serialise without deadlocks. The Team row, because it always exists (a team may have
    no quota rows at all); ``NO KEY``, so it does not block the foreign-key checks of the rows
    that reference the team (runs, holds, ledger). A no-op on SQLite, whose write
    transactions are serialised as a whole (``transaction_mode=IMMEDIATE``).
    """
    list(_lock_query(team))


def _lock_query(team):
    return Team.objects.select_for_update(no_key=True).filter(pk=team.pk).values_list("pk", flat=True)


def lock_team_statement(team) -> tuple[str, tuple]:
    """:func:`lock_team`'s statement, to send ahead of the reads made under it in one round trip
    (:func:`core.rawsql.read_together`: each read still sees what the lock's previous holder committed).
    Compile it inside the transaction it locks in."""
    return _lock_query(team).query.sql_with_params()


def audit(action: str, *, actor=None, team: Team | None = None, target: str = "", ip: str | None = None, **details) -> AuditEvent:
    """Append one audit event. ``actor`` may be None (e.g. a failed login by an unknown name).

    ``ip``: the client's address; by default the address of the request being served (none for
    the reconciler's and the workers' own events). ``action`` must be known (:func:`teams.models.audit_actions`).
    """
    event = audit_event(action, actor=actor, team=team, target=target, ip=ip, **details)
    event.save(force_insert=True)
    return event


def audit_write(action: str, *, actor=None, team: Team | None = None, target: str = "", ip: str | None = None,
                **details) -> Write:
    """:func:`audit`'s row as a :class:`core.writes.Write`, to run with others in one round trip.

    For a submission's event, written with its admission under the team's lock
    (:func:`workloads.services.admit_new`). Nothing acts on an audit row's save: an app that reports
    a move to the apps above sends its own signal (docs/architecture.md "Upward: signals").
    """
    return insert_of(audit_event(action, actor=actor, team=team, target=target, ip=ip, **details))


def audit_event(action: str, *, actor=None, team: Team | None = None, target: str = "", ip: str | None = None,
                **details) -> AuditEvent:
    """The unsaved event :func:`audit` appends (the one rule of what an event holds)."""
    if action not in audit_actions():
        raise ValueError(f"unknown audit action {action!r}: declare it (a kind's audit_actions)")
    return AuditEvent(
        action=action,
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=getattr(actor, "username", "") or details.pop("username", ""),
        team=team,
        target=target[:200],
        details=details,
        ip_address=ip if ip is not None else _request_ip.get(),
    )


@transaction.atomic
def create_api_token(user, name: str, expires_days: int | None = None, ip: str | None = None,
                     origin: str = ApiToken.Origin.PORTAL) -> tuple[ApiToken, str]:
    """Create a token for ``user`` (made at ``origin``). Returns the row and the raw token, which is never stored."""
    raw = ApiToken.generate()
    expires_at = timezone.now() + timedelta(days=expires_days) if expires_days else None
    token = ApiToken.objects.create(
        user=user, name=name or "token", key_hash=hash_token(raw), key_prefix=raw[:10], expires_at=expires_at,
        origin=origin,
    )
    audit(AuditEvent.Action.TOKEN_CREATED, actor=user, target=f"token {token.pk} ({token.name})", ip=ip,
          expires_at=expires_at.isoformat() if expires_at else None, origin=origin)
    return token, raw


@transaction.atomic
def revoke_api_token(user, token: ApiToken, ip: str | None = None) -> ApiToken:
    """Revoke ``token`` (idempotent). Only its owner gets here: callers fetch it via ``user.api_tokens``."""
    updated = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    if updated:
        audit(AuditEvent.Action.TOKEN_REVOKED, actor=user, target=f"token {token.pk} ({token.name})", ip=ip)
    token.refresh_from_db()
    return token


def _check_role(role: str) -> None:
    if role not in Role.values:
        raise ValidationError({"role": [f"Pick one of: {', '.join(Role.values)}."]})


def _other_admins(membership: Membership) -> bool:
    """Whether the team has an admin besides ``membership`` who can act (the caller holds the team's lock).

    :attr:`Membership.manages_team`: counting a deactivated admin let the last admin who can sign
    in step down or be removed, leaving the team to staff.
    """
    others = membership.team.memberships.filter(role=Role.ADMIN).exclude(pk=membership.pk).select_related("user")
    return any(other.manages_team for other in others)


def _audit_membership(actor, membership: Membership, change: str, ip: str | None, **details) -> None:
    # The admin console's vocabulary (teams.admin): one action, the change in the details.
    audit(AuditEvent.Action.MEMBERSHIP_CHANGED, actor=actor, team=membership.team, target=membership.user.username,
          ip=ip, change=change, **details)


def add_member(actor, team: Team, username: str, role: str, ip: str | None = None) -> Membership:
    """Add the existing user ``username`` to ``team`` with ``role`` (team admins only); audited.

    Raises ``ValidationError`` on ``username`` (no such active user, already in the team) or
    ``role``; ``PermissionDenied`` below admin; ``Http404`` for outsiders.
    """
    require_team(actor, team, Role.ADMIN)
    _check_role(role)
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise ValidationError({"username": [f"No active user is named {username!r}."]})
    already = Membership.objects.filter(team=team, user=user).first()
    if already is not None:
        raise ValidationError({"username": [f"{username} is already in the team ({already.role})."]})
    try:
        with transaction.atomic():
            membership = Membership.objects.create(team=team, user=user, role=role)
            _audit_membership(actor, membership, "added", ip, role=role)
    except IntegrityError:
        # Another admin added them a moment ago; the unique constraint decided.
        raise ValidationError({"username": [f"{username} is already in the team."]}) from None
    return membership


def change_role(actor, membership: Membership, role: str, ip: str | None = None) -> Membership:
    """Give ``membership`` another role (team admins only); audited. The last admin stays admin.

    Raises ``ValidationError`` on ``role`` for an unknown role or for demoting the team's last
    admin (themselves, necessarily), which would leave nobody to manage the team.
    """
    with transaction.atomic():
        # 1. The team's lock serialises membership changes: two admins demoting each other
        #    at once must not both see "another admin is left". The actor's own role is read
        #    under it too: a concurrent change may have just demoted them.
        lock_team(membership.team)
        require_team(actor, membership.team, Role.ADMIN)
        _check_role(role)
        current = Membership.objects.select_related("team", "user").filter(pk=membership.pk).first()
        if current is None:
            raise ValidationError({"role": [f"{membership.user.username} is no longer in the team."]})
        if current.role == role:
            return current
        # 2. The check and the move, under the lock.
        if current.role == Role.ADMIN and not _other_admins(current):
            raise ValidationError({"role": [f"{current.user.username} is the team's last admin: make someone "
                                            "else admin first."]})
        old_role, current.role = current.role, role
        current.save(update_fields=["role"])  # save(), not update(): a role lost is news (teams.events)
        _audit_membership(actor, current, "changed", ip, role=role, old_role=old_role)
    return current


def remove_member(actor, membership: Membership, ip: str | None = None) -> None:
    """Remove ``membership`` from its team (team admins only; not the last admin); audited.

    The removed user loses the team at their next request, in the portal and with their tokens.
    """
    with transaction.atomic():
        lock_team(membership.team)  # as in change_role: the checks hold until commit
        require_team(actor, membership.team, Role.ADMIN)
        current = Membership.objects.select_related("team", "user").filter(pk=membership.pk).first()
        if current is None:
            return  # removed already (a second click): nothing left to do or audit
        if current.role == Role.ADMIN and not _other_admins(current):
            raise ValidationError({"non_field_errors": [
                f"{current.user.username} is the team's last admin: make someone else admin first."]})
        current.delete()
        _audit_membership(actor, current, "removed", ip, role=current.role)


def set_team_settings(actor, team: Team, members_may_cancel_teammates_work: bool, ip: str | None = None) -> Team:
    """Change the team's settings (team admins only); audited when something changed."""
    require_team(actor, team, Role.ADMIN)
    with transaction.atomic():
        changed = (Team.objects.filter(pk=team.pk)
                   .exclude(members_may_cancel_teammates_work=members_may_cancel_teammates_work)
                   .update(members_may_cancel_teammates_work=members_may_cancel_teammates_work))
        if changed:
            audit(AuditEvent.Action.TEAM_SETTINGS_CHANGED, actor=actor, team=team, target=f"team {team.slug}", ip=ip,
                  members_may_cancel_teammates_work=members_may_cancel_teammates_work)
    team.refresh_from_db()
    return team


def authenticate_token(raw: str) -> ApiToken | None:
    """The usable token matching ``raw`` (recording its use), or None."""
    token = ApiToken.objects.usable().select_related("user").filter(key_hash=hash_token(raw)).first()
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    # Write last use at most once a minute: a busy automation must not turn every read into a write.
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def client_ip(request) -> str | None:
    """The client's address, for the audit log and the sign-in throttle.

    ``SLIPWAY_TRUSTED_PROXIES`` says which X-Forwarded-For entries to believe (each proxy
    appends the address it got the request from; entries further left were sent by the
    client and prove nothing):

    - 0: none; REMOTE_ADDR.
    - N > 0: the N-th entry from the right (REMOTE_ADDR when there are fewer). Anyone who can
      reach Slipway without passing the proxies can forge it.
    - a list of proxy addresses/networks: only when REMOTE_ADDR is one of them, the
      right-most entry that is not (walking left past each trusted proxy).
    """
    proxies = settings.SLIPWAY_TRUSTED_PROXIES
    remote = _valid_ip(request.META.get("REMOTE_ADDR", ""))
    hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    hops = [hop for hop in hops if hop]
    if isinstance(proxies, int):
        if proxies > 0 and len(hops) >= proxies:
            return _valid_ip(hops[-proxies])
        return remote
    networks = tuple(proxies)
    if remote is None or not address_in(remote, networks):
        return remote
    for hop in reversed(hops):
        address = _valid_ip(hop)
        if address is None or not address_in(address, networks):
            return address  # garbage where a proxy wrote the client: unknown
    return _valid_ip(hops[0]) if hops else remote


def _valid_ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None
