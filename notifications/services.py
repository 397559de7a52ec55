"""What people do with notifications: one function per action, shared by the pages and the admin.

Members (any role) choose the kinds of their team's events they get by e-mail; the team's
admins add and delete its webhooks. Every function checks the caller's role itself
(:func:`teams.permissions.require_team`: 404 outside the team, 403 below the role).
"""

from __future__ import annotations

import secrets

from django.core.exceptions import ValidationError
from django.db import transaction

from notifications import vocabulary
from notifications.constants import DELIVERY_LOG_SIZE, MAX_WEBHOOKS_PER_TEAM, STAFF_KINDS
from notifications.models import Delivery, EmailSubscription, Webhook
from notifications.targets import url_problem
from teams.models import AuditEvent, Role, Team
from teams.permissions import get_for_user, require_team
from teams.services import audit
from workloads import crypto


def email_kinds(user, team: Team) -> list[str]:
    """The kinds of ``team``'s events ``user`` gets by e-mail."""
    return list(EmailSubscription.objects.filter(user=user, team=team).values_list("event_kind", flat=True))


@transaction.atomic
def set_email_kinds(user, team: Team, kinds: list[str]) -> list[str]:
    """Make ``user``'s e-mail subscriptions to ``team`` exactly ``kinds`` (any member; viewers too)."""
    require_team(user, team)
    unknown = vocabulary.unknown(kinds)
    if unknown:
        raise ValidationError({"kinds": f"Unknown kinds of event: {', '.join(unknown)}."})
    if kinds and not user.email:
        raise ValidationError({"kinds": "Your account has no e-mail address: ask an administrator to add one."})
    EmailSubscription.objects.filter(user=user, team=team).exclude(event_kind__in=kinds).delete()
    EmailSubscription.objects.bulk_create([EmailSubscription(user=user, team=team, event_kind=kind) for kind in kinds],
                                          ignore_conflicts=True)
    return email_kinds(user, team)


def webhooks(team: Team) -> list[Webhook]:
    return list(Webhook.objects.filter(team=team))


def get_webhook(user, team: str, pk: int) -> Webhook:
    """Webhook ``pk`` of team ``team`` for one of its admins (404 for anyone outside the team)."""
    return get_for_user(Webhook.objects.select_related("team").filter(team__slug=team), user, Role.ADMIN, pk=pk)


def create_webhook(user, team: Team, url: str, kinds: list[str], ip: str | None = None) -> tuple[Webhook, str]:
    """Add a webhook to ``team`` (team admins). Returns it and its signing secret, which is shown
    this once: only its encryption (workloads.crypto) is stored, to sign each request."""
    require_team(user, team, Role.ADMIN)
    errors: dict[str, str] = {}
    problem = url_problem(url)
    if problem:
        errors["url"] = problem
    if not kinds:
        errors["kinds"] = "Choose at least one kind of event."
    elif vocabulary.unknown(kinds):
        errors["kinds"] = f"Unknown kinds of event: {', '.join(vocabulary.unknown(kinds))}."
    if errors:
        raise ValidationError(errors)
    secret = f"whsec_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        # The team row, locked: two admins adding at once cannot pass the limit together.
        Team.objects.select_for_update().filter(pk=team.pk).first()
        if Webhook.objects.filter(team=team).count() >= MAX_WEBHOOKS_PER_TEAM:
            raise ValidationError({"url": f"A team has at most {MAX_WEBHOOKS_PER_TEAM} webhooks: delete one first."})
        webhook = Webhook.objects.create(team=team, url=url, event_kinds=sorted(set(kinds)), created_by=user,
                                         sealed_secret=crypto.seal({"secret": secret}), secret_prefix=secret[:8])
        audit(AuditEvent.Action.TEAM_SETTINGS_CHANGED, actor=user, team=team, target=f"webhook {webhook.pk}", ip=ip,
              added=url, kinds=webhook.event_kinds)
    return webhook, secret


@transaction.atomic
def delete_webhook(user, webhook: Webhook, ip: str | None = None) -> None:
    """Delete a webhook (team admins). Its deliveries stay in the log, with the URL they went to."""
    require_team(user, webhook.team, Role.ADMIN)
    audit(AuditEvent.Action.TEAM_SETTINGS_CHANGED, actor=user, team=webhook.team, target=f"webhook {webhook.pk}",
          ip=ip, deleted=webhook.url)
    webhook.delete()


def delivery_log(team: Team) -> list[Delivery]:
    """The team's latest deliveries, newest first (one query); not those to platform staff (whose
    addresses are not the team's to read)."""
    return list(Delivery.objects.filter(team=team).exclude(event__event_kind__in=STAFF_KINDS).select_related("event")
                .order_by("-created_at", "-pk")[:DELIVERY_LOG_SIZE])
