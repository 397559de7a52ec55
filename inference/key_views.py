"""Portal pages of API keys (Django templates + htmx): an endpoint's Keys section, a team's keys page, and the
revoke/disable/enable buttons of a key's row.

Thin (docs/architecture.md): the access helper, ONE service call (:mod:`inference.keys`), render. The endpoint page loads
its Keys section with htmx (``hx-trigger="load"``), so the section's queries never slow the page itself; without
htmx the same section is a page of its own. A new key is shown once, in the answer to its creation.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from billing.ledger import month_start
from inference import key_costs, keys
from inference.forms import ApiKeyForm
from inference.models import ApiKey
from inference.services import get_endpoint_for_user
from teams.models import Role
from teams.permissions import get_for_user, get_membership, read_membership
from workloads.views import wants_partial


def _rows(request: HttpRequest, queryset, membership) -> list[dict]:
    now = timezone.now()
    return [{"key": key, "state": keys.key_state(key, now), "can_manage": keys.may_manage(request.user, key, membership)}
            for key in queryset]


def _render(request: HttpRequest, template: str, context: dict, status: int = 200) -> HttpResponse:
    """The section alone for htmx (the endpoint page swaps it in), the whole page otherwise."""
    return render(request, f"{template}#section" if wants_partial(request) else template, context, status=status)


def _create(request: HttpRequest, team, endpoint) -> tuple[ApiKeyForm, str | None, ApiKey | None]:
    form = ApiKeyForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            key, raw = keys.create_key(request.user, team, endpoint, data["name"], data["expires_at"],
                                       data["requests_per_minute"], data["tokens_per_minute"])
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            return ApiKeyForm(), raw, key
    return form, None, None


@login_required
@require_http_methods(["GET", "POST"])
@vary_on_headers("HX-Request")
def endpoint_keys(request: HttpRequest, pk: int) -> HttpResponse:
    """The endpoint's Keys section: its keys and its team's (never a secret), this month's usage per key in money,
    and (members) the form that creates a key for it — whose answer shows the key once."""
    if request.method == "POST":
        endpoint = get_endpoint_for_user(request.user, pk, Role.MEMBER)
        form, raw, new = _create(request, endpoint.team, endpoint)
    else:
        endpoint = get_endpoint_for_user(request.user, pk, staff_reads=True)
        form, raw, new = ApiKeyForm(), None, None
    membership = read_membership(request.user, endpoint.team)
    now = timezone.now()
    context = {"endpoint": endpoint, "team": endpoint.team, "form": form, "new_key": raw, "new": new,
               "rows": _rows(request, keys.keys_of_endpoint(endpoint), membership),
               "can_create": keys.may_create(membership) and endpoint.state not in keys.ENDED_STATES,
               "usage": key_costs.endpoint_key_usage(endpoint, month_start(now), now, now),
               "action": reverse("inference:endpoint-keys", args=[endpoint.pk])}
    return _render(request, "inference/endpoint_keys.html", context,
                   status=400 if request.method == "POST" and raw is None else 200)


@login_required
@require_http_methods(["GET", "POST"])
def team_keys(request: HttpRequest, team: str) -> HttpResponse:
    """The team's keys page: team keys (valid for every endpoint of the team) and every endpoint's, this month's
    usage per key in money, and (members) the form that creates a team key."""
    if request.method == "POST":
        the_team = keys.team_for_keys(request.user, team, Role.MEMBER)
        form, raw, new = _create(request, the_team, None)
    else:
        the_team = keys.team_for_keys(request.user, team)
        form, raw, new = ApiKeyForm(), None, None
    membership = get_membership(request.user, the_team)
    now = timezone.now()
    context = {"team": the_team, "form": form, "new_key": raw, "new": new,
               "rows": _rows(request, keys.keys_of_team(the_team), membership),
               "can_create": keys.may_create(membership),
               "usage": key_costs.team_key_usage(the_team, month_start(now), now, now),
               "action": reverse("inference:team-keys", args=[the_team.slug])}
    return render(request, "inference/team_keys.html", context,
                  status=400 if request.method == "POST" and raw is None else 200)


def _key_action(request: HttpRequest, pk: int, move, done: str) -> HttpResponse:
    """Revoke, disable or enable key ``pk`` (404 outside its team; 403 for a viewer or a teammate's key) and answer
    its row (htmx swaps it) or go back to the page it was on."""
    key = get_for_user(ApiKey.objects.select_related("team", "endpoint", "created_by"), request.user, pk=pk)
    try:
        key = move(request.user, key)
    except keys.KeyConflict as exc:
        messages.error(request, str(exc))
    else:
        if not request.htmx:
            messages.success(request, f"Key “{key.name}” {done}.")
    if request.htmx:
        membership = get_membership(request.user, key.team)
        return render(request, "inference/_key_row.html", {"row": _rows(request, [key], membership)[0]})
    if key.endpoint_id:
        return redirect("inference:endpoint-keys", pk=key.endpoint_id)
    return redirect("inference:team-keys", team=key.team.slug)


@login_required
@require_POST
def key_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    return _key_action(request, pk, keys.revoke_key, "revoked")


@login_required
@require_POST
def key_disable(request: HttpRequest, pk: int) -> HttpResponse:
    return _key_action(request, pk, keys.disable_key, "disabled")


@login_required
@require_POST
def key_enable(request: HttpRequest, pk: int) -> HttpResponse:
    return _key_action(request, pk, keys.enable_key, "enabled")

