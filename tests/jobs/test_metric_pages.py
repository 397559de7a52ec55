"""The portal's metric pages (jobs.metric_views): a run's charts and progress on its page, its
metrics page, and runs compared. House style: member, viewer, outsider (404), staff read, htmx
partial vs full page, wrong method; bad input a 400 with the error on the page."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import metrics, services
from jobs.constants import RunState
from jobs.metric_lines import Point, ProgressMark
from jobs.models import RunMetric, TrainingRun
from tests.factories import add_member, make_team
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def fast_password_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def submit(user, team, **overrides) -> TrainingRun:
    fields = {k: v for k, v in run_payload(**overrides).items() if k != "team"}
    return services.submit_run(user, team, fields)


def report(run: TrainingRun, steps: int = 200, start: float = 2.5, every: int = 10) -> None:
    """``steps`` loss points, 2 steps a second, and its progress towards 4× as many steps."""
    t0 = timezone.now() - timedelta(seconds=steps / 2)
    points = [Point(s, "loss", start - s / (steps * 2), t0 + timedelta(seconds=s / 2)) for s in range(steps)]
    marks = [ProgressMark(s, steps * 4, t0 + timedelta(seconds=s / 2)) for s in range(0, steps, every)]
    metrics.record(run, points, marks, timezone.now())


@pytest.fixture
def running(member, team, quota, published) -> TrainingRun:
    run = submit(member, team, env={"WANDB_MODE": "offline", "SEED": "7"}, secret_env={"HF_TOKEN": "hf_secret"})
    TrainingRun.objects.filter(pk=run.pk).update(state=RunState.RUNNING, started_at=timezone.now())
    run.refresh_from_db()
    report(run)
    return run


def test_the_run_page_shows_its_charts_progress_and_eta(client, member, running):
    client.force_login(member)
    html = client.get(f"/runs/{running.pk}/").content.decode()
    assert 'id="run-metrics"' in html and 'id="metric-loss"' in html and "<polyline" in html
    assert re.search(r"<progress max=\"100\" value=\"23\.[78]\"", html)
    assert "step 190 of 800" in html and "ETA " in html
    # Its status panel (polled) carries the progress too.
    partial = client.get(f"/runs/{running.pk}/", **HTMX).content.decode()
    assert 'id="run-progress"' in partial and "<html" not in partial


def test_a_run_without_metrics_says_how_to_report_them(client, member, team, quota, published):
    run = submit(member, team, name="silent")
    client.force_login(member)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "No metrics reported yet" in html and "SLIPWAY_PROGRESS" in html and 'id="run-progress"' not in html


def test_the_metrics_page_full_partial_polling_and_access(client, member, viewer, outsider, staff, running):
    for user in (member, viewer, staff):
        client.force_login(user)
        full = client.get(f"/runs/{running.pk}/metrics/")
        assert full.status_code == 200 and "<html" in full.content.decode()
    partial = client.get(f"/runs/{running.pk}/metrics/", **HTMX)
    body = partial.content.decode()
    assert partial.status_code == 200 and "<html" not in body and 'hx-trigger="every 10s"' in body
    TrainingRun.objects.filter(pk=running.pk).update(state=RunState.SUCCEEDED, finished_at=timezone.now())
    done = client.get(f"/runs/{running.pk}/metrics/", **HTMX)
    assert done.status_code == 286 and "hx-trigger" not in done.content.decode()
    assert client.post(f"/runs/{running.pk}/metrics/").status_code == 405
    client.force_login(outsider)
    assert client.get(f"/runs/{running.pk}/metrics/").status_code == 404
    client.logout()
    assert client.get(f"/runs/{running.pk}/metrics/").status_code == 302  # to the login page


def test_compare_overlays_runs_and_shows_env_names_never_values(client, member, viewer, team, quota, running):
    other = submit(member, team, name="other", gpus_per_worker=1, args=["--lr", "1e-4"])
    report(other, steps=100, start=3.0)
    url = f"/runs/compare/?runs={running.pk},{other.pk}&metric=loss"
    for user in (member, viewer):
        client.force_login(user)
        response = client.get(url)
        html = response.content.decode()
        assert response.status_code == 200 and "<html" in html
        assert html.count('<polyline class="series metric-') == 2
        assert "WANDB_MODE" in html and "SEED" in html
        assert "offline" not in html and "hf_secret" not in html and "HF_TOKEN" not in html
        assert "--lr 1e-4" in html and "registry.example.com/ml/trainer:1.4" in html
        assert f"/runs/compare/?runs={running.pk},{other.pk}&amp;metric=loss" in html  # the link to share
    partial = client.get(url, **HTMX).content.decode()
    assert 'id="comparison"' in partial and "<html" not in partial and "compare-picker" not in partial
    assert client.post(url).status_code == 405


def test_compare_is_404_outside_the_team(client, outsider, running):
    client.force_login(outsider)
    assert client.get(f"/runs/compare/?runs={running.pk}").status_code == 404
    assert client.get("/runs/compare/?team=ml-research").status_code == 404
    assert client.get("/runs/compare/?team=no-such-team").status_code == 404
    assert client.get("/runs/compare/?team=ml%20research!").status_code == 404


@pytest.mark.parametrize(("query", "words"), [
    ("runs=1,x", "Runs are given by their ids"),
    ("runs=" + ",".join(str(i) for i in range(1, 10)), "Compare at most 8 runs"),
    ("runs={pk}&metric=a/b", "A metric name is"),
])
def test_compare_refuses_bad_input_with_a_400(client, member, running, query, words):
    client.force_login(member)
    response = client.get("/runs/compare/?" + query.format(pk=running.pk))
    assert response.status_code == 400 and words in response.content.decode()


def test_compare_refuses_runs_of_two_teams(client, member, running, flavors):
    second = make_team("nlp", "NLP")
    add_member(second, member)
    theirs = TrainingRun.objects.create(team=second, created_by=member, flavor=running.flavor, name="theirs",
                                        image="x/y:1", command=["python"])
    client.force_login(member)
    response = client.get(f"/runs/compare/?runs={running.pk},{theirs.pk}")
    assert response.status_code == 400 and "Compare runs of one team" in response.content.decode()


def test_the_compare_picker_lists_the_teams_runs_with_metrics(client, member, team, quota, running):
    silent = submit(member, team, name="silent")
    client.force_login(member)
    html = client.get("/runs/compare/").content.decode()
    assert f'value="{running.pk}"' in html and f'value="{silent.pk}"' not in html
    assert "Pick runs above" in html


def test_a_long_series_is_thinned_by_the_database_keeping_its_extremes(running):
    points = [Point(s, "grad", 1.0, None) for s in range(5000)]
    points[2345] = Point(2345, "grad", 99.0, None)  # one spike
    metrics.record(running, points, [], timezone.now())
    (series,) = metrics.chart_series([running.pk], ["grad"]).values()
    thinned = series["grad"]
    assert len(thinned) <= 2 * 288 and max(v for _s, v in thinned) == 99.0
    assert [s for s, _v in thinned] == sorted(s for s, _v in thinned)
    assert metrics.chart_series([running.pk], ["loss"])[running.pk]["loss"][:2] == [(0, 2.5), (1, 2.5 - 1 / 400)]


def test_staff_read_the_comparison_of_any_team(client, staff, running):
    client.force_login(staff)
    assert client.get(f"/runs/compare/?runs={running.pk}").status_code == 200


def test_points_stored_at_the_bigint_limit_never_make_the_pages_a_500(client, member, team, quota, running):
    """Security review 5 #6: one point at step 2**63 - 1 (stored before steps were capped at 2**53)
    overflowed the bucket's bigint arithmetic, and the run's page and the comparison were 500s for good."""
    points = [Point(s, "loss", 1.0, None) for s in range(600)] + [Point(2**63 - 1, "loss", 7.0, None)]
    RunMetric.objects.bulk_create([RunMetric(run=running, name=p.name, step=p.step, value=p.value,
                                             recorded_at=timezone.now()) for p in points],
                                  update_conflicts=True, unique_fields=["run", "name", "step"],
                                  update_fields=["value"])
    thinned = metrics.chart_series([running.pk], ["loss"])[running.pk]["loss"]
    assert max(v for _s, v in thinned) == 7.0 and thinned[-1][0] > 2**62
    client.force_login(member)
    assert client.get(f"/runs/{running.pk}/").status_code == 200
    assert client.get(f"/runs/{running.pk}/metrics/").status_code == 200
    assert client.get(f"/runs/compare/?runs={running.pk}&metric=loss").status_code == 200
