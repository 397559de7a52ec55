"""Progress and its ETA belong to an attempt (issue 46): a run queued again after a preemption shows its last
attempt's step and no ETA — on its page, in the API and in ``slipway metrics``/``top`` — and its next attempt's first
report starts its own (docs/metrics.md "Progress and ETA")."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest
from django.db.models import F
from django.utils import timezone

from jobs import metrics
from jobs.constants import RunState
from jobs.models import RunProgress, TrainingRun
from slipway.insight import _eta, _percent, progress_words
from tests.jobs.test_metrics_api import run_client, start, submit, url

pytestmark = pytest.mark.django_db


@pytest.fixture
def started(api, quota, published) -> int:
    run_id = submit(api)["id"]
    start(run_id)
    return run_id


def report(run_id: int, step: int) -> dict:
    response = run_client(run_id).post(url(run_id), {"progress": {"step": step, "total": 100}}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()["progress"]


def page_progress(client, member, run_id: int) -> str:
    client.force_login(member)
    html = client.get(f"/runs/{run_id}/").content.decode()
    found = re.search(r'<dd id="run-progress"[^>]*>(.*?)</dd>', html, re.S)
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split()) if found else ""


def test_a_run_queued_again_shows_its_last_attempts_step_without_an_eta_until_its_next_attempt_reports(
        started, api, client, member):
    run_id = started
    report(run_id, 20)
    # Step 20 came ten minutes ago: a rate of 2 steps a minute, an ETA half an hour out — two reports a few
    # milliseconds apart would put the ETA within a second, and a slow page would say "any moment now".
    # (Its attempt began before that.)
    TrainingRun.objects.filter(pk=run_id).update(attempt_started_at=F("attempt_started_at") - timedelta(minutes=20))
    RunProgress.objects.filter(run_id=run_id).update(at=F("at") - timedelta(minutes=10),
                                                     window_at=F("window_at") - timedelta(minutes=10))
    running = report(run_id, 40)
    assert running["eta"] is not None and running["last_attempt"] is False
    assert "ETA" in page_progress(client, member, run_id)
    # Preempted and queued again, as workloads.lifecycle.requeue leaves it: its next attempt, no pods.
    TrainingRun.objects.filter(pk=run_id).update(state=RunState.QUEUED, attempt=F("attempt") + 1,
                                                 attempt_started_at=None, admitted_at=None)
    queued = api.get(f"/api/v1/runs/{run_id}/").json()["progress"]
    assert (queued["step"], queued["total"], queued["percent"], queued["last_attempt"]) == (40, 100, 40.0, True)
    assert (queued["eta"], queued["eta_seconds"], queued["rate_per_second"], queued["done"], queued["stale"]) == (
        None, None, None, False, False)
    assert api.get(url(run_id)).json()["progress"] == queued
    assert [row["progress"] for row in api.get("/api/v1/runs/").json()["results"] if row["id"] == run_id] == [queued]
    words = page_progress(client, member, run_id)
    assert words.startswith("Last attempt reached step 40 of 100 (40.0 %") and "ETA" not in words.replace(
        "no ETA until the new attempt reports", "")
    assert progress_words(queued) == ("last attempt reached step 40 of 100 (40.0 %), no ETA until the new attempt "
                                      "reports")
    assert (_percent(queued), _eta(queued)) == ("40.0 % (last attempt)", "-")
    # Nor do the start estimates of the work behind it count on its old ETA.
    assert metrics.etas([TrainingRun.objects.get(pk=run_id)])[run_id].at is None
    # The next attempt's pods start: still the last attempt's until it reports.
    TrainingRun.objects.filter(pk=run_id).update(state=RunState.RUNNING, attempt_started_at=timezone.now())
    assert api.get(f"/api/v1/runs/{run_id}/").json()["progress"]["last_attempt"] is True
    # Its first report (resumed from its checkpoint) is its own; the second gives its own rate and ETA.
    first = report(run_id, 35)
    assert (first["step"], first["last_attempt"]) == (35, False)
    second = report(run_id, 45)
    assert second["last_attempt"] is False and second["eta"] is not None
    assert "Last attempt" not in page_progress(client, member, run_id)
