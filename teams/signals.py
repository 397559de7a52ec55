"""Audit log entries for sign-ins, connected in :meth:`teams.apps.TeamsConfig.ready`.

And single sign-on's group sync: at every sign-in through the identity provider (allauth's
``user_logged_in``, which carries the ``sociallogin``) the person's memberships are made to match
their groups (:func:`teams.sso.sync_memberships`) before the first page is served.

The audit entries hang off Django's auth signals, so the portal login, the admin console login and any
other ``authenticate()`` caller are all recorded, whichever of them runs first.
"""

from __future__ import annotations

from allauth.account.signals import user_logged_in as account_logged_in
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver

from teams import oidc, services, sso
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


@receiver(account_logged_in, dispatch_uid="slipway-sso-sync")
def sync_groups_at_login(sender, request, user, sociallogin=None, **kwargs) -> None:
    if sociallogin is not None:  # a password sign-in through allauth carries none (Slipway has no such door)
        sso.sync_memberships(user, oidc.claims_of(sociallogin.account.extra_data))
