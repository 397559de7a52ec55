"""A preempted run's page and logs, attempt by attempt, on the simulated cluster (issue 34.4).

Vision's run with the checkpoint contract borrows nlp-platform's idle A100s, reports a checkpoint,
and is preempted when nlp-platform takes its units back: the real reclaim, the real reconcile
cycle and the sandbox, whose deleted pods' logs are gone as on a real cluster. Its page must say
one thing per state: queued since its requeue (never "Running for"), one Cluster row (the current
attempt's), the timeline in event order, and attempt 1's logs still readable on the page
(``?attempt=1``) and through the API.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from core.formatting import format_duration, format_when
from jobs.constants import RunState
from jobs.models import TrainingRun
from tests.factories import cohort_pair, member_api, secret_values
from tests.jobs.conftest import post_share_run
from tests.workloads.timeline import scripted_timeline
from workloads.cycle.placement import KEPT_PLACEMENT
from workloads.models import Attempt

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 11, 24, 9, 0, 0, tzinfo=UTC)
CHECKPOINT = "/slipway/checkpoints/s300.pt"


@pytest.fixture
def timeline(published, monkeypatch, settings):
    settings.SLIPWAY_PREEMPTION_GRACE_SECONDS = 30
    return scripted_timeline(published, monkeypatch, settings, START)


class Preempted:
    """The scenario's handles: the victim's id, alice's API client and page client, nlp's run."""

    def __init__(self, run_id: int, api: APIClient, nlp_run: int):
        self.run_id, self.api, self.nlp_run = run_id, api, nlp_run
        self.page = Client()
        self.page.force_login(get_user_model().objects.get(username="alice"))

    @property
    def run(self) -> TrainingRun:
        return TrainingRun.objects.select_related("cluster").get(pk=self.run_id)

    def html(self, query: str = "") -> str:
        response = self.page.get(f"/runs/{self.run_id}/{query}")
        assert response.status_code == 200, response.status_code
        return response.content.decode()


@pytest.fixture
def preempted(timeline, flavors, staff) -> Preempted:
    """Vision's borrowed run (contract, checkpoint at step 300), preempted by nlp-platform and queued again."""
    cohort_pair(staff, reclaim="any", min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = member_api("vision", "alice")[0], member_api("nlp-platform", "noor")[0]
    post_share_run(alice, "vision", "own", "2h")
    borrowed = post_share_run(alice, "vision", "borrowed", "4m", checkpoint={"grace_seconds": 20})
    timeline.cycles(6)
    assert TrainingRun.objects.get(pk=borrowed).state == RunState.RUNNING
    pods = APIClient()
    pods.credentials(HTTP_AUTHORIZATION=f"Bearer {secret_values(f'run:{borrowed}')['SLIPWAY_RUN_TOKEN']}")
    assert pods.post(f"/api/v1/runs/{borrowed}/checkpoints/", {"step": 300, "path": CHECKPOINT},
                     format="json").status_code == 201
    timeline.cycles(2)
    mine = post_share_run(noor, "nlp-platform", "short", "3m")
    for _ in range(12):
        timeline.cycle()
        if TrainingRun.objects.get(pk=borrowed).state == RunState.QUEUED:
            break
    run = TrainingRun.objects.get(pk=borrowed)
    assert (run.state, run.attempt, run.started_at is not None) == (RunState.QUEUED, 2, True)
    return Preempted(borrowed, alice, mine)


def status_panel(html: str) -> str:
    return html[html.index('id="run-status"'):html.index("</section>", html.index('id="run-status"'))]


def rows(panel: str) -> dict[str, str]:
    """The status panel's ``<dt>label</dt><dd>value</dd>`` rows (a label twice fails the test)."""
    found = re.findall(r"<dt>(.*?)</dt><dd[^>]*>(.*?)</dd>", panel, re.S)
    labels = [label for label, _value in found]
    assert len(labels) == len(set(labels)), f"a row shown twice: {labels}"
    return {label: re.sub(r"<[^>]+>", "", value) for label, value in found}


def steps(panel: str) -> list[tuple[str, str, datetime | None]]:
    """The timeline as ``(status, label, time)``, in page order."""
    found = re.findall(r'<li class="(\w+)"[^>]*>\s*<span class="step-label">([^<]+)</span>\s*'
                       r'<span class="step-time">(?:<time datetime="([^"]+)")?', panel)
    return [(status, label, parse_datetime(at) if at else None) for status, label, at in found]


def test_a_requeued_runs_page_says_queued_since_its_requeue_with_one_cluster_row(preempted):
    run = preempted.run
    attempt1 = Attempt.objects.get(ref=run.ref, number=1)
    panel = status_panel(preempted.html())
    shown = rows(panel)  # no label twice: one Cluster row
    assert "Running for" not in shown and "Ran for" not in shown
    assert shown["Queued since"] == format_when(attempt1.ended_at, "seconds")
    assert shown["Attempt"].startswith("2")
    # The current attempt's placement: it comes back to its cluster (its checkpoint claim is there) …
    name = run.cluster.name
    assert shown["Cluster"] == f"{name} — " + KEPT_PLACEMENT.format(cluster=name, attempt=1, noun="run")
    assert shown["Objects"] == f"Job {run.namespace}/{run.object_name}"
    # … and attempt 1's checkpoint is what it resumes from, not a checkpoint of its own.
    assert shown["Last checkpoint"] == "none reported in this attempt yet"
    assert shown["Resumes from"].startswith("step 300 of attempt 1") and CHECKPOINT in shown["Resumes from"]


def test_attempt_one_keeps_its_placement_and_checkpoint_under_attempts(preempted):
    run = preempted.run
    attempt1 = Attempt.objects.get(ref=run.ref, number=1)
    html = preempted.html()
    card = html[html.index('id="attempts"'):]
    start = card.index('id="attempt-1"')
    row = re.sub(r"<[^>]+>", "", card[start:card.index("</tr>", start)])
    assert attempt1.placement_reason and attempt1.placement_reason in row
    assert attempt1.cluster_id == run.cluster_id and run.cluster.name in row
    assert "Preempted" in row and "team nlp-platform reclaimed 4\u00d7 a100-80gb" in row
    assert "step 300" in row and CHECKPOINT in row
    assert attempt1.started_at is not None and attempt1.stopped_at is not None and attempt1.ended_at is not None


def test_the_timeline_is_in_event_order_across_attempts(preempted, timeline):
    queued = steps(status_panel(preempted.html()))
    assert [(status, label) for status, label, _at in queued] == [
        ("done", "Queued"), ("done", "Admitted"), ("done", "Pending"), ("done", "Running"), ("stopped", "Preempted"),
        ("current", "Queued again"), ("todo", "Admitted"), ("todo", "Pending"), ("todo", "Running"),
        ("todo", "Succeeded")]
    # nlp-platform's run ends, attempt 2 is admitted and runs: its "Admitted" comes after attempt 1's
    # "Running" (started_at stays attempt 1's), before its own.
    for _ in range(60):
        timeline.cycle()
        if preempted.run.state == RunState.RUNNING:
            break
    assert preempted.run.state == RunState.RUNNING
    running = steps(status_panel(preempted.html()))
    assert [label for _status, label, _at in running] == [
        "Queued", "Admitted", "Pending", "Running", "Preempted", "Queued again", "Admitted", "Pending", "Running",
        "Succeeded"]
    times = [at for status, _label, at in running if status in ("done", "stopped", "current")]
    assert None not in times and times == sorted(times)
    assert running[8][0] == "current" and running[8][2] == preempted.run.attempt_started_at
    shown = rows(status_panel(preempted.html()))
    # How long this attempt has run, not since attempt 1 started.
    run = preempted.run
    assert run.attempt_started_at > run.started_at
    assert shown["Running for"] == format_duration(timezone.now() - run.attempt_started_at)
    assert "Queued since" not in shown


def test_attempt_one_logs_stay_readable_on_the_page_and_through_the_api(preempted):
    run = preempted.run
    saved = Attempt.objects.get(ref=run.ref, number=1)
    assert saved.logs and saved.logs[0]["lines"]
    last_line = saved.logs[0]["lines"][-1]

    # The attempt picker links each attempt; attempt 2 (queued) has no lines yet.
    html = preempted.html()
    picker = html[html.index('id="attempt-picker"'):html.index("</nav>", html.index('id="attempt-picker"'))]
    assert f'href="/runs/{run.pk}/?attempt=1#logs"' in picker and f'href="/runs/{run.pk}/?attempt=2#logs"' in picker
    assert "attempt 2 (current)" in picker
    assert last_line not in html

    # ?attempt=1: the lines saved as its pods stopped, not polled (they do not change).
    page = preempted.html("?attempt=1")
    box = page[page.index('id="workload-logs"'):]
    assert last_line in box and "hx-trigger" not in box[:box.index(">")]
    assert "attempt=1" in box[:box.index("</p>")]  # the download link keeps the attempt

    body = preempted.api.get(f"/api/v1/runs/{run.pk}/logs/?attempt=1").json()
    assert body["attempt"] == 1 and body["lines"][-1] == last_line and body["saved_at"] is not None
    assert body["pod"] == saved.logs[0]["pod"]
    assert preempted.api.get(f"/api/v1/runs/{run.pk}/logs/?attempt=1&tail=2").json()["lines"] == (
        saved.logs[0]["lines"][-2:])
    current = preempted.api.get(f"/api/v1/runs/{run.pk}/logs/").json()
    assert (current["attempt"], current["lines"], current["saved_at"]) == (2, [], None)

    download = preempted.api.get(f"/api/v1/runs/{run.pk}/logs/download/?attempt=1")
    assert download.status_code == 200
    assert f'filename="{saved.logs[0]["pod"]}-attempt-1.log"' in download["Content-Disposition"]
    assert download.content.decode().splitlines() == saved.logs[0]["lines"]
