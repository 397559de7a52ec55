"""Portal pages of training metrics (docs/metrics.md): a run's metric charts, and runs compared.

Thin like every view (docs/design.md "House style"): access through :func:`jobs.services.get_run_for_user` and
:func:`teams.permissions.read_membership` (404 for outsiders, staff read), the figures from
:mod:`jobs.metrics`, the chart coordinates from :mod:`jobs.charts`. htmx gets the partial of the
same template; a run's charts poll until it ends (286 then).

**Compare** (``/runs/compare/?runs=12,15,18&metric=loss``): up to :data:`MAX_COMPARE` runs of one
team, one metric overlaid against the step, and their parameters side by side — image, command
and arguments, the *names* of their env (never a value, never a secret env), flavor and shape.
The URL is the comparison: a teammate who opens it sees the same; anyone outside the team gets 404.
"""

from __future__ import annotations

import re

from django.contrib.auth.decorators import login_required
from django.db.models import Exists, OuterRef
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from core.text import whole_number
from jobs import charts, metrics, services
from jobs.metric_lines import NAME
from jobs.models import RunMetric, TrainingRun
from teams.models import Team
from teams.permissions import read_membership
from workloads.views import current_membership, no_team, polling_status, wants_partial

#: Most runs on one comparison (the chart's lines).
MAX_COMPARE = charts.MAX_LINES
#: Runs the picker offers: the team's newest that reported metrics.
PICKER_RUNS = 50
#: What a team's slug can be (anything else is no team).
SLUG = re.compile(r"[-a-zA-Z0-9_]{1,100}")


def run_charts(run: TrainingRun) -> dict:
    """The context of a run's metric charts: one chart per metric name, thinned by the database."""
    series = metrics.chart_series([run.pk]).get(run.pk, {})
    found = [charts.metric_chart(name, [(run.name, points)]) for name, points in sorted(series.items())]
    return {"metric_charts": [chart for chart in found if chart is not None], "metrics_polling": not run.is_final}


@login_required
@require_GET
@vary_on_headers("HX-Request")
def run_metrics(request: HttpRequest, pk: int) -> HttpResponse:
    """A run's metric charts: a page of its own, or (htmx) the charts of the run page, polled until it ends."""
    run = services.get_run_for_user(request.user, pk, staff_reads=True)
    context = {"run": run, **run_charts(run)}
    if wants_partial(request):
        return render(request, "jobs/run_metrics.html#charts", context, status=polling_status(run))
    return render(request, "jobs/run_metrics.html", context)


def _run_ids(request: HttpRequest) -> tuple[list[int], str]:
    """``?runs=12,15`` (or ``?runs=12&runs=15``) as ids in their order, each once; and what is wrong, if anything."""
    raw = [part.strip() for value in request.GET.getlist("runs") for part in value.split(",") if part.strip()]
    numbers = [whole_number(part, 18) for part in raw]
    if None in numbers:
        return [], "Runs are given by their ids: ?runs=12,15,18."
    ids = list(dict.fromkeys(numbers))
    if len(ids) > MAX_COMPARE:
        return [], f"Compare at most {MAX_COMPARE} runs at once; {len(ids)} were picked."
    return ids, ""


def _parameters(run: TrainingRun) -> dict:
    """A run's parameters as the comparison shows them: env *names* only, never their values."""
    return {"run": run, "image": run.image, "argv": [*run.command, *run.args], "env_names": sorted(run.env),
            "flavor": f"{run.flavor.name}{' (spot)' if run.spot else ''}",
            "shape": f"{run.gpus_per_worker} × {run.workers}", "max_runtime": run.max_runtime_minutes}


@login_required
@require_GET
@vary_on_headers("HX-Request")
def run_compare(request: HttpRequest) -> HttpResponse:
    """Runs of a team compared: one metric overlaid, their parameters side by side (module docstring)."""
    # 1. Which runs, of which team: the runs given (each as its page would be read), else the team's picker.
    ids, error = _run_ids(request)
    runs = [services.get_run_for_user(request.user, pk, staff_reads=True) for pk in ids]
    if runs:
        team = runs[0].team
        if any(run.team_id != team.pk for run in runs):
            error, runs = "Compare runs of one team: these belong to several.", []
    elif request.GET.get("team"):
        slug = request.GET["team"]
        team = Team.objects.filter(slug=slug).first() if SLUG.fullmatch(slug) else None  # no NUL reaches SQL
        if team is None:
            raise Http404("No such team.")
    else:
        membership = current_membership(request)
        if membership is None:
            return no_team(request)
        team = membership.team
    read_membership(request.user, team)  # 404 for outsiders (staff read)
    # 2. The metric: the one asked for, else loss, else the first they share.
    names = sorted(set(RunMetric.objects.filter(run__in=runs).values_list("name", flat=True).distinct())) if runs else []
    metric = request.GET.get("metric", "")
    if metric and not NAME.fullmatch(metric):
        error, metric = error or "A metric name is letters, digits, _ and -.", ""
    metric = metric or ("loss" if "loss" in names else (names[0] if names else ""))
    # 3. The chart and the parameters.
    series = metrics.chart_series([run.pk for run in runs], [metric]) if metric else {}
    chart = charts.metric_chart(metric, [(f"{run.name} #{run.pk}", series.get(run.pk, {}).get(metric, []))
                                         for run in runs]) if metric else None
    picker = (TrainingRun.objects.filter(team=team).annotate(reported=Exists(RunMetric.objects.filter(run=OuterRef("pk"))))
              .filter(reported=True).order_by("-created_at", "-pk")[:PICKER_RUNS])
    query = f"runs={','.join(str(run.pk) for run in runs)}" + (f"&metric={metric}" if metric else "")
    context = {"team": team, "runs": runs, "picked": {run.pk for run in runs}, "picker": picker, "names": names,
               "metric": metric, "chart": chart, "rows": [_parameters(run) for run in runs], "error": error,
               "max_compare": MAX_COMPARE, "share_url": request.build_absolute_uri(f"{reverse('jobs:run-compare')}?{query}")
               if runs else ""}
    template = "jobs/run_compare.html#comparison" if wants_partial(request) else "jobs/run_compare.html"
    return render(request, template, context, status=400 if error else 200)
