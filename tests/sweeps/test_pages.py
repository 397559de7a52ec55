"""The sweep pages (docs/sweeps.md "The sweep page"): the team's sweeps, one sweep with its trials, best trial, money
and charts' data, its Stop button, Compare, and who may see and do what.

Sweeps are created through the service and driven by the driver's act (``sweeps.driver.advance``) on the fake
cluster; a trial's work reports the objective through the run metrics store and is ended by hand.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.formatting import format_money
from fleet.models import Cluster
from jobs.constants import RunState
from jobs.metric_lines import Point
from jobs.metrics import record
from jobs.models import RunLogCursor, TrainingRun
from sweeps import charts, driver, services
from sweeps.constants import SweepState, TrialState
from sweeps.models import Sweep, Trial
from tests.sweeps.support import matrix_sweep

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
CHART_DATA = re.compile(r'<script id="sweep-chart-data" type="application/json">(.*?)</script>', re.S)


@pytest.fixture
def sweep(member, team, quota, published, fake_backend) -> Sweep:
    """The member's two-trial sweep (one at a time), its first trial launched."""
    created = services.create(member, team, matrix_sweep("lr-search"))
    driver.advance(created.pk)
    return created


def run_of(sweep: Sweep, number: int) -> TrainingRun:
    return TrainingRun.objects.get(workload__trial__sweep=sweep, workload__trial__number=number)


def report(run: TrainingRun, *values: float, every: int = 10) -> None:
    now = timezone.now()
    record(run, [Point(every * (i + 1), "loss", value) for i, value in enumerate(values)], [], now)


def end(run: TrainingRun, state: str) -> None:
    TrainingRun.objects.filter(pk=run.pk).update(state=state, finished_at=timezone.now())


@pytest.fixture
def two_trials(sweep) -> Sweep:
    """Trial 1 completed (loss 0.5 at its end), trial 2 active with two points reported."""
    report(run_of(sweep, 1), 0.9, 0.6, 0.5)
    driver.advance(sweep.pk)
    end(run_of(sweep, 1), RunState.SUCCEEDED)
    driver.advance(sweep.pk)  # trial 1 told to the study, trial 2 launched
    report(run_of(sweep, 2), 1.2, 0.8)
    driver.advance(sweep.pk)
    return sweep


def chart_data(html: str) -> dict:
    found = CHART_DATA.search(html)
    assert found, "the page embeds its charts' data"
    return json.loads(found.group(1))


def test_the_list_shows_the_teams_sweeps_newest_first_with_their_figures(client, member, team, two_trials,
                                                                          outsider, other_team):
    services.create(member, team, matrix_sweep("second"))
    client.force_login(member)
    html = client.get("/sweeps/").content.decode()
    assert html.index("second") < html.index("lr-search")  # newest first
    row = html[html.index(f'id="sweep-{two_trials.pk}"'):]
    row = row[:row.index("</tr>")]
    assert f'href="{reverse("sweeps:detail", args=[two_trials.pk])}"' in row
    assert '<span class="badge running"' in row
    assert "1 active" in row and "1 completed" in row and "of 2" in row
    assert "0.5" in row  # the best value
    assert 'id="new-sweep-hint"' in html and "docs/sweeps.md" in html and "POST /api/v1/sweeps/" in html
    # The navigation has the page, marked as the current one.
    assert '<a href="/sweeps/" aria-current="page">Sweeps</a>' in html
    # Another team's member sees their own team's sweeps only.
    client.force_login(outsider)
    assert "lr-search" not in client.get("/sweeps/").content.decode()


def test_the_page_shows_the_header_trials_best_trial_and_money(client, member, two_trials):
    client.force_login(member)
    response = client.get(f"/sweeps/{two_trials.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    first, second = run_of(two_trials, 1), run_of(two_trials, 2)
    # The header: state, objective, sampler, pruner, parallel and trials, the Stop button for its creator.
    assert 'id="sweep-state">Running</span>' in html
    assert "minimize <code>loss</code>" in html and "Random (Optuna&#x27;s RandomSampler)" in html
    assert "None: every trial runs to its end" in html and "1 trial at once" in html
    assert "2 launched of 2 at most · 1 active · 1 completed" in html
    assert 'id="stop-sweep"' in html and "hx-confirm=" in html
    # The trials, each linked to its work's page (the kind's), with its parameters, state and figures.
    assert f'<a href="{first.get_absolute_url()}">lr-search-t001</a>' in html
    assert f'<a href="{second.get_absolute_url()}">lr-search-t002</a>' in html
    trial_one = html[html.index('id="trial-1"'):]
    trial_one = trial_one[:trial_one.index("</tr>")]
    lr = Trial.objects.get(sweep=two_trials, number=1).params["lr"]
    assert f"<code>lr={lr:.4g}</code>" in trial_one and '<span class="badge completed">Completed</span>' in trial_one
    trial_two = html[html.index('id="trial-2"'):]
    assert '<span class="badge active">Active</span>' in trial_two and ">0.8<" in trial_two and ">20<" in trial_two
    # The best trial: its number, value and parameters, linked to its work.
    best = html[html.index('id="best-trial"'):]
    best = best[:best.index("</p>")]
    assert f'href="{first.get_absolute_url()}"' in best and "trial 1" in best and "<strong>0.5</strong>" in best
    assert f"<code>lr={lr:.4g}</code>" in best
    # Money: spent, committed (trial 2 is unfinished) and a whole trial, in the sweep's currency.
    figures = services.figures(two_trials)
    assert figures.spend.committed > 0
    money = html[html.index('id="sweep-money"'):]
    assert format_money(figures.spend.committed, two_trials.currency) in money
    assert format_money(figures.spend.spent, two_trials.currency) in money and "no cap in money" in money


def test_the_page_embeds_the_charts_data(client, member, two_trials):
    client.force_login(member)
    html = client.get(f"/sweeps/{two_trials.pk}/").content.decode()
    data = chart_data(html)
    assert data["metric"] == "loss" and data["goal"] == "minimize"
    # The best so far: one point at trial 1's end, held to now.
    assert data["best"]["time"]["y"] == [0.5, 0.5] and len(data["best"]["time"]["x"]) == 2
    assert data["best"]["gpu_hours"]["y"][0] == 0.5
    # One scatter per parameter: lr on a log axis, a series per state present.
    [lr] = data["parameters"]
    assert lr["name"] == "lr" and lr["scale"] == "log" and lr["labels"] is None
    assert sorted(lr["trials"]) == [1, 2]
    assert {s["state"]: [y for y in s["y"] if y is not None] for s in lr["series"]} == {
        "completed": [0.5], "active": [0.8]}
    # The learning curves: every point each trial reported.
    curves = {c["label"]: c for c in data["curves"]}
    assert curves["lr-search-t001"]["steps"] == [10, 20, 30] and curves["lr-search-t001"]["values"] == [0.9, 0.6, 0.5]
    assert curves["lr-search-t001"]["best"] and not curves["lr-search-t002"]["best"]
    assert curves["lr-search-t002"]["values"] == [1.2, 0.8] and curves["lr-search-t002"]["state"] == "active"
    # The page's own script draws them, with uPlot from our static files; no inline script.
    assert '<script src="/static/js/sweeps.js" defer></script>' in html
    assert '<script src="/static/vendor/uplot.min.js" defer></script>' in html
    assert 'data-chart="parameter" data-parameter="lr"' in html and 'data-chart="curves"' in html
    assert not re.search(r"<script(?![^>]*(?:src=|application/json))", html)


def test_a_pruned_trial_is_a_series_of_its_own(client, member, two_trials):
    end(run_of(two_trials, 2), RunState.PRUNED)
    driver.advance(two_trials.pk)
    assert Trial.objects.get(sweep=two_trials, number=2).state == TrialState.PRUNED
    client.force_login(member)
    html = client.get(f"/sweeps/{two_trials.pk}/").content.decode()
    data = chart_data(html)
    assert [s["state"] for s in data["parameters"][0]["series"]] == ["completed", "pruned"]
    curves = {c["label"]: c for c in data["curves"]}
    assert curves["lr-search-t002"]["state"] == "pruned" and not curves["lr-search-t002"]["best"]
    assert '<span class="badge pruned">Pruned</span>' in html


def test_the_live_part_polls_until_the_sweep_has_ended(client, member, two_trials):
    client.force_login(member)
    page = client.get(f"/sweeps/{two_trials.pk}/").content.decode()
    assert 'hx-trigger="every 5s"' in page and "hx-swap-oob" not in page
    live = client.get(f"/sweeps/{two_trials.pk}/", **HTMX)
    assert live.status_code == 200
    body = live.content.decode()
    assert body.lstrip().startswith('<section class="card" id="sweep-header"') and "<html" not in body
    assert '<section class="card" id="sweep-trials" hx-swap-oob="true">' in body
    assert '<div id="sweep-chart-source" hidden hx-swap-oob="true">' in body and chart_data(body)["curves"]
    end(run_of(two_trials, 2), RunState.SUCCEEDED)
    driver.advance(two_trials.pk)
    assert Sweep.objects.get(pk=two_trials.pk).state == SweepState.COMPLETED
    ended = client.get(f"/sweeps/{two_trials.pk}/", **HTMX)
    assert ended.status_code == 286 and "hx-trigger" not in ended.content.decode()
    assert 'id="stop-sweep"' not in ended.content.decode()


def test_an_outsider_gets_404_and_staff_read_without_controls(client, sweep, outsider, staff):
    client.force_login(outsider)
    assert client.get(f"/sweeps/{sweep.pk}/").status_code == 404
    assert client.post(f"/sweeps/{sweep.pk}/stop/").status_code == 404
    assert Sweep.objects.get(pk=sweep.pk).state == SweepState.RUNNING
    client.force_login(staff)
    html = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert 'id="staff-reader"' in html and 'id="stop-sweep"' not in html and "Stop sweep" not in html
    assert client.post(f"/sweeps/{sweep.pk}/stop/").status_code == 404


def test_a_viewer_reads_the_page_but_cannot_stop_the_sweep(client, sweep, viewer):
    client.force_login(viewer)
    html = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert "lr-search-t001" in html and 'id="stop-sweep"' not in html
    assert "Viewers can&#x27;t stop the team&#x27;s sweeps" in html and "disabled" in html
    assert client.post(f"/sweeps/{sweep.pk}/stop/").status_code == 403
    assert client.post(f"/sweeps/{sweep.pk}/stop/", **HTMX).status_code == 403
    assert Sweep.objects.get(pk=sweep.pk).state == SweepState.RUNNING


def test_a_member_stops_the_sweep_from_its_page(client, member, sweep):
    client.force_login(member)
    response = client.post(f"/sweeps/{sweep.pk}/stop/", **HTMX)
    assert response.status_code == 200
    assert Sweep.objects.get(pk=sweep.pk).state == SweepState.STOPPING
    body = response.content.decode()
    assert 'id="sweep-state">Stopping</span>' in body and "stopped by mia" in body.lower()
    assert 'id="stop-sweep"' not in body and 'hx-trigger="every 5s"' in body  # still live: it polls on
    # Stopping it again: a conflict, said on the page (409 for htmx, a message otherwise).
    again = client.post(f"/sweeps/{sweep.pk}/stop/", **HTMX)
    assert again.status_code == 409 and "there is nothing to stop" in again.content.decode()
    plain = client.post(f"/sweeps/{sweep.pk}/stop/", follow=True)
    assert plain.redirect_chain[0][0] == f"/sweeps/{sweep.pk}/" and "there is nothing to stop" in plain.content.decode()


def test_a_teammate_may_not_stop_another_members_sweep_when_the_team_says_so(client, sweep, team):
    from teams.models import Role
    from tests.factories import add_member, make_user

    team.members_may_cancel_teammates_work = False
    team.save(update_fields=["members_may_cancel_teammates_work"])
    other = make_user("nia")
    add_member(team, other, Role.MEMBER)
    client.force_login(other)
    html = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert 'id="stop-sweep"' not in html and "(who created it) may stop it" in html
    assert client.post(f"/sweeps/{sweep.pk}/stop/").status_code == 403
    assert Sweep.objects.get(pk=sweep.pk).state == SweepState.RUNNING


def test_a_member_continues_a_pruned_trial_from_its_page_and_a_viewer_cannot(client, member, team, quota, published,
                                                                             fake_backend, viewer):
    body = matrix_sweep("ckpt")
    body["run"] = {**body["run"], "checkpoint": {"grace_seconds": 30}}
    sweep = services.create(member, team, body)
    driver.advance(sweep.pk)
    run = run_of(sweep, 1)
    report(run, 0.9)
    now = timezone.now()
    TrainingRun.objects.filter(pk=run.pk).update(
        cluster=Cluster.objects.get_or_create(name="east")[0], last_checkpoint_step=10, last_checkpoint_at=now,
        last_checkpoint_path="/slipway/checkpoints/step-10")
    end(run, RunState.PRUNED)
    RunLogCursor.objects.update_or_create(run=run, defaults={"read_at": now, "done": True})
    driver.advance(sweep.pk)  # told pruned; trial 2 launched
    assert Trial.objects.get(sweep=sweep, number=1).state == TrialState.PRUNED

    client.force_login(viewer)
    assert 'id="continue-trial-1"' not in client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert client.post(f"/sweeps/{sweep.pk}/trials/1/continue/").status_code == 403
    client.force_login(member)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert 'id="continue-trial-1"' in page and 'id="continue-trial-2"' not in page  # trial 2 is active
    asked = client.post(f"/sweeps/{sweep.pk}/trials/1/continue/", **HTMX)
    assert asked.status_code == 200 and asked["HX-Redirect"] == f"/sweeps/{sweep.pk}/"
    continued = Trial.objects.get(sweep=sweep, continues__number=1)
    assert continued.number == 3 and continued.params == Trial.objects.get(sweep=sweep, number=1).params
    html = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert "Trial 1 goes on as trial 3 (ckpt-t003) from its last checkpoint" in html
    assert 'continued as <a href="#trial-3">#3</a>' in html and 'continues <a href="#trial-1">#1</a>' in html
    assert 'id="continue-trial-1"' not in html
    again = client.post(f"/sweeps/{sweep.pk}/trials/1/continue/", follow=True)
    assert again.redirect_chain[0][0] == f"/sweeps/{sweep.pk}/"
    assert "Trial 1 was continued already, as trial 3." in again.content.decode()


def test_a_pruned_trial_without_a_checkpoint_contract_cannot_be_continued(client, member, two_trials):
    end(run_of(two_trials, 2), RunState.PRUNED)
    driver.advance(two_trials.pk)
    client.force_login(member)
    refused = client.post(f"/sweeps/{two_trials.pk}/trials/2/continue/", follow=True).content.decode()
    assert "Trial 2 cannot be continued: run " in refused and "had no checkpoint contract" in refused
    assert two_trials.trials.count() == 2


def test_compare_opens_the_compare_page_with_the_ticked_trials_work(client, member, two_trials):
    client.force_login(member)
    html = client.get(f"/sweeps/{two_trials.pk}/").content.decode()
    form = re.search(r'<form id="compare-form" method="get" action="([^"]+)"', html)
    assert form, "a Compare form"
    picks = re.findall(r'<input type="checkbox" form="compare-form" name="([^"]+)" value="(\d+)"', html)
    first, second = run_of(two_trials, 1), run_of(two_trials, 2)
    assert [int(value) for _name, value in picks] == [first.pk, second.pk]
    # What the browser sends with both ticked: the compare page of their work.
    [name] = {name for name, _value in picks}
    compared = client.get(form.group(1), {name: [str(first.pk), str(second.pk)]})
    assert compared.status_code == 200
    assert [run.pk for run in compared.context["runs"]] == [first.pk, second.pk]
    assert "lr-search-t001" in compared.content.decode() and "lr-search-t002" in compared.content.decode()


def test_a_sweep_without_trials_yet_renders(client, member, team, quota, published, fake_backend):
    created = services.create(member, team, matrix_sweep("fresh"))
    client.force_login(member)
    html = client.get(f"/sweeps/{created.pk}/").content.decode()
    assert "No trial has launched yet" in html and 'id="compare-form"' not in html
    data = chart_data(html)
    assert data["curves"] == [] and data["best"]["time"] == {"x": [], "y": []}
    assert data["parameters"][0]["x"] == []


# -- the chart builders, pure ---------------------------------------------------------------------------------


class Row:
    """A trial as the builders read it."""

    def __init__(self, number, state, value=None, objective=None, finished=None, params=None, uid=None):
        self.number, self.state, self.value, self.objective = number, state, value, objective
        self.finished_at, self.params, self.workload_id = finished, params or {}, uid
        self.name = f"s-t{number:03d}"  # its work's name (Trial.name)


def test_best_so_far_follows_the_goal_and_counts_every_ended_trials_gpu_hours():
    from decimal import Decimal

    start = timezone.now()
    rows = [Row(1, TrialState.COMPLETED, 0.3, finished=start, uid=11),
            Row(2, TrialState.PRUNED, 0.1, finished=start + timedelta(minutes=1), uid=12),
            Row(3, TrialState.COMPLETED, 0.7, finished=start + timedelta(minutes=2), uid=13),
            Row(4, TrialState.ACTIVE, objective=0.9, uid=14)]
    hours = {11: Decimal("1"), 12: Decimal("0.5"), 13: Decimal("1"), 14: Decimal("0.25")}
    found = charts.best_so_far("maximize", rows, hours, start + timedelta(minutes=5), Decimal("2.75"))
    assert found["gpu_hours"] == {"x": [1.0, 1.5, 2.5, 2.75], "y": [0.3, 0.3, 0.7, 0.7]}
    assert found["time"]["y"] == [0.3, 0.3, 0.7, 0.7]
    low = charts.best_so_far("minimize", rows, hours, start + timedelta(minutes=5), Decimal("2.75"))
    assert low["time"]["y"] == [0.3, 0.3, 0.3, 0.3]  # a pruned trial's value is no result


def test_a_categorical_parameter_is_drawn_on_an_index_axis_with_its_choices():
    rows = [Row(1, TrialState.COMPLETED, 0.4, params={"batch": 64, "opt": True}),
            Row(2, TrialState.PRUNED, 0.9, params={"batch": 16, "opt": 1}),
            Row(3, TrialState.ACTIVE, objective=float("inf"), params={"batch": 32, "opt": True})]
    found = charts.parameter_scatter({"batch": {"type": "categorical", "choices": [16, 32, 64]},
                                      "opt": {"type": "categorical", "choices": [1, True]}}, rows)
    batch, opt = found
    assert batch["scale"] == "categorical" and batch["labels"] == ["16", "32", "64"]
    assert batch["x"] == [0, 2] and batch["trials"] == [2, 1]  # the infinite value is no point
    assert [(s["state"], s["y"]) for s in batch["series"]] == [("completed", [None, 0.4]), ("pruned", [0.9, None])]
    assert opt["x"] == [0, 1] and opt["trials"] == [2, 1]  # True is the second choice, not 1


def test_thinning_keeps_the_ends_and_a_long_curve_stays_within_its_share():
    points = [(step, float(step)) for step in range(1000)]
    kept = charts.thin(points, 50)
    assert len(kept) == 50 and kept[0] == (0, 0.0) and kept[-1] == (999, 999.0)
    assert charts.thin(points[:10], 50) == points[:10]
    assert charts.finite(float("nan")) is None and charts.finite(float("-inf")) is None and charts.finite(2) == 2.0


def test_a_curve_holds_no_value_json_cannot_hold():
    from types import SimpleNamespace

    from workloads.registry import TrialReport

    sweep = SimpleNamespace(trial_name=lambda number: f"s-t{number:03d}")
    rows = [Row(1, TrialState.ACTIVE, uid=7), Row(2, TrialState.ACTIVE, uid=8), Row(3, TrialState.FAILED)]
    reports = {7: TrialReport(((1, 0.5), (2, float("nan")), (3, float("inf"))), False), 8: TrialReport((), False)}
    [curve] = charts.learning_curves(sweep, rows, reports, best_number=None)
    assert curve == {"label": "s-t001", "number": 1, "state": "active", "best": False, "steps": [1, 2, 3],
                     "values": [0.5, None, None]}
    json.dumps(curve, allow_nan=False)
