"""The Notifications page of a team (``/teams/<slug>/notifications/``): thin views over :mod:`notifications.services`.

Every member sets their own e-mail subscriptions; the team's admins also add and delete its
webhooks (a new webhook's secret is shown on the answer to its creation, once). Refused input
answers with the page again (400) and the errors next to the fields. The team's delivery log
is on the Team page (front), for its admins.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from notifications import services
from notifications.forms import EmailForm, WebhookForm
from teams.models import Membership, Role
from teams.permissions import require_team
from teams.services import client_ip


def _page(request: HttpRequest, membership: Membership, *, email_form: EmailForm | None = None,
          webhook_form: WebhookForm | None = None, new_secret: str | None = None, status: int = 200) -> HttpResponse:
    team, is_admin = membership.team, membership.allows(Role.ADMIN)
    context = {
        "team": team, "membership": membership, "is_admin": is_admin, "new_secret": new_secret,
        "email_form": email_form or EmailForm(initial={"kinds": services.email_kinds(request.user, team)}),
        "webhooks": services.webhooks(team) if is_admin else [],
        "webhook_form": (webhook_form or WebhookForm()) if is_admin else None,
    }
    return render(request, "notifications/page.html", context, status=status)


@login_required
@require_GET
def notifications_page(request: HttpRequest, team: str) -> HttpResponse:
    return _page(request, require_team(request.user, team))


@login_required
@require_POST
def set_email(request: HttpRequest, team: str) -> HttpResponse:
    """Save the caller's e-mail subscriptions to the team's events."""
    membership = require_team(request.user, team)
    form = EmailForm(request.POST)
    if form.is_valid():
        try:
            services.set_email_kinds(request.user, membership.team, form.cleaned_data["kinds"])
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, "E-mail notifications saved.")
            return redirect("notifications", team=membership.team.slug)
    return _page(request, membership, email_form=form, status=400)


@never_cache  # the answer carries the new secret: no browser or proxy may keep a copy
@login_required
@require_POST
def add_webhook(request: HttpRequest, team: str) -> HttpResponse:
    """Add a webhook (team admins); the answer shows its secret once."""
    membership = require_team(request.user, team, Role.ADMIN)
    form = WebhookForm(request.POST)
    if form.is_valid():
        try:
            _hook, secret = services.create_webhook(request.user, membership.team, form.cleaned_data["url"],
                                                    form.cleaned_data["kinds"], ip=client_ip(request))
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            return _page(request, membership, new_secret=secret, status=201)
    return _page(request, membership, webhook_form=form, status=400)


@login_required
@require_POST
def delete_webhook(request: HttpRequest, team: str, pk: int) -> HttpResponse:
    """Delete a webhook (team admins; another team's is a 404)."""
    webhook = services.get_webhook(request.user, team, pk)
    services.delete_webhook(request.user, webhook, ip=client_ip(request))
    messages.success(request, f"Webhook {webhook.url} deleted.")
    return redirect("notifications", team=webhook.team.slug)
