"""User actions on teams, tokens and the audit log (one function per action)."""

from __future__ import annotations

import ipaddress
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.models import ApiToken, AuditEvent, Team, hash_token


def audit(action: str, *, actor=None, team: Team | None = None, target: str = "", ip: str | None = None, **details) -> AuditEvent:
    """Append one audit event. ``actor`` may be None (e.g. a failed login by an unknown name)."""
    return AuditEvent.objects.create(
        action=action,
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=getattr(actor, "username", "") or details.pop("username", ""),
        team=team,
        target=target[:200],
        details=details,
        ip_address=ip,
    )


@transaction.atomic
def create_api_token(user, name: str, expires_days: int | None = None, ip: str | None = None) -> tuple[ApiToken, str]:
    """Create a token for ``user``. Returns the row and the raw token, which is never stored."""
    raw = ApiToken.generate()
    expires_at = timezone.now() + timedelta(days=expires_days) if expires_days else None
    token = ApiToken.objects.create(
        user=user, name=name or "token", key_hash=hash_token(raw), key_prefix=raw[:10], expires_at=expires_at
    )
    audit(AuditEvent.Action.TOKEN_CREATED, actor=user, target=f"token {token.pk} ({token.name})", ip=ip,
          expires_at=expires_at.isoformat() if expires_at else None)
    return token, raw


@transaction.atomic
def revoke_api_token(user, token: ApiToken, ip: str | None = None) -> ApiToken:
    """Revoke ``token`` (idempotent). Only its owner gets here: callers fetch it via ``user.api_tokens``."""
    updated = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    if updated:
        audit(AuditEvent.Action.TOKEN_REVOKED, actor=user, target=f"token {token.pk} ({token.name})", ip=ip)
    token.refresh_from_db()
    return token


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
    """The client's address for the audit log.

    Behind ``SLIPWAY_TRUSTED_PROXIES`` = N reverse proxies each one appends the address it got
    the request from to X-Forwarded-For, so the client is the N-th entry from the right;
    entries further left were sent by the client and prove nothing. With N = 0, REMOTE_ADDR.
    """
    proxies = settings.SLIPWAY_TRUSTED_PROXIES
    if proxies > 0:
        hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        hops = [hop for hop in hops if hop]
        if len(hops) >= proxies:
            return _valid_ip(hops[-proxies])
    return _valid_ip(request.META.get("REMOTE_ADDR", ""))


def _valid_ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None
