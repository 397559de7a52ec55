"""Portal pages of training runs (Django templates + htmx).

Views are thin (docs/design.md "House style"): they check access with one helper
(:func:`jobs.services.get_run_for_user`, :func:`teams.permissions.require_team`), call ONE
service function and render. They never write the database themselves.

htmx: one view per page; when ``request.htmx`` the view renders a partial of the same
template (``"jobs/run_list.html#rows"``). Cells that poll (state, logs, events, the detail
page's status panel) are answered with HTTP 286 once the run is final, which makes htmx stop
polling; the same markup is still swapped in, so the last state is shown. The logs and events
panels are every kind's (``workloads.views``, ``templates/workloads/``).
"""

from __future__ import annotations

import json

import yaml
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from fleet.models import GpuFlavor
from jobs import metrics, services
from jobs.constants import RunState
from jobs.forms import NewRunForm, initial_from_run, preview_data
from jobs.metric_views import run_charts
from jobs.models import RunProgress, TrainingRun
from jobs.page import progress_view, run_page
from quotas.queue import queue_positions
from quotas.services import usage_summary
from teams.models import Role
from teams.permissions import check_may_end, end_refusal, may_end, read_membership, submit_refusal
from workloads import attempts, secrets
from workloads import services as workloads
from workloads.api import pk_of
from workloads.estimates.preview import Preview
from workloads.forms import command_echo
from workloads.idle import idle_context
from workloads.models import quote_rows
from workloads.telemetry.alerts import alert_context
from workloads.telemetry.series import telemetry_context
from workloads.views import (
    STOP_POLLING,
    current_membership,
    events_panel,
    log_panel,
    no_team,
    polling_status,
    preemption_panel,
    queued_detail,
    wants_partial,
)

RUNS_PER_PAGE = 25

#: Filter values of the runs list: the states, "active" (queued or holding quota) and "holding" (holding
#: quota: admitted, pending or running), as docs/glossary.md defines them.
STATE_FILTERS = [("", "Any state"), ("active", "Active (queued or holding quota)"), ("holding", "Holding quota"),
                 *RunState.choices]

# 1. Runs list --------------------------------------------------------------------------------


@login_required
@require_GET
@vary_on_headers("HX-Request")  # one URL, two bodies: caches must keep them apart
def run_list(request: HttpRequest) -> HttpResponse:
    """The current team's runs, newest first, with filters; htmx gets just the rows."""
    membership = current_membership(request)
    if membership is None:
        return no_team(request)
    team = membership.team
    state, mine, query = request.GET.get("state", ""), request.GET.get("mine") == "1", request.GET.get("q", "").strip()
    runs = TrainingRun.objects.filter(team=team).for_list()
    if state == "active":
        runs = runs.active()
    elif state == "holding":
        runs = runs.holding_quota()
    elif state in RunState.values:
        runs = runs.filter(state=state)
    if mine:
        runs = runs.filter(created_by=request.user)
    if query:
        runs = runs.filter(name__icontains=query)
    page = Paginator(runs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    quote_rows(page)
    # One query for every queued run's position, instead of one per row.
    positions = queue_positions(team) if any(r.state == RunState.QUEUED for r in page) else {}
    rows = [(run, positions.get(run.ref)) for run in page]
    filters = request.GET.copy()
    filters.pop("page", None)
    context = {
        "team": team, "membership": membership, "page": page, "rows": rows, "state": state, "mine": mine,
        "query": query, "state_filters": STATE_FILTERS, "filter_query": filters.urlencode(),
        "can_submit": membership.allows(Role.MEMBER), "submit_refused": submit_refusal(membership),
    }
    template = "jobs/run_list.html#rows" if wants_partial(request) else "jobs/run_list.html"
    return render(request, template, context)


# 2. New run ----------------------------------------------------------------------------------


def _new_run_form(team, data=None, initial=None) -> NewRunForm:
    flavors = list(GpuFlavor.objects.usable().order_by("name"))
    return NewRunForm(data, flavors=flavors, usage=usage_summary(team), currency=settings.SLIPWAY_CURRENCY,
                      reservations=workloads.reservation_choices(team), initial=initial)


def _initial_from(request: HttpRequest, team) -> tuple[dict, TrainingRun | None]:
    """What the form starts with, and the run it copies (or None).

    ``?from=<run id>`` ("Run again"): that run's request under a fresh name, to edit and then
    submit (404 for a run the user may not see; a run of another of their teams is not copied
    into this one). ``?flavor=``: the flavor (the dashboard links each quota bar to a new run).
    """
    if "from" in request.GET:
        run = services.get_run_for_user(request.user, pk_of(request.GET["from"]))
        if run.team_id != team.pk:
            messages.warning(request, f"Run {run.name} belongs to {run.team.name}: switch to that team to run it again.")
            return {}, None
        return initial_from_run(run, services.name_for_run_again(run)), run
    return ({"flavor": request.GET["flavor"]} if request.GET.get("flavor") else {}), None


@login_required
@require_http_methods(["GET", "POST"])
def run_new(request: HttpRequest) -> HttpResponse:
    """The "New run" form; a valid POST submits through ``services.submit_run``."""
    membership = current_membership(request)
    if membership is None:
        return no_team(request)
    team = membership.team
    initial, copy_of = _initial_from(request, team) if request.method == "GET" else ({}, None)
    if not membership.allows(Role.MEMBER):
        # A viewer sees the form, disabled, and why (403: they may not submit it).
        form = _new_run_form(team, None, initial)
        context = {"form": form, "team": team, "preview": None, "argv": command_echo(form.initial),
                   "copy_of": copy_of, "submit_refused": submit_refusal(membership)}
        return render(request, "jobs/run_new.html", context, status=403)
    form = _new_run_form(team, request.POST if request.method == "POST" else None, initial)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                run = services.submit_run(request.user, team, form.api_data)
            except ValidationError as exc:
                form.add_service_errors(exc)
            else:
                if run.state == RunState.QUEUED:
                    messages.warning(request, f"Run {run.name} is queued: {run.reason}")
                else:
                    messages.success(request, f"Run {run.name} was admitted and is starting.")
                return redirect("jobs:run-detail", pk=run.pk)
        status = 400  # bad input: a clear 400 with the errors next to the fields
    # A prefilled form ("Run again", a flavor link) is previewed at once, as a typed one is.
    values = form.data if form.is_bound else form.initial
    context = {"form": form, "team": team, "preview": _preview(team, values), "argv": command_echo(values),
               "copy_of": copy_of}
    return render(request, "jobs/run_new.html", context, status=status)


@login_required
@require_POST
def run_preview(request: HttpRequest) -> HttpResponse:
    """Live preview for the form: cost per hour and start-now / queue / reject, and the argv echo."""
    membership = current_membership(request)
    if membership is None:
        return no_team(request)
    services.ensure_can_submit(request.user, membership.team)
    context = {"preview": _preview(membership.team, request.POST), "argv": command_echo(request.POST)}
    return render(request, "jobs/_run_preview.html", context)


def _preview(team, values) -> Preview | None:
    """The preview of a form's values; None (the page asks to pick a flavor) until a flavor is picked.

    Without a flavor there is no price to show, and "flavor: This field is required." would
    scold the user for a field they have not reached yet.
    """
    return services.preview_run(team, preview_data(values)) if values.get("flavor") else None


# 3. Run detail -------------------------------------------------------------------------------


def _status_context(request: HttpRequest, run: TrainingRun) -> dict:
    """The status panel's context (its rows: :func:`jobs.page.run_page`; why it waits: every kind's
    :func:`workloads.views.queued_detail`); platform staff outside the team read it without controls."""
    membership = read_membership(request.user, run.team)
    return {"run": run, "page": run_page(run, attempts.earlier(run), timezone.now()), **queued_detail(run),
            "can_cancel": not run.is_final and membership is not None and may_end(request.user, run, membership),
            "cancel_refused": "" if run.is_final or membership is None else end_refusal(request.user, run, membership),
            "can_rerun": membership is not None and membership.allows(Role.MEMBER),
            "rerun_refused": "" if membership is None else submit_refusal(membership),
            "staff_reader": membership is None, "progress": _progress(run), **idle_context(run), **alert_context(run)}


def _progress(run: TrainingRun):
    """The run page's progress row: its current attempt's, or its last attempt's step without an ETA."""
    state = metrics.state_of(RunProgress.objects.filter(run=run).first())
    now = timezone.now()
    found, source = metrics.picked(run, state, now)
    return progress_view(state, found, now, run.trainer_report if source == "trainer" else None)


@login_required
@require_GET
@vary_on_headers("HX-Request")
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One run: state, timeline, reason, cost, metrics, GPU telemetry, spec, manifest, events, logs; htmx gets the
    status panel."""
    run = services.get_run_for_user(request.user, pk, staff_reads=True)
    context = _status_context(request, run)
    if wants_partial(request):
        return render(request, "jobs/run_detail.html#status", context, status=polling_status(run))
    manifest = yaml.safe_dump_all(workloads.manifests(run), sort_keys=False)
    context.update({
        "manifest": manifest,
        **events_panel(run),
        **preemption_panel(run),
        **log_panel(request, run),
        "spec": _spec_rows(run),
        **run_charts(run),
        **telemetry_context(run, reverse("run-telemetry", args=[run.pk]), timezone.now()),
    })
    return render(request, "jobs/run_detail.html", context)


def _spec_rows(run: TrainingRun) -> list[tuple[str, str, bool]]:
    """The submitted request as (label, value, multiline) rows; argv as a quoted list, env one item per line."""
    volumes = [f"{v['claim']}:{v['mount_path']}{':ro' if v.get('read_only') else ''}" for v in run.volumes]
    lines = [
        ("Environment", [f"{k}={v}" for k, v in sorted(run.env.items())]),
        ("Secret environment", [f"{k}={v}" for k, v in secrets.masked(secrets.names(run)).items()]),
        ("Volumes", volumes),
    ]
    plain = [
        ("Flavor", f"{run.flavor.name}{' (spot)' if run.spot else ''}"),
        ("GPUs", f"{run.gpus_per_worker} per worker, {run.workers} worker{'s' if run.workers != 1 else ''} ({run.resource_kind})"),
        ("Framework", run.framework),
        ("CPU / memory / shm", " / ".join("-" if v is None else f"{v:g}" for v in (run.cpu, run.memory_gb, run.shm_gb))),
        ("Retries", str(run.max_retries)),
        ("Max runtime", f"{run.max_runtime_minutes} min" if run.max_runtime_minutes else "-"),
        ("Priority", run.get_priority_display()),
    ]
    if run.checkpoint is not None:
        volume = run.checkpoint.get("volume") or "provided by Slipway"
        plain.append(("Checkpoint contract", f"grace {run.checkpoint['grace_seconds']} s, volume {volume}"))
    # argv exactly as the container gets it: each argument quoted, so "a b" is visibly one argument.
    rows = [("Image", run.image, False), ("Command", json.dumps(run.command, ensure_ascii=False), False)]
    if run.args:
        rows.append(("Arguments", json.dumps(run.args, ensure_ascii=False), False))
    rows += [(label, "\n".join(items), True) for label, items in lines if items]
    rows += [(label, value, False) for label, value in plain]
    return rows


@login_required
@require_http_methods(["GET", "POST"])
def run_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """GET asks for confirmation (the page an idle alert links to); POST cancels (who may:
    :func:`teams.permissions.may_end`, checked for both). A finished run: a message, or 409 for htmx."""
    run = services.get_run_for_user(request.user, pk)
    if request.method == "GET":
        check_may_end(request.user, run)
        return render(request, "jobs/run_cancel.html", {"run": run, **idle_context(run)})
    try:
        run = services.cancel_run(request.user, run)
    except services.RunConflict as exc:
        if request.htmx:
            context = {**_status_context(request, run), "error": str(exc)}
            return render(request, "jobs/run_detail.html#status", context, status=409)
        messages.error(request, str(exc))
        return redirect("jobs:run-detail", pk=run.pk)
    if request.htmx:
        return render(request, "jobs/run_detail.html#status", _status_context(request, run), status=STOP_POLLING)
    messages.success(request, f"Run {run.name} cancelled.")
    return redirect("jobs:run-detail", pk=run.pk)
