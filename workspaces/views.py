"""Portal pages of workspaces (Django templates + htmx), and the ingress controller's ``auth-url``.

Views are thin (docs/design.md "House style"): one access helper, ONE service call, a render. The Workspaces page
shows each workspace's state, flavor, cost so far and how long it has been idle, with Open, Pause,
Resume and Delete (its confirmation names the home volume's size). ``/workspaces/auth/`` answers
the ingress controller about every request to a workspace on a real cluster
(:func:`workspaces.services.authorize`).
"""

from __future__ import annotations

from urllib.parse import SplitResult, parse_qs, urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from fleet.models import GpuFlavor
from quotas.queue import queue_positions
from teams.models import Role
from teams.permissions import end_refusal, may_end, read_membership, submit_refusal
from workloads import services as workloads
from workloads.estimates.preview import Preview
from workloads.idle import idle_context
from workloads.models import quote_rows
from workloads.telemetry.alerts import alert_context
from workloads.telemetry.series import telemetry_context
from workloads.views import current_membership, events_panel, no_team, polling_status, queued_detail, wants_partial
from workspaces import access, local, services
from workspaces.constants import (
    DEFAULT_HOME_GB,
    DELETABLE_STATES,
    PAUSABLE_STATES,
    RESUMABLE_STATES,
    WorkspaceState,
)
from workspaces.idle import idle_for
from workspaces.models import Workspace

#: The New workspace form's fields, as the API names them (the form posts what the API takes).
FORM_FIELDS = ("name", "flavor", "gpus", "image", "cpu", "memory_gb", "home_gb", "idle_minutes", "priority",
               "for_reservation")


def _row(workspace: Workspace, position, user, membership, now) -> dict:
    return {"workspace": workspace, "position": position, "idle_for": idle_for(workspace, now),
            "may_open": workspace.may_open(user, membership), "may_act": may_end(user, workspace, membership),
            "openable": workspace.state == WorkspaceState.RUNNING, "pausable": workspace.state in PAUSABLE_STATES,
            "resumable": workspace.state in RESUMABLE_STATES, "deletable": workspace.state in DELETABLE_STATES}


@login_required
@require_GET
@vary_on_headers("HX-Request")
def workspace_list(request: HttpRequest) -> HttpResponse:
    """The current team's workspaces that are not deleted, newest first."""
    membership = current_membership(request)
    if membership is None:
        return no_team(request)
    team = membership.team
    workspaces = list(Workspace.objects.filter(team=team).exclude(state=WorkspaceState.DELETED).for_list())
    quote_rows(workspaces)
    positions = queue_positions(team) if any(w.state == WorkspaceState.QUEUED for w in workspaces) else {}
    now = timezone.now()
    rows = [_row(w, positions.get(w.ref), request.user, membership, now) for w in workspaces]
    context = {"team": team, "rows": rows, "can_submit": membership.allows(Role.MEMBER),
               "submit_refused": submit_refusal(membership), "local_servers": local.available()}
    template = "workspaces/workspace_list.html#rows" if wants_partial(request) else "workspaces/workspace_list.html"
    return render(request, template, context)


@login_required
@require_http_methods(["GET", "POST"])
def workspace_new(request: HttpRequest) -> HttpResponse:
    """The New workspace form: GET shows it, POST creates through the one service (field errors shown)."""
    membership = current_membership(request, Role.MEMBER)
    if membership is None:
        return no_team(request)
    team = membership.team
    errors: dict = {}
    values = {"home_gb": DEFAULT_HOME_GB}
    if request.method == "POST":
        values = {name: request.POST.get(name, "").strip() for name in FORM_FIELDS}
        data = {name: value for name, value in values.items() if value != ""}
        try:
            workspace = services.create_workspace(request.user, team, data)
        except ValidationError as exc:
            errors = exc.message_dict
        else:
            return redirect(workspace.get_absolute_url())
    flavors = list(GpuFlavor.objects.usable().order_by("name"))
    if not values.get("flavor") and flavors:
        values["flavor"] = flavors[0].name  # what the picker shows selected: previewed at once
    return render(request, "workspaces/workspace_new.html",
                  {"team": team, "flavors": flavors, "values": values, "errors": errors,
                   "policy": services.team_policy(team), "preview": _preview(team, values),
                   "reservations": workloads.reservation_choices(team)},
                  status=400 if errors else 200)


@login_required
@require_POST
def workspace_preview(request: HttpRequest) -> HttpResponse:
    """htmx: the New workspace form's live preview — price, budget, start now or queue (the New run form's panel)."""
    membership = current_membership(request, Role.MEMBER)
    if membership is None:
        return no_team(request)
    values = {name: request.POST.get(name, "").strip() for name in FORM_FIELDS}
    return render(request, "workspaces/workspace_new.html#preview", {"preview": _preview(membership.team, values)})


def _preview(team, values: dict) -> Preview | None:
    """The preview of the form's ``values`` (:func:`services.preview_workspace`); bad input an "invalid" preview
    naming the first field; None until a flavor is picked. The name is not the preview's business."""
    data = {name: value for name, value in values.items() if value not in ("", None)}
    if not data.get("flavor"):
        return None
    try:
        return services.preview_workspace(team, {"name": "preview", **data})
    except ValidationError as exc:
        first = next(iter(exc.message_dict.items()))
        return Preview("invalid", f"{first[0]}: {first[1][0]}")


@login_required
@require_GET
@vary_on_headers("HX-Request")
def workspace_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One workspace: its state and why it waits (a queued one, resumed or new: the queue's reason and its start
    estimate), flavor, home volume, cost so far, idle time and alerts, its GPU telemetry, events and actions;
    htmx gets the status panel, which polls until the workspace is final (as a run's and an endpoint's do)."""
    workspace = services.get_workspace_for_user(request.user, pk, staff_reads=True)
    membership = read_membership(request.user, workspace.team)
    now = timezone.now()
    waits = queued_detail(workspace)
    row = _row(workspace, waits["position"], request.user, membership, now)
    context = {**waits, **row, "row": row, "team": workspace.team,
               "end_refused": end_refusal(request.user, workspace, membership),
               **idle_context(workspace), **alert_context(workspace)}
    if wants_partial(request):
        return render(request, "workspaces/workspace_detail.html#status", context, status=polling_status(workspace))
    return render(request, "workspaces/workspace_detail.html",
                  {**context, **events_panel(workspace),
                   **telemetry_context(workspace, reverse("workspace-telemetry", args=[workspace.pk]), now)})


@login_required
@require_GET
def workspace_open(request: HttpRequest, pk: int) -> HttpResponse:
    """"Open": to the workspace's Jupyter server, for those allowed on it only (404 outside the team, 403 in it)."""
    workspace = services.get_workspace_for_user(request.user, pk)
    try:
        url = services.open_url(request.user, workspace)
    except services.NotOpen as exc:
        messages.error(request, str(exc))
        return redirect(workspace.get_absolute_url())
    response = HttpResponseRedirect(url)
    response["Cache-Control"] = "no-store"  # the address carries a one-use ticket
    response["Referrer-Policy"] = "no-referrer"
    return response


def _act(request: HttpRequest, pk: int, action, done: str) -> HttpResponse:
    workspace = services.get_workspace_for_user(request.user, pk, Role.MEMBER)
    try:
        action(request.user, workspace)
    except services.WorkspaceConflict as exc:
        messages.error(request, str(exc))
    except ValidationError as exc:
        messages.error(request, "; ".join(m for ms in exc.message_dict.values() for m in ms))
    else:
        messages.success(request, f"Workspace {workspace.name} {done}.")
    back = request.POST.get("next", "")
    # Back to the page the button was on (the list or the workspace's page), never another site.
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        back = workspace.get_absolute_url()
    return redirect(back)


@login_required
@require_POST
def workspace_pause(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, pk, services.pause_by_user, "paused: its home volume is kept")


@login_required
@require_POST
def workspace_resume(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, pk, services.resume, "resumed")


@login_required
@require_POST
def workspace_share(request: HttpRequest, pk: int) -> HttpResponse:
    shared = request.POST.get("shared") == "true"
    return _act(request, pk, lambda user, ws: services.set_shared(user, ws, shared),
                "is shared with the team's admins" if shared else "is no longer shared")


@login_required
@require_http_methods(["GET", "POST"])
def workspace_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the confirmation, naming the home volume and its size; POST: delete it with its volume."""
    workspace = services.get_workspace_for_user(request.user, pk, Role.MEMBER)
    if request.method == "GET":
        return render(request, "workspaces/workspace_delete.html", {"workspace": workspace, "team": workspace.team})
    return _act(request, pk, services.delete_workspace, "deleted with its home volume")


#: ingress-nginx's auth-url knows 2xx, 401 and 403 (any other answer is a 500 to the browser): "it does not run"
#: (409 from the check) is said as 403 there. The sandbox's proxy, which is not bound by that contract, says 409.
INGRESS_STATUS = {409: 403}


def _original_address(request: HttpRequest) -> SplitResult:
    """The address the browser asked for (``X-Original-URL``, set by the ingress controller). One that cannot be
    read (``https://[ws-1…``: not the controller's, which writes what nginx parsed, but anyone may call this view)
    is read as an address with no ticket, on https: the answer is then the cookie's, a 401 without one — never a
    500, which ingress-nginx would show the browser as its own error page."""
    try:
        return urlsplit(request.headers.get("X-Original-URL", ""))
    except ValueError:  # urllib's "Invalid IPv6 URL" and kin
        return urlsplit("")


@require_GET
def auth(request: HttpRequest) -> HttpResponse:
    """The ingress controller's ``auth-url`` for ``?workspace=``: :func:`workspaces.services.authorize` by the
    workspace's own cookie (the portal's session plays no part: its cookies never reach a workspace's host), or
    the one-use ticket in the original request's address (``X-Original-URL``), which it exchanges for that
    cookie (``Set-Cookie``, which the controller passes to the browser). 200 carries the token for the Jupyter
    server; 401 sends the browser to the portal's Open; 403 refuses; 404 for a workspace not found or deleted."""
    original = _original_address(request)
    ticket = parse_qs(original.query).get(access.TICKET_PARAM, [""])[0]
    verdict = services.authorize(request.GET.get("workspace", ""), cookie=access.cookie_from(request.COOKIES),
                                 ticket=ticket)
    response = HttpResponse(status=INGRESS_STATUS.get(verdict.status, verdict.status))
    if verdict.token:
        response["Authorization"] = f"token {verdict.token}"
    if verdict.cookie:  # the workspace host is served over https on a real cluster
        secure = original.scheme != "http"
        response.set_cookie(access.cookie_name(secure), verdict.cookie, **access.cookie_attributes(secure=secure))
    response["Cache-Control"] = "no-store"
    return response
