"""Portal pages of inference endpoints (Django templates + htmx).

Views are thin (docs/design.md "House style"): they check access with one helper
(:func:`inference.services.get_endpoint_for_user`, the current team's membership), call ONE
service function and render; see :mod:`workloads.views` for the htmx conventions (partials,
polling that stops with 286 once an endpoint is final).
"""

from __future__ import annotations

import yaml
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from fleet.models import GpuFlavor
from inference import coldstarts, revisions, services, traffic
from inference.chart import cold_start_bars, replicas_chart
from inference.constants import ACTIVE_STATES, EndpointState, RevisionState
from inference.forms import EndpointEditForm, EndpointForm
from inference.models import InferenceEndpoint
from inference.serializers import revision_summary
from inference.snippets import snippets
from quotas.queue import queue_positions
from quotas.services import usage_summary
from teams.models import Role
from teams.permissions import (
    VIEWERS_CANNOT_SUBMIT,
    check_may_end,
    end_refusal,
    may_end,
    read_membership,
    submit_refusal,
)
from workloads import secrets
from workloads import services as workloads
from workloads.forms import command_echo
from workloads.idle import idle_context
from workloads.models import quote_rows
from workloads.telemetry.alerts import alert_context
from workloads.telemetry.series import telemetry_context
from workloads.views import (
    current_membership,
    events_panel,
    log_panel,
    no_team,
    polling_status,
    preemption_panel,
    queued_detail,
    wants_partial,
)

PER_PAGE = 25
#: Revisions the endpoint's page lists (the newest; the API pages through all of them).
REVISIONS_SHOWN = 10
#: Replica samples the chart draws (the newest; each is a change, so this spans hours to weeks).
CHART_SAMPLES = 300
#: Cold-start timelines the endpoint page draws (the newest).
CARD_TIMELINES = 8
#: What the live preview prices and admits.
PREVIEW_FIELDS = ("flavor", "gpus_per_replica", "min_replicas", "max_replicas", "autoscale", "spot",
                  "startup_timeout_seconds", "gpu_memory_gb", "for_reservation")


#: Filter values of the endpoints list: by default every endpoint but the deleted ones.
STATE_FILTERS = [("", "Not deleted"), ("active", "Active (may change)"), *EndpointState.choices, ("all", "All, deleted too")]


@login_required
@require_GET
@vary_on_headers("HX-Request")
def endpoint_list(request: HttpRequest) -> HttpResponse:
    """The current team's endpoints, newest first, by state (deleted ones only when asked for)."""
    membership = current_membership(request)
    if membership is None:
        return no_team(request)
    team = membership.team
    state = request.GET.get("state", "")
    endpoints = InferenceEndpoint.objects.filter(team=team).for_list()
    if state == "active":
        endpoints = endpoints.active()
    elif state in EndpointState.values:
        endpoints = endpoints.filter(state=state)
    elif state != "all":
        state = ""
        endpoints = endpoints.exclude(state=EndpointState.DELETED)
    page = Paginator(endpoints, PER_PAGE).get_page(request.GET.get("page"))
    quote_rows(page)
    positions = queue_positions(team) if any(e.state == EndpointState.QUEUED for e in page) else {}
    context = {"team": team, "page": page, "rows": [(e, positions.get(e.ref)) for e in page],
               "can_submit": membership.allows(Role.MEMBER), "submit_refused": submit_refusal(membership),
               "state": state, "state_filters": STATE_FILTERS}
    template = "inference/endpoint_list.html#rows" if wants_partial(request) else "inference/endpoint_list.html"
    return render(request, template, context)


def _form_context(request: HttpRequest, team, form) -> dict:
    return {"team": team, "form": form, "argv": command_echo(form.data), **_preview_context(team, form)}


def _preview_context(team, form: EndpointForm) -> dict:
    """The preview panel of a bound form: price range, budget share, start now / queue / refuse.

    Nothing until a flavor is picked (the panel asks for one): without it there is no price,
    and "flavor: This field is required." would scold a field the user has not reached yet.
    """
    if not form.is_bound or not form.data.get("flavor"):
        return {"preview": None, "endpoint_preview": None, "message": ""}
    form.is_valid()
    # Name and image change neither cost nor admission: stand-ins until they are typed.
    data = {"name": "preview", "image": "busybox", **{k: v for k, v in form.api_data.items()
                                                      if k in PREVIEW_FIELDS and v not in ("", None)}}
    try:
        result = services.preview_endpoint(team, data)
    except ValidationError as exc:
        return {"preview": None, "endpoint_preview": None,
                "message": "; ".join(f"{k}: {v[0]}" for k, v in exc.message_dict.items())}
    return {"preview": result.preview, "endpoint_preview": result, "message": ""}


def _create_form(team, data=None) -> EndpointForm:
    flavors = list(GpuFlavor.objects.usable().order_by("name"))
    return EndpointForm(data, flavors=flavors, usage=usage_summary(team), currency=settings.SLIPWAY_CURRENCY,
                        reservations=workloads.reservation_choices(team))


def _require_member(request: HttpRequest):
    membership = current_membership(request)
    if membership is not None and not membership.allows(Role.MEMBER):
        raise PermissionDenied(VIEWERS_CANNOT_SUBMIT)
    return membership


@login_required
@require_http_methods(["GET", "POST"])
def endpoint_new(request: HttpRequest) -> HttpResponse:
    """The "New endpoint" form; a valid POST creates it through ``services.create_endpoint``.

    A viewer sees the form disabled, with why (403: they may not submit it).
    """
    membership = current_membership(request)
    if membership is None:
        return no_team(request)
    team = membership.team
    if not membership.allows(Role.MEMBER):
        context = {**_form_context(request, team, _create_form(team)), "submit_refused": submit_refusal(membership)}
        return render(request, "inference/endpoint_form.html", context, status=403)
    form = _create_form(team, request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            endpoint = services.create_endpoint(request.user, team, form.api_data)
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, f"Endpoint {endpoint.name} created: {endpoint.get_state_display().lower()}.")
            return redirect("inference:endpoint-detail", pk=endpoint.pk)
    return render(request, "inference/endpoint_form.html", _form_context(request, team, form),
                  status=400 if form.is_bound else 200)


@login_required
@require_POST
def endpoint_preview(request: HttpRequest) -> HttpResponse:
    """htmx: price range, budget share and whether the endpoint would start now, queue or be refused."""
    membership = _require_member(request)
    if membership is None:
        return no_team(request)
    form = _create_form(membership.team, request.POST)
    return render(request, "inference/_endpoint_preview.html",
                  {**_preview_context(membership.team, form), "argv": command_echo(request.POST)})


def _detail_context(request: HttpRequest, endpoint: InferenceEndpoint) -> dict:
    """The status panel's context (why it waits: every kind's :func:`workloads.views.queued_detail`); platform
    staff outside the team read it without controls."""
    membership = read_membership(request.user, endpoint.team)
    # A deleting endpoint can neither be changed nor deleted again: no buttons for it.
    active = endpoint.state in ACTIVE_STATES and membership is not None
    return {"endpoint": endpoint, "can_edit": active and membership.allows(Role.MEMBER),
            "can_delete": active and may_end(request.user, endpoint, membership),
            "delete_refused": end_refusal(request.user, endpoint, membership) if active else "",
            "staff_reader": membership is None, **queued_detail(endpoint), **idle_context(endpoint),
            **alert_context(endpoint), "cold_start_history": coldstarts.history(endpoint)}


@login_required
@require_GET
@vary_on_headers("HX-Request")
def endpoint_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One endpoint: state, replicas chart, scaling log, GPU telemetry, events, logs, manifest; htmx gets the status panel."""
    endpoint = services.get_endpoint_for_user(request.user, pk, staff_reads=True)
    context = _detail_context(request, endpoint)
    if wants_partial(request):
        return render(request, "inference/endpoint_detail.html#status", context, status=polling_status(endpoint))
    samples = endpoint.replica_samples.values_list("at", "ready", "desired", "ceiling")[:CHART_SAMPLES]
    context.update(
        log=endpoint.scaling_events.all()[:50],
        chart=replicas_chart(list(reversed(samples)), timezone.now(), (endpoint.replicas, endpoint.desired_replicas,
                                                        endpoint.replica_ceiling), endpoint.min_replicas,
                             endpoint.max_replicas),
        manifest=yaml.safe_dump_all(workloads.manifests(endpoint), sort_keys=False),
        burst=services.burst_now(endpoint),
        snippets=[] if endpoint.is_final else snippets(endpoint.url, endpoint.served_model),
        cold_start_bars=cold_start_bars(coldstarts.timelines(endpoint, CARD_TIMELINES), coldstarts.STAGE_LABELS),
        cold_start_stages=coldstarts.STAGE_LABELS,
    )
    context.update(_revisions_context(endpoint, context["can_edit"]))
    context.update({**events_panel(endpoint), **preemption_panel(endpoint), **log_panel(request, endpoint),
                    **telemetry_context(endpoint, reverse("endpoint-telemetry", args=[endpoint.pk]), timezone.now()),
                    **_traffic_context(endpoint)})
    return render(request, "inference/endpoint_detail.html", context)


def _traffic_context(endpoint: InferenceEndpoint) -> dict:
    """The Traffic card (``inference/_traffic.html``): the last hour's series for its charts (the API's answer,
    which the page fetches again while the endpoint lives) and the last five minutes in words."""
    now = timezone.now()
    return {"traffic": traffic.series(endpoint, now=now), "traffic_url": reverse("endpoint-traffic", args=[endpoint.pk]),
            "traffic_polling": not endpoint.is_final, **_traffic_now(endpoint, now)}


def _traffic_now(endpoint: InferenceEndpoint, now) -> dict:
    found = traffic.figures_now(endpoint, now)
    revisions = [(number, found.words(figures)) for number, figures in found.revisions.items()]
    return {"endpoint": endpoint, "traffic_now": found, "traffic_now_words": found.words(),
            "traffic_now_revisions": revisions if len(revisions) > 1 else []}


@login_required
@require_GET
def endpoint_traffic(request: HttpRequest, pk: int) -> HttpResponse:
    """htmx: the Traffic card's figures of the last five minutes, polled while the endpoint lives (286 once final)."""
    endpoint = services.get_endpoint_for_user(request.user, pk, staff_reads=True)
    return render(request, "inference/_traffic_now.html", _traffic_now(endpoint, timezone.now()),
                  status=polling_status(endpoint))
def _revisions_context(endpoint: InferenceEndpoint, can_edit: bool) -> dict:
    """The revisions panel: each revision (newest first) with its traffic over the last 5 minutes, and
    whether Promote / Roll back are offered (a live canary, a member of the team)."""
    rows = list(endpoint.revisions.select_related("created_by").order_by("-number")[:REVISIONS_SHOWN])
    traffic = revisions.traffic_figures(endpoint)
    for rev in rows:
        rev.traffic = traffic.get(rev.number)
        rev.summary = revision_summary(rev.spec)
    live_canary = any(rev.state == RevisionState.CANARY for rev in rows)
    return {"revision_rows": rows, "can_roll": can_edit and live_canary}


def _rollout_action(request: HttpRequest, pk: int, act, done: str) -> HttpResponse:
    """Promote or roll back (POST, confirmed on the page): htmx gets the revisions panel again (409 with the
    words when there is no canary any more), a plain POST a message and the endpoint's page."""
    endpoint = services.get_endpoint_for_user(request.user, pk, Role.MEMBER)
    error = ""
    try:
        act(request.user, endpoint)
    except services.EndpointConflict as exc:
        error = str(exc)
    if request.htmx:
        endpoint.refresh_from_db()
        context = {"endpoint": endpoint, "revision_error": error, **_revisions_context(endpoint, True)}
        return render(request, "inference/endpoint_detail.html#revisions", context, status=409 if error else 200)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, f"Endpoint {endpoint.name}: {done}.")
    return redirect("inference:endpoint-detail", pk=endpoint.pk)


@login_required
@require_POST
def endpoint_promote(request: HttpRequest, pk: int) -> HttpResponse:
    """Promote the canary: the endpoint's Deployment takes its spec and rolls."""
    return _rollout_action(request, pk, services.promote_endpoint, "its canary is promoted and rolls out")


@login_required
@require_POST
def endpoint_rollback(request: HttpRequest, pk: int) -> HttpResponse:
    """Roll the canary back: weight 0, its replicas stopped, its units given back."""
    return _rollout_action(request, pk, services.rollback_endpoint, "its canary is rolled back")


@login_required
@require_http_methods(["GET", "POST"])
def endpoint_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Change image, env, sizes or autoscaling (a PATCH through ``services.update_endpoint``)."""
    endpoint = services.get_endpoint_for_user(request.user, pk, Role.MEMBER)
    if endpoint.state not in ACTIVE_STATES:
        messages.error(request, f"Endpoint {endpoint.name} is {endpoint.get_state_display().lower()}; "
                                "it can no longer be changed.")
        return redirect("inference:endpoint-detail", pk=endpoint.pk)
    autoscale = endpoint.autoscale or {}
    initial = {"image": endpoint.image, "env": "\n".join(f"{k}={v}" for k, v in endpoint.env.items()),
               "min_replicas": endpoint.min_replicas, "max_replicas": endpoint.max_replicas,
               "scale_down_delay_seconds": endpoint.scale_down_delay_seconds,
               **{part: autoscale.get(part) or "" for part in ("metric", "target", "engine", "query")}}
    form = EndpointEditForm(request.POST if request.method == "POST" else None, initial=initial,
                            secret_names=secrets.names(endpoint))
    if request.method == "POST" and form.is_valid():
        try:
            services.update_endpoint(request.user, endpoint, form.api_data)
        except ValidationError as exc:
            form.add_service_errors(exc)
        except services.EndpointConflict as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Endpoint {endpoint.name} updated.")
            return redirect("inference:endpoint-detail", pk=endpoint.pk)
    return render(request, "inference/endpoint_edit.html",
                  {"endpoint": endpoint, "form": form, "cold_start_history": coldstarts.history(endpoint)},
                  status=400 if form.is_bound else 200)


@login_required
@require_http_methods(["GET", "POST"])
def endpoint_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """GET asks for confirmation; POST deletes (quota released at once, objects removed).

    Who may is :func:`teams.permissions.may_end`: the service checks it for POST; the
    confirmation page checks it too, so nobody is asked to confirm what they may not do.
    """
    endpoint = services.get_endpoint_for_user(request.user, pk)
    if request.method == "GET":
        check_may_end(request.user, endpoint)
        return render(request, "inference/endpoint_delete.html", {"endpoint": endpoint})
    try:
        services.delete_endpoint(request.user, endpoint)
    except services.EndpointConflict as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Endpoint {endpoint.name} is being deleted; its quota is released.")
    return redirect("inference:endpoint-detail", pk=endpoint.pk)
