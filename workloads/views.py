"""What every kind's portal pages share: the current team, htmx partials, polling that stops,
the status panel's why-it-waits lines (:func:`queued_detail`, ``templates/workloads/_queued_detail.html``),
the logs and events panels (``templates/workloads/_logs.html``, ``_events.html``), and the
read views every kind routes alike (:func:`read_urls`: state, logs, log download, events).

htmx: one view per page; when ``request.htmx`` the view renders a partial of the same template.
Cells that poll are answered with HTTP 286 once their workload is final, which makes htmx stop
polling; the same markup is still swapped in, so the last state is shown.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_GET

from cluster.capacity import scheduler_message
from quotas.queue import queue_positions, queue_reason
from teams import oidc
from teams.models import Membership, Role
from teams.permissions import require_team
from teams.sso import MissingGroupsClaimError, claim_groups
from workloads import attempts
from workloads import services as workloads
from workloads.cycle import preemption
from workloads.estimates.forecast import CAPACITY_WAIT, StartEstimate, estimated_starts
from workloads.models import ReasonCode
from workloads.registry import Pages, kind_for, kind_of

#: htmx stops polling an element whose request is answered with this status.
STOP_POLLING = 286
#: Log lines a page shows (newest at the bottom); the download has them all.
LOG_TAIL = 200


def current_membership(request: HttpRequest, role: str = Role.VIEWER) -> Membership | None:
    """The current team's membership (checked for ``role``), or None when the user has no team.

    ``request.membership`` is a lazy object that may wrap None; it is re-checked through
    ``require_team`` so every page uses the one access helper (403 below ``role``).
    """
    current = request.membership
    if getattr(current, "pk", None) is None:
        return None
    return require_team(request.user, current.team, role)


def no_team(request: HttpRequest) -> HttpResponse:
    """Someone in no team: platform staff land on the Capacity page, others are told whom to ask for one."""
    if request.user.is_staff:
        return redirect("admin-capacity")
    return render(request, "workloads/no_team.html", no_team_context(request.user))


def no_team_context(user) -> dict:
    """What the no-team page tells someone who signed in through the identity provider: the groups it
    sent (none of which maps to a team), and whom to ask."""
    claims = oidc.last_claims(user)
    try:
        groups = claim_groups(claims) if claims is not None else None
    except MissingGroupsClaimError:
        groups = None
    return {"sso_groups": groups, "staff_contact": settings.SLIPWAY_STAFF_CONTACT}


def wants_partial(request: HttpRequest) -> bool:
    """An htmx swap, but not htmx restoring a page from history (that needs the full page)."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def polling_status(workload) -> int:
    return STOP_POLLING if workload.is_final else 200


def picked_attempt(request: HttpRequest, workload) -> int | None:
    """The attempt ``?attempt=`` names (None: the current one): 400 for a value that is no attempt
    number, 404 for an attempt the workload never had (:func:`workloads.attempts.attempt_of`)."""
    try:
        return attempts.attempt_of(request.GET.get("attempt"), workload.attempt)
    except ValueError as exc:
        raise BadRequest(f"attempt: {exc}") from exc
    except attempts.UnknownAttempt as exc:
        raise Http404(str(exc)) from exc


def _picked_logs(request: HttpRequest, workload, tail: int | None) -> workloads.Logs:
    """The log of ``?pod=`` (the default pod when absent) of ``?attempt=`` (the current one when absent);
    404 when it names none of the workload's pods or attempts, 400 for a malformed attempt."""
    try:
        return workloads.logs(workload, request.GET.get("pod", ""), tail, picked_attempt(request, workload))
    except workloads.UnknownPod as exc:
        raise Http404("No such pod.") from exc


@dataclass(frozen=True)
class AttemptLink:
    """One entry of the logs card's attempt picker: ``?attempt=<number>``, and what it is."""

    number: int
    label: str
    shown: bool


def _attempt_links(workload, shown: int) -> list[AttemptLink]:
    """The attempt picker of a workload queued again at least once ([] on a first attempt: nothing to pick)."""
    if workload.attempt == 1:
        return []
    ended = {a.number: a for a in attempts.earlier(workload)}
    links = []
    for number in range(1, workload.attempt + 1):
        if number == workload.attempt:
            label = f"attempt {number} (current)"
        elif number in ended:
            how = ended[number].ended_words
            label = f"attempt {number} ({how})" if ended[number].logs else f"attempt {number} ({how}; no logs kept)"
        else:
            label = f"attempt {number} (no logs kept)"
        links.append(AttemptLink(number, label, number == shown))
    return links


def _route(workload, page: str) -> str:
    """The URL of one of ``workload``'s pages: every kind names them ``<app>:<noun>-<page>``."""
    return reverse(f"{workload._meta.app_label}:{kind_of(workload).noun}-{page}", args=[workload.pk])


def log_panel(request: HttpRequest, workload) -> dict:
    """Context of the logs card (``workloads/_logs.html``) and of its polled box.

    A poll (htmx) also refreshes the pod picker out of band, so a retry's new attempt or a new
    replica shows up in it without a reload. ``?attempt=`` shows an earlier attempt's saved logs
    (a workload queued again: the attempt picker links each); they do not change, so that box
    does not poll.
    """
    found = _picked_logs(request, workload, LOG_TAIL)
    shown = found.attempt or workload.attempt
    return {"workload": workload, "logs": found,
            "picked": request.GET.get("pod", ""), "oob": wants_partial(request),
            "attempt_links": _attempt_links(workload, shown),
            "past_attempt": found.attempt if found.attempt is not None and found.attempt != workload.attempt else None,
            "page_url": _route(workload, "detail"), "logs_url": _route(workload, "logs"),
            "download_url": _route(workload, "logs-download")}


def log_box(request: HttpRequest, workload) -> HttpResponse:
    """The polled logs box of ``?pod=`` (else the default pod); 286 once the workload is final."""
    return render(request, "workloads/_log_box.html", log_panel(request, workload), status=polling_status(workload))


def log_download(request: HttpRequest, workload) -> HttpResponse:
    """The whole log of ``?pod=`` (the default pod when absent) as a text file named after the pod.

    The page's link and the API's ``logs/download/`` both answer with this: 404 for a pod that is
    not the workload's; ``?attempt=`` as for the logs.
    """
    try:
        log = workloads.log_file(workload, request.GET.get("pod", ""), picked_attempt(request, workload))
    except workloads.UnknownPod as exc:
        raise Http404("No such pod.") from exc
    response = HttpResponse(log.text, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{log.filename}"'
    return response


def queued_detail(workload) -> dict:
    """Why ``workload`` waits and when it should start, as every kind's status panel says it
    (``workloads/_queued_detail.html``): ``reason``, ``start`` (a :class:`~workloads.estimates.forecast.StartEstimate`
    or None), ``scheduler_message`` and ``position`` (its place in the team's queue, or None).

    Queued (its kind's :attr:`~workloads.registry.Lifecycle.queued`, a resumed workspace too): the
    queue's reason from the figures of now (:func:`quotas.queue.queue_reason`; the stored one is from
    when it was queued), after who preempted it if someone did, its start estimate and its position.
    Admitted but waiting for a node with room: the reconciler's plain words, the scheduler's own one
    click away, and why no start time can be promised. Otherwise its stored reason alone. A few
    queries while queued, one call to its cluster while it waits for capacity, none otherwise.
    """
    reason, start, raw, position = workload.reason, None, "", None
    if workload.state == kind_of(workload).lifecycle.queued:
        reason = preemption.queued_reason(workload, queue_reason(workload.team, workload.ref)) or reason
        start = estimated_starts(workload.team).get(workload.ref)
        position = queue_positions(workload.team).get(workload.ref)
    elif workload.reason_code == ReasonCode.WAITING_FOR_CAPACITY and not workload.is_final:
        raw = scheduler_message(workloads.events(workload))
        start = StartEstimate(None, unknown=CAPACITY_WAIT)
    return {"reason": reason, "start": start, "scheduler_message": raw, "position": position}


def events_panel(workload) -> dict:
    """Context of the events panel (``workloads/_events.html``)."""
    return {"workload": workload, "events": workloads.events(workload), "events_url": _route(workload, "events"),
            "on_cluster": workloads.on_cluster(workload)}


def preemption_panel(workload) -> dict:
    """Context of the preemption log card (``workloads/_preemptions.html``): shown once it was preempted
    or interrupted (one query)."""
    return {"preemption_log": list(workloads.preemptions(workload))}


def events_table(request: HttpRequest, workload) -> HttpResponse:
    """The polled events table; 286 once the workload is final."""
    return render(request, "workloads/_events.html", events_panel(workload), status=polling_status(workload))


def read_urls(model: type, base: str) -> list[URLPattern]:
    """The read routes of ``model``'s kind under ``base`` (``"runs/"``), for the kind's URLconf.

    ``<pk>/state/``, ``<pk>/logs/``, ``<pk>/logs/download/`` and ``<pk>/events/``, named
    ``<noun>-state``, ``<noun>-logs``, ``<noun>-logs-download`` and ``<noun>-events`` (the names
    :func:`_route` reverses). Each reads through the kind's access helper; platform staff may
    read any team's.
    """
    prefix = model.KIND_PREFIX

    def readable(request: HttpRequest, pk: int):
        return kind_for(prefix).get_for_user(request.user, pk, staff_reads=True)

    @login_required
    @require_GET
    def state(request: HttpRequest, pk: int) -> HttpResponse:
        """The polled state cell of one workload (lists, dashboard), with its queue position; 286 once it is final."""
        workload = readable(request, pk)
        kind = kind_of(workload)
        queued = workload.state == kind.lifecycle.queued
        position = queue_positions(workload.team).get(workload.ref) if queued else None
        return render(request, Pages.of(kind).state_template, {kind.noun: workload, "position": position},
                      status=polling_status(workload))

    @login_required
    @require_GET
    def logs(request: HttpRequest, pk: int) -> HttpResponse:
        """The logs box of ``?pod=`` (else the default pod), polled while the workload is unfinished; 286 once final."""
        return log_box(request, readable(request, pk))

    @login_required
    @require_GET
    def logs_download(request: HttpRequest, pk: int) -> HttpResponse:
        """The whole log of ``?pod=`` (else the default pod) as a text file."""
        return log_download(request, readable(request, pk))

    @login_required
    @require_GET
    def events(request: HttpRequest, pk: int) -> HttpResponse:
        """The events table, polled with the state while the workload is unfinished; 286 once it is final."""
        return events_table(request, readable(request, pk))

    noun = kind_for(prefix).noun
    return [path(f"{base}<int:pk>/{page}/", view, name=f"{noun}-{page.replace('/', '-')}")
            for page, view in (("state", state), ("logs", logs), ("logs/download", logs_download),
                               ("events", events))]
