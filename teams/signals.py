"""Audit log entries for sign-ins, connected in :meth:`teams.apps.TeamsConfig.ready`.

They hang off Django's auth signals, so the portal login, the admin console login and any
other ``authenticate()`` caller are all recorded, whichever of them runs first.
"""

from __future__ import annotations

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver

from teams import services
from teams.models import AuditEvent


@receiver(user_login_failed, dispatch_uid="slipway-audit-login-failed")
def audit_failed_login(sender, credentials: dict, request=None, **kwargs) -> None:
    # Django already masks the password in ``credentials``; only the name is kept.
    services.audit(
        AuditEvent.Action.LOGIN_FAILED,
        username=str(credentials.get("username", ""))[:150],
        ip=services.client_ip(request) if request is not None else None,
    )


@receiver(user_logged_in, dispatch_uid="slipway-audit-login")
def audit_login(sender, request, user, **kwargs) -> None:
    services.audit(AuditEvent.Action.LOGIN, actor=user, ip=services.client_ip(request) if request is not None else None)
