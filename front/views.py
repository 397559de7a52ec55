"""Portal pages that span workload kinds: the dashboard, login, team switcher, API tokens (and the
device page of ``slipway login``), the Team page, the Usage page, and the admin console's Capacity and Showback pages.

Views stay thin: they check access, call one service function, render.

The Team page (``/teams/<slug>/``; the navigation's "Team" goes to the current team's) shows
every member their team's people and roles, its GPU quota and its month in money (the
dashboard's figures and templates); the team's admins also add members, change roles, remove
members and change the team's settings there. Those are plain forms: a change answers with a
redirect back to the page, refused input with the page again (400) and the error next to
what was refused.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from billing.ledger import month_end, month_start
from billing.reports import (
    SHOWBACK_COLUMNS,
    parse_month,
    showback_csv_rows,
    showback_filename,
    showback_page,
    usage_page,
)
from billing.services import budget_bar
from front.forms import (
    AddMemberForm,
    AlertSettingsForm,
    ApiTokenForm,
    DeviceApproveForm,
    DeviceCodeForm,
    RoleForm,
    TeamSettingsForm,
)
from notifications.services import delivery_log
from quotas.api import csv_download
from quotas.policy import GUIDE, flavor_rows
from quotas.services import capacity_rows, usage_bars
from quotas.sharing import team_sharing
from reservations import services as reservation_services
from teams import device, oidc, services, throttle
from teams.middleware import SESSION_KEY
from teams.models import Membership, Role
from teams.permissions import get_for_user, require_team, submit_refusal
from workloads import services as workloads
from workloads.registry import Pages, kind_names
from workloads.registry import kinds as registered_kinds
from workloads.services import waiting_for_capacity
from workloads.telemetry.alert_settings import set_team_alert_settings, team_view
from workloads.views import STOP_POLLING, current_membership, no_team, no_team_context, wants_partial


class LoginView(auth_views.LoginView):
    """Sign-in through the shared throttle (teams.throttle): 429 while locked, even for the right password.

    With single sign-on configured the page also offers "Sign in with <provider>" (front.sso); the
    password form stays, for staff only with ``SLIPWAY_LOCAL_LOGIN=staff`` (the form refuses others).
    """

    template_name = "portal/login.html"
    redirect_authenticated_user = True
    authentication_form = throttle.SignInForm

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        if oidc.configured():
            context.update(sso_url=reverse("openid_connect_login", args=[oidc.PROVIDER_ID]),
                           sso_name=settings.SLIPWAY_OIDC_NAME, staff_only=settings.SLIPWAY_LOCAL_LOGIN == "staff")
        return context

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if throttle.refused(form):
            response.status_code = 429
        return response


@login_required
@require_POST
def switch_team(request: HttpRequest) -> HttpResponse:
    """Make another of the user's teams the current one (404 for teams they are not in)."""
    membership = require_team(request.user, request.POST.get("team", ""))
    request.session[SESSION_KEY] = membership.team.slug
    target = request.POST.get("next", "")
    # Only a local path: redirect() would take a bare word for a URL name (NoReverseMatch).
    if not target.startswith("/") or not url_has_allowed_host_and_scheme(target, {request.get_host()}):
        return redirect("dashboard")
    return redirect(target)


@never_cache  # the response may carry a raw token: no browser or proxy may keep a copy
@login_required
@require_http_methods(["GET", "POST"])
def api_tokens(request: HttpRequest) -> HttpResponse:
    """List the user's tokens; create one (its raw value is shown exactly once)."""
    form = ApiTokenForm(request.POST or None)
    new_token = None
    if request.method == "POST" and form.is_valid():
        _token, new_token = services.create_api_token(
            request.user, form.cleaned_data["name"], form.cleaned_data["expires_days"], ip=services.client_ip(request)
        )
        form = ApiTokenForm()
    tokens = request.user.api_tokens.all()
    return render(request, "portal/api_tokens.html", {"form": form, "tokens": tokens, "new_token": new_token})


@login_required
@require_POST
def revoke_api_token(request: HttpRequest, pk: int) -> HttpResponse:
    # Only the owner's tokens are reachable: someone else's token id is a 404.
    token = get_object_or_404(request.user.api_tokens, pk=pk)
    services.revoke_api_token(request.user, token, ip=services.client_ip(request))
    if request.htmx:
        # The swapped row shows the new state; a flash message would only surface later,
        # on an unrelated page.
        return render(request, "portal/api_tokens.html#token-row", {"token": token})
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("api-tokens")


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def device_login(request: HttpRequest) -> HttpResponse:
    """``slipway login`` in the browser (:mod:`teams.device`): the code the terminal shows, then approve or deny.

    Whatever signs people in to the portal signs them in here (``login_required``). GET never
    decides: ``?code=`` (the terminal's link) only fills the code in and shows who asks; the
    POST of the second step approves, with the token's name and expiry, or denies.
    """
    data = request.POST if request.method == "POST" else request.GET
    code_form = DeviceCodeForm(data if "code" in data else None)
    template = "portal/device_login.html"
    if not code_form.is_valid():
        return render(request, template, {"code_form": code_form}, status=400 if code_form.is_bound else 200)
    try:
        login = device.pending(request.user, code_form.cleaned_data["code"])
    except device.TooManyWrongCodes as exc:
        code_form.add_error("code", str(exc))
        return render(request, template, {"code_form": code_form}, status=429)
    except ValidationError as exc:
        code_form.add_error("code", exc.message_dict["user_code"])
        return render(request, template, {"code_form": code_form}, status=400)
    code = device.shown_user_code(device.normal_user_code(code_form.cleaned_data["code"]))
    form = DeviceApproveForm(request.POST if request.method == "POST" else None,
                             initial={"code": code, "name": device.token_name_for(login.client_name)})
    context = {"login": login, "code": code, "form": form}
    if request.method == "GET" or (request.POST.get("decision") != "deny" and not form.is_valid()):
        return render(request, template, context, status=200 if request.method == "GET" else 400)
    try:
        if request.POST.get("decision") == "deny":
            login = device.deny(request.user, login, ip=services.client_ip(request))
        else:
            login = device.approve(request.user, login, form.cleaned_data["name"], form.cleaned_data["expires_days"],
                                   ip=services.client_ip(request))
    except ValidationError as exc:
        code_form.add_error("code", exc.message_dict["user_code"])
        return render(request, template, {"code_form": code_form}, status=400)
    return render(request, template, {"decided": login, "code": code})



# -- the Team page -----------------------------------------------------------------------------


@login_required
@require_GET
def current_team(request: HttpRequest) -> HttpResponse:
    """The navigation's "Team": the current team's page."""
    current = request.membership
    if getattr(current, "pk", None) is None:  # a lazy object around None: the user is in no team
        return no_team(request)
    return redirect("team-detail", team=current.team.slug)


def _team_page(request: HttpRequest, membership: Membership, *, add_form: AddMemberForm | None = None,
               refused: dict[int, list[str]] | None = None, alert_form: AlertSettingsForm | None = None,
               status: int = 200) -> HttpResponse:
    """The Team page as ``membership`` sees it; ``refused``: errors of a role change or removal, by membership."""
    team, is_admin = membership.team, membership.allows(Role.ADMIN)
    refused = refused or {}
    members = list(team.memberships.select_related("user").order_by("user__username"))
    admins = [m.pk for m in members if m.manages_team]
    context = {
        "team": team, "membership": membership, "is_admin": is_admin, "roles": Role.choices,
        "members": [(m, refused.get(m.pk, [])) for m in members],
        # The service refuses to remove the last admin; the page offers no button for it.
        "sole_admin": admins[0] if len(admins) == 1 else None,
        "usage": usage_bars(team), "budget": budget_bar(team), "can_submit": membership.allows(Role.MEMBER),
        "new_on_flavor": new_on_flavor(),
        "add_form": (add_form or AddMemberForm()) if is_admin else None,
        "settings_form": TeamSettingsForm(initial={
            "members_may_cancel_teammates_work": team.members_may_cancel_teammates_work}) if is_admin else None,
    }
    context["sharing"] = team_sharing(team, context["usage"])
    # Each kind's pages of the whole team (an endpoint's team API keys), linked from here.
    context["team_pages"] = [(item.label, reverse(item.url_name, args=[team.slug]))
                             for kind in registered_kinds() for item in Pages.of(kind).team_pages]
    context["alert_rules"] = rules = team_view(team)
    context["alert_form"] = (alert_form or AlertSettingsForm(initial={r.field.name: r.own for r in rules})
                             ) if is_admin else None
    # The log names subscribers' addresses and the team's webhook URLs: its admins only.
    context["deliveries"] = delivery_log(team) if is_admin else None
    return render(request, "portal/team.html", context, status=status)


@login_required
@require_GET
def team_detail(request: HttpRequest, team: str) -> HttpResponse:
    """A team's people, roles, quota and budget; its admins manage it here (outsiders: 404)."""
    return _team_page(request, require_team(request.user, team))


def _managed_membership(request: HttpRequest, team: str, pk: int) -> Membership:
    """Membership ``pk`` of team ``team`` for one of its admins: 404 for outsiders (or another team's row), else 403."""
    memberships = Membership.objects.select_related("team", "user").filter(team__slug=team)
    return get_for_user(memberships, request.user, Role.ADMIN, pk=pk)


@login_required
@require_POST
def add_team_member(request: HttpRequest, team: str) -> HttpResponse:
    """Add an existing user to the team with a role (team admins)."""
    admin_membership = require_team(request.user, team, Role.ADMIN)
    form = AddMemberForm(request.POST)
    if form.is_valid():
        try:
            added = services.add_member(request.user, admin_membership.team, form.cleaned_data["username"],
                                        form.cleaned_data["role"], ip=services.client_ip(request))
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, f"{added.user.username} added as {added.role}.")
            return redirect("team-detail", team=admin_membership.team.slug)
    return _team_page(request, admin_membership, add_form=form, status=400)


@login_required
@require_POST
def change_member_role(request: HttpRequest, team: str, pk: int) -> HttpResponse:
    """Give a member another role (team admins; the last admin stays admin)."""
    membership = _managed_membership(request, team, pk)
    form = RoleForm(request.POST)
    if form.is_valid():
        try:
            changed = services.change_role(request.user, membership, form.cleaned_data["role"],
                                           ip=services.client_ip(request))
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, f"{changed.user.username} is now {changed.role}.")
            return redirect("team-detail", team=membership.team.slug)
    refused = {membership.pk: [message for field_errors in form.errors.values() for message in field_errors]}
    return _team_page(request, require_team(request.user, membership.team), refused=refused, status=400)


@login_required
@require_http_methods(["GET", "POST"])
def remove_team_member(request: HttpRequest, team: str, pk: int) -> HttpResponse:
    """Remove a member (team admins; not the last admin). An admin who removes themselves leaves the page.

    GET asks for confirmation (as the portal's Delete endpoint does); only its POST removes.
    """
    membership = _managed_membership(request, team, pk)
    if request.method == "GET":
        return render(request, "portal/member_remove.html", {"membership": membership, "team": membership.team})
    try:
        services.remove_member(request.user, membership, ip=services.client_ip(request))
    except ValidationError as exc:
        refused = {membership.pk: exc.messages}
        return _team_page(request, require_team(request.user, membership.team), refused=refused, status=400)
    messages.success(request, f"{membership.user.username} removed from {membership.team.name}.")
    if membership.user_id == request.user.pk:
        return redirect("dashboard")  # no longer in the team: its page would be a 404
    return redirect("team-detail", team=membership.team.slug)


@login_required
@require_POST
def team_settings(request: HttpRequest, team: str) -> HttpResponse:
    """Change the team's settings (team admins)."""
    admin_membership = require_team(request.user, team, Role.ADMIN)
    form = TeamSettingsForm(request.POST)
    form.is_valid()  # one checkbox: absent is False, so every POST is valid
    services.set_team_settings(request.user, admin_membership.team,
                               form.cleaned_data["members_may_cancel_teammates_work"], ip=services.client_ip(request))
    messages.success(request, "Team settings saved.")
    return redirect("team-detail", team=admin_membership.team.slug)


@login_required
@require_POST
def team_alert_settings(request: HttpRequest, team: str) -> HttpResponse:
    """Change the team's alert rules (team admins; tighter than the platform's only: else 400, nothing saved)."""
    admin_membership = require_team(request.user, team, Role.ADMIN)
    form = AlertSettingsForm(request.POST)
    if form.is_valid():
        try:
            set_team_alert_settings(request.user, admin_membership.team, form.cleaned_data,
                                    ip=services.client_ip(request))
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, "Alert rules saved.")
            return redirect("team-detail", team=admin_membership.team.slug)
    return _team_page(request, admin_membership, alert_form=form, status=400)


# Dashboard --------------------------------------------------------------------------------------


def _panels(team, summary: dict[str, dict]) -> list[dict]:
    """Each kind's part of the dashboard, in the navigation's order: its button, figure card and panel."""
    shown = sorted((k for k in registered_kinds() if isinstance(k, Pages) and k.dashboard is not None),
                   key=lambda k: k.nav.order if k.nav is not None else float("inf"))
    return [{"stat": k.dashboard.stat, "summary": summary[k.prefix], "panel": k.dashboard.panel, "new": k.dashboard.new,
             "context": k.dashboard.context(team) if k.dashboard.context else {}} for k in shown]


def new_on_flavor() -> tuple[str, str] | None:
    """(URL, noun) of the page for a new workload on a flavor that the quota table links free flavors to:
    the first kind in nav order that declares one (``Pages.new_on_flavor``); None: no link."""
    offering = [kind for kind in registered_kinds() if isinstance(kind, Pages) and kind.new_on_flavor]
    if not offering:
        return None
    kind = min(offering, key=lambda kind: kind.nav.order if kind.nav else 1000)
    return reverse(kind.new_on_flavor), kind.noun


@login_required
@require_GET
@vary_on_headers("HX-Request")
def dashboard(request: HttpRequest) -> HttpResponse:
    """The landing page: the current team's quota usage, budget, queue, and each kind's figure and panel
    (``Pages.dashboard``: the recent runs)."""
    membership = current_membership(request)
    if membership is None:
        return no_team(request)
    team = membership.team
    # The figures change while anything is queued or holding quota: poll until nothing is.
    kinds = workloads.team_summary(team)
    polling = any(row["holding"] or row["queued"] for row in kinds.values())
    context = {
        "team": team, "membership": membership, "usage": usage_bars(team), "budget": budget_bar(team),
        "kinds": kinds, "polling": polling, "can_submit": membership.allows(Role.MEMBER),
        "panels": _panels(team, kinds), "new_on_flavor": new_on_flavor(),
        "submit_refused": submit_refusal(membership),
    }
    context["sharing"] = team_sharing(team, context["usage"])
    if wants_partial(request):
        # The live figures and recent runs alone; once nothing is queued or holding quota they cannot
        # change: stop polling.
        return render(request, "front/dashboard.html#live", context, status=200 if polling else STOP_POLLING)
    return render(request, "front/dashboard.html", context)


# Help ----------------------------------------------------------------------------------------------


@require_GET
@login_required
@vary_on_headers("HX-Request")
def flavor_help(request: HttpRequest) -> HttpResponse:
    """"Which flavor?": the GPU sharing advice as a table (quotas.policy.GUIDE) and the flavors offered, with their
    sharing, isolation, memory per unit and price per unit-hour. Anyone signed in, a team or none (the
    flavors are the API's ``GET /flavors/``); htmx gets the flavors table alone."""
    context = {"guide": GUIDE, "rows": flavor_rows(settings.SLIPWAY_CURRENCY)}
    template = "front/flavor_help.html#flavors" if wants_partial(request) else "front/flavor_help.html"
    return render(request, template, context)


# Money and capacity -------------------------------------------------------------------------------


@require_GET
@login_required
def usage(request):
    """The current team's spend in a month (``?month=YYYY-MM``, default this one): charts, by person, flavor,
    workload and workload kind (each called as the registry says); for platform staff, the month's idle pool
    capacity too (nobody's bill: no team member sees it)."""
    current = request.membership
    if getattr(current, "pk", None) is None:
        return render(request, "workloads/no_team.html", no_team_context(request.user))
    team = require_team(request.user, current.team).team
    now = timezone.now()
    month, error, status = parse_month(request.GET.get("month"), now), "", 200
    if month is None:
        month, error, status = month_start(now), "Pick a month from the list (YYYY-MM, not in the future).", 400
    context = {"team": team, "error": error, **usage_page(team, month, now, kind_names(), staff=request.user.is_staff),
               "kind_panels": _usage_panels(team, month),
               "reserved": reservation_services.window_uses(team, month, month_end(month))}
    return render(request, "front/usage.html", context, status=status)


def _usage_panels(team, month) -> list[dict]:
    """Each kind's card of the Usage page over ``month`` (``Pages.usage_panel``: an endpoint's API keys)."""
    return [{"template": k.usage_panel.template, "context": k.usage_panel.context(team, month, month_end(month))}
            for k in registered_kinds() if isinstance(k, Pages) and k.usage_panel is not None]


@require_GET
@staff_member_required
def capacity(request):
    """Per flavor and per node: what the cluster has, what teams were promised, what is used, pending and queued;
    each elastic pool's nodes ready, provisioning and that it may still add; and the work admitted but waiting for
    cluster capacity."""
    waiting = waiting_for_capacity()
    pending: dict[int, int] = {}
    for item in waiting:
        pending[item.workload.flavor_id] = pending.get(item.workload.flavor_id, 0) + item.units
    rows, nodes, error, pools = capacity_rows(pending)
    context = {**admin.site.each_context(request), "title": "Capacity", "rows": rows, "nodes": nodes,
               "waiting": waiting, "error": error, "pools": pools}
    return render(request, "admin/front/capacity.html", context)


@require_GET
@staff_member_required
def showback(request):
    """Staff: every team's cost, idle share and budget state in a month; ``?format=csv`` per team and flavor, and
    the idle pool capacity per pool (:func:`billing.reports.showback_csv_rows`)."""
    now = timezone.now()
    month, error, status = parse_month(request.GET.get("month"), now), "", 200
    if month is None:
        month, error, status = month_start(now), "Pick a month from the list (YYYY-MM, not in the future).", 400
    if request.GET.get("format") == "csv" and not error:
        return csv_download(showback_csv_rows(month, now), SHOWBACK_COLUMNS, showback_filename(month))
    context = {**admin.site.each_context(request), "title": "Showback", "error": error, **showback_page(month, now, kind_names())}
    return render(request, "admin/front/showback.html", context, status=status)
