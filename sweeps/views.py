"""Portal pages of sweeps (docs/sweeps.md "The sweep page"): the team's sweeps, a new sweep, one sweep, and its Stop
button.

Thin like every view (docs/design.md "House style"): access through :func:`sweeps.services.get_sweep_for_user`
(404 outside the team, staff read, 403 below the role an action needs) and the current team's membership; the
figures from :func:`sweeps.services.figures`, the stop through :func:`sweeps.services.stop`; the charts' data
from the pure builders of :mod:`sweeps.charts`, over the points the trial kind's ``Trials.objective`` reads.
Sweeps name no kind: a trial's work is linked by the registry (``sweeps.serializers.trial_answer``'s url), and
"Compare" opens the kind's compare page (``Trials.compare_page``) with the ticked trials' work.

htmx: the sweep page's live part (header, money, best trial, trials table and the charts' data) is the partial
``sweeps/sweep_detail.html#live`` of the same URL, polled every 5 s while the sweep is live and answered with
286 (htmx stops polling) once it has ended.

The New sweep page creates one from its file, as the API and the command line do, through the same services: its
Preview button asks :func:`sweeps.services.preview` (the API's dry run: the shape and the cost range at today's
price, nothing created) for the partial ``sweeps/sweep_new.html#preview``, and a valid submission
:func:`sweeps.services.create`. Who may is the rule the other forms' submit buttons follow
(:func:`teams.permissions.submit_refusal`): the team select offers only the teams the user may submit work in.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Max, Min, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect

from core.money import ZERO
from sweeps import charts, services, work
from sweeps.constants import Goal, PrunerType, SweepState, TrialState
from sweeps.forms import NewSweepForm
from sweeps.models import Sweep, Trial
from sweeps.serializers import trial_answer
from teams.models import Role
from teams.permissions import VIEWERS_CANNOT_SUBMIT, read_membership, submit_refusal, submitting_teams
from workloads.registry import Trials
from workloads.views import STOP_POLLING, current_membership, no_team, wants_partial

SWEEPS_PER_PAGE = 25
#: How often the sweep page's live part is fetched again while the sweep is live (seconds; the template's trigger).
POLL_SECONDS = 5


# 1. The team's sweeps ---------------------------------------------------------------------------------------


def _counted(sweeps):
    """``sweeps`` with their trials counted by state (``trials_<state>``) and their best completed value both
    ways (``best_low``, ``best_high``: the goal picks one), in the list's one query."""
    completed = Q(trials__state=TrialState.COMPLETED)
    return sweeps.annotate(
        **{f"trials_{state}": Count("trials", filter=Q(trials__state=state)) for state in TrialState.values},
        best_low=Min("trials__value", filter=completed), best_high=Max("trials__value", filter=completed),
    ).order_by("-created_at", "-pk")  # newest first: a grouped query drops the model's ordering


def _list_rows(sweeps: list[Sweep]) -> list[dict]:
    """A row per sweep of the list: its trials by state, its best value, what it spent (money and GPU-hours,
    :func:`sweeps.work.spend` once for the page's sweeps together)."""
    uids: dict[int, list[int]] = {}
    for sweep_id, uid in Trial.objects.filter(sweep__in=sweeps, workload__isnull=False).values_list("sweep_id",
                                                                                                 "workload_id"):
        uids.setdefault(sweep_id, []).append(uid)
    spend = work.spend([uid for found in uids.values() for uid in found], timezone.now())
    rows = []
    for sweep in sweeps:
        mine = uids.get(sweep.pk, [])
        rows.append({
            "sweep": sweep,
            "counts": [(state, label, getattr(sweep, f"trials_{state}")) for state, label in TrialState.choices
                       if getattr(sweep, f"trials_{state}")],
            "best": value_text(sweep.best_high if sweep.goal == Goal.MAXIMIZE else sweep.best_low),
            "spent": sum((spend.by_trial.get(uid, ZERO) for uid in mine), ZERO),
            "gpu_hours": sum((spend.gpu_hours_by_trial.get(uid, ZERO) for uid in mine), ZERO),
        })
    return rows


@login_required
@require_GET
def sweep_list(request: HttpRequest) -> HttpResponse:
    """The current team's sweeps, newest first: state, trials by state, best value, spent against the cap."""
    membership = current_membership(request)
    if membership is None:
        return no_team(request)
    team = membership.team
    page = Paginator(_counted(services.visible_sweeps(request.user, team.slug)), SWEEPS_PER_PAGE).get_page(
        request.GET.get("page"))
    return render(request, "sweeps/sweep_list.html", {
        "team": team, "page": page, "rows": _list_rows(list(page)), "base_key": services.base_key(),
        "can_submit": not submit_refusal(membership), "submit_refused": submit_refusal(membership)})


# 2. A new sweep ---------------------------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def sweep_new(request: HttpRequest) -> HttpResponse:
    """The New sweep form, the example sweep filled in; a valid POST creates the sweep (:func:`sweeps.services.create`,
    the API's create) and goes to its page. Bad input: 400 with each error where it belongs, nothing created. Someone
    who may submit work in none of their teams sees the form disabled, and why (403)."""
    membership = current_membership(request)
    if membership is None:
        return no_team(request)
    teams = submitting_teams(request.user)
    context = {"base_key": services.base_key(), "shape": None}
    if not teams:
        form = NewSweepForm.example([membership.team], membership.team)
        return render(request, "sweeps/sweep_new.html", {**context, "form": form,
                                                         "submit_refused": submit_refusal(membership)}, status=403)
    if request.method == "GET":
        team = membership.team if membership.team in teams else teams[0]
        return render(request, "sweeps/sweep_new.html", {**context, "form": NewSweepForm.example(teams, team)})
    form = NewSweepForm(request.POST, teams=teams)
    if form.is_valid():
        try:
            sweep = services.create(request.user, form.chosen_team, form.sweep_fields())
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, f"Sweep {sweep.name} was created: its first trials launch now.")
            return redirect("sweeps:detail", pk=sweep.pk)
    return render(request, "sweeps/sweep_new.html", {**context, "form": form}, status=400)


@login_required
@require_POST
def sweep_preview(request: HttpRequest) -> HttpResponse:
    """The Preview button's answer: the sweep's shape and cost range at today's price (:func:`sweeps.services.preview`,
    the API's dry run), nothing created; while the form has errors, the errors instead (200: htmx swaps it)."""
    teams = submitting_teams(request.user)
    if not teams:
        raise PermissionDenied(VIEWERS_CANNOT_SUBMIT)
    form, shape = NewSweepForm(request.POST, teams=teams), None
    if form.is_valid():
        try:
            shape = services.preview(request.user, form.chosen_team, form.sweep_fields())
        except ValidationError as exc:
            form.add_service_errors(exc)
    return render(request, "sweeps/sweep_new.html#preview", {"form": form, "shape": shape})


# 3. One sweep -----------------------------------------------------------------------------------------------


def value_text(value) -> str:
    """A value as the pages show it (a parameter, the objective): a float to four significant digits, the rest as
    it is, nothing as a dash."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _pruner_words(pruner: dict) -> str:
    kind = pruner.get("type", PrunerType.NONE)
    if kind == PrunerType.ASHA:
        return (f"ASHA: first rung at step {pruner.get('min_resource')}, one in {pruner.get('reduction_factor')} "
                f"goes on, trials run {pruner.get('max_resource')} steps")
    if kind == PrunerType.MEDIAN:
        return (f"median stopping: after {pruner.get('startup_trials')} whole trials, from step "
                f"{pruner.get('warmup_steps')}")
    return "none: every trial runs to its end"


def _compare(kind) -> dict | None:
    """Where "Compare" goes: the trial kind's compare page and its query parameter (None: it has none)."""
    page = Trials.of(kind).compare_page
    return None if page is None else {"url": reverse(page[0]), "parameter": page[1]}


def _sweep_page(request: HttpRequest, sweep: Sweep, error: str = "") -> dict:
    """The sweep page's context (its live part's too): figures, trials, best trial, money, charts, controls."""
    now = timezone.now()
    figures = services.figures(sweep, now)
    for trial in figures.trials:
        trial.sweep = sweep  # their names (trial_answer) without a query each
    kind = work.trial_kind()
    working = [t.workload for t in figures.trials if t.workload is not None]
    reports = Trials.of(kind).objective(working, sweep.metric, {w.uid: -1 for w in working}) if working else {}
    rows = [{"trial": t, "answer": trial_answer(t, figures), "active": t.state == TrialState.ACTIVE,
             "params": [(name, value_text(value)) for name, value in sorted(t.params.items())],
             "objective": value_text(t.objective), "best": value_text(t.best), "value": value_text(t.value)}
            for t in figures.trials]
    best = figures.best
    membership = read_membership(request.user, sweep.team)
    refusal = "" if sweep.state != SweepState.RUNNING else services.stop_refusal(request.user, sweep, membership)
    spend = figures.spend
    return {
        "sweep": sweep, "figures": figures, "rows": rows,
        "best": next((row for row in rows if best is not None and row["trial"].number == best.number), None),
        "counts": [(state, label, figures.counts.get(state, 0)) for state, label in TrialState.choices],
        "spend": spend, "pruner": _pruner_words(sweep.pruner),
        "cap_left": (sweep.max_cost - spend.spent - spend.committed) if sweep.max_cost is not None else None,
        "gpu_cap_left": (sweep.max_gpu_hours - spend.gpu_hours - spend.committed_gpu_hours)
        if sweep.max_gpu_hours is not None else None,
        "live": not sweep.is_final, "poll_seconds": POLL_SECONDS,
        "can_stop": sweep.state == SweepState.RUNNING and not refusal, "stop_refused": refusal,
        # Continuing a pruned trial is a member's, as submitting a run is; the service says why when it cannot be.
        "can_continue": (membership is not None and membership.allows(Role.MEMBER)
                         and sweep.state != SweepState.STOPPING),
        "staff_reader": membership is None, "compare": _compare(kind), "error": error,
        "charts": charts.sweep_charts(sweep, figures.trials, reports, spend.gpu_hours_by_trial,
                                      spend.gpu_hours, best.number if best is not None else None,
                                      sweep.finished_at or now),
        "parameter_names": sorted(sweep.parameters),
    }


def _status(sweep: Sweep) -> int:
    return STOP_POLLING if sweep.is_final else 200


@login_required
@require_GET
@vary_on_headers("HX-Request")  # one URL, two bodies: caches must keep them apart
def sweep_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One sweep: its header and money, its best trial, its trials and charts; htmx gets the live part."""
    sweep = services.get_sweep_for_user(request.user, pk)
    context = _sweep_page(request, sweep)
    if wants_partial(request):
        return render(request, "sweeps/sweep_detail.html#live", context, status=_status(sweep))
    return render(request, "sweeps/sweep_detail.html", context)


@login_required
@require_POST
def sweep_continue(request: HttpRequest, pk: int, number: int) -> HttpResponse:
    """Continue a pruned trial from its checkpoint (members: :func:`sweeps.services.continue_trial`; viewers 403);
    back to the sweep's page with what happened, or why it could not."""
    sweep = services.get_sweep_for_user(request.user, pk, Role.MEMBER)
    try:
        trial = services.continue_trial(request.user, sweep, number)
    except services.SweepConflict as exc:
        messages.error(request, str(exc))
    except ValidationError as exc:  # its submission refused, as any run's would be (the team's quota, a name)
        messages.error(request, f"Trial {number} cannot be continued: {' '.join(exc.messages)}")
    else:
        messages.success(request, f"Trial {number} goes on as trial {trial.number} ({trial.name}) "
                                  "from its last checkpoint, on the cluster that holds it.")
    if request.htmx:  # the button asked first (hx-confirm): the whole page again, with the message
        return HttpResponseClientRedirect(reverse("sweeps:detail", args=[sweep.pk]))
    return redirect("sweeps:detail", pk=sweep.pk)


@login_required
@require_POST
def sweep_stop(request: HttpRequest, pk: int) -> HttpResponse:
    """Stop the sweep (members: :func:`sweeps.services.stop`; viewers 403). One that is not running: a message,
    or the live part with it and 409 for htmx."""
    sweep = services.get_sweep_for_user(request.user, pk, Role.MEMBER)
    try:
        sweep = services.stop(request.user, sweep)
    except services.SweepConflict as exc:
        if request.htmx:
            return render(request, "sweeps/sweep_detail.html#live", _sweep_page(request, sweep, str(exc)), status=409)
        messages.error(request, str(exc))
        return redirect("sweeps:detail", pk=sweep.pk)
    if request.htmx:
        return render(request, "sweeps/sweep_detail.html#live", _sweep_page(request, sweep), status=_status(sweep))
    messages.success(request, f"Sweep {sweep.name} is stopping: nothing launches any more, and its active trials "
                              "save a checkpoint and stop.")
    return redirect("sweeps:detail", pk=sweep.pk)

