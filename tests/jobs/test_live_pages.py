"""Live pages: every figure that changes with time refreshes with the state cells, and polling stops when nothing can change."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import QuotaHold
from jobs.constants import RunState
from quotas import admission
from tests.jobs.conftest import submit_run_as
from tests.jobs.test_views import HTMX, set_state

pytestmark = pytest.mark.django_db


def live(html: str) -> str:
    return re.search(r'<div id="dashboard-live".*', html, re.S).group(0)


def test_the_dashboards_figures_poll_while_work_is_active(client, member, team, quota, published):
    submit_run_as(member, team, name="one")
    submit_run_as(member, team, name="big", gpus_per_worker=8)  # queued behind "one"
    client.force_login(member)
    page = client.get("/").content.decode()
    assert 'hx-get="/" hx-trigger="every 5s"' in live(page)
    response = client.get("/", **HTMX)
    fragment = response.content.decode()
    assert response.status_code == 200 and "<html" not in fragment
    # Holding quota is admitted, pending or running; queued is counted apart. The quota bars come along.
    assert re.search(r'id="runs-stat"><span class="stat-value">1</span><span class="stat-label">run holding quota · 1 queued',
                     fragment)
    assert 'aria-label="2 of 8 in use"' in fragment and 'id="budget-forecast"' in fragment


def test_the_dashboard_stops_polling_when_nothing_can_change(client, member, team, quota, published):
    run = submit_run_as(member, team, name="one")
    client.force_login(member)
    assert 'hx-trigger="every 5s"' in client.get("/", **HTMX).content.decode()
    set_state(run, RunState.SUCCEEDED, finished_at=timezone.now())
    admission.release(run.ref)  # what the reconciler does for a finished run
    response = client.get("/", **HTMX)
    assert response.status_code == 286
    fragment = response.content.decode()
    assert "hx-trigger" not in fragment and "0</span><span class=\"stat-label\">runs holding quota · 0 queued" in fragment


def test_a_run_rows_cost_moves_with_its_state_cell(client, member, team, quota, published):
    run = submit_run_as(member, team)
    set_state(run, RunState.RUNNING, started_at=timezone.now() - timedelta(hours=1))
    QuotaHold.objects.held().filter(ref=run.ref).update(billed_until=timezone.now() - timedelta(hours=1), open_units=2)
    client.force_login(member)
    listed = client.get("/runs/").content.decode()
    assert f'<span id="run-{run.pk}-cost">8.20 USD</span>' in listed
    polled = client.get(f"/runs/{run.pk}/state/", **HTMX).content.decode()
    # The state cell, then the cost out of band (htmx swaps it into the row's cost cell).
    assert f'id="run-{run.pk}-state"' in polled
    assert re.search(rf'<span id="run-{run.pk}-cost" hx-swap-oob="true">8\.2\d USD</span>', polled)


def test_the_dashboards_recent_runs_take_in_new_runs_with_each_poll(client, member, team, quota, published):
    submit_run_as(member, team, name="one")
    client.force_login(member)
    assert "fresh-one" not in client.get("/").content.decode()
    submit_run_as(member, team, name="fresh-one", gpus_per_worker=1)  # from the API or another tab
    fragment = client.get("/", **HTMX).content.decode()
    recent = fragment[fragment.index('id="recent-runs"'):]
    assert recent.index("fresh-one") < recent.index(">one<")  # newest first
