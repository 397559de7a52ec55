"""Training metrics end to end (issue 38): API → real Celery worker and beat → sandbox cluster →
the stdout reader → the API, the run page and the ETA.

A simulated run prints Katib-style metric lines ten times a second and its progress
(sandbox.training_metrics); the worker's beat reads its log every second. While it runs, its page
shows the loss chart and an ETA; once it ended, it reported loss for 200 steps and more, and the
ETA read mid-run is within 20 % of its real end.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest
from django.test import Client

from jobs.models import RunMetric
from quotas.demo import seed_flavors, seed_team_quotas
from tests.e2e.conftest import started_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(240)]

DURATION = 30  # seconds the simulated run trains


@pytest.fixture
def reading_worker(transactional_db, tmp_path):
    process = started_worker(tmp_path, SLIPWAY_RUN_METRICS_READ_SECONDS="1")
    yield process
    process.stop()


def parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_a_simulated_run_reports_loss_and_progress_and_its_eta_holds(reading_worker, team, member, api_client_for):
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 8}, Decimal("200000"))
    api = api_client_for(member)
    created = api.post("/api/v1/runs/", {
        "team": "ml-research", "name": "loss-curve", "image": "registry.example.com/ml/trainer:1.0",
        "command": ["python", "train.py"], "flavor": "a100-80gb", "gpus_per_worker": 1,
        "env": {"SLIPWAY_SIM_DURATION": f"{DURATION}s", "SLIPWAY_SIM_LOG_EVERY": "0.1"}}, format="json")
    assert created.status_code == 201, created.content
    run_id = created.json()["id"]

    # 1. Mid-run: a rate is known (an ETA), and a third of the points are in.
    def mid_run():
        body = api.get(f"/api/v1/runs/{run_id}/").json()
        progress = body.get("progress")
        if body["state"] != "running" or not progress or progress["eta"] is None:
            return None
        loss = api.get(f"/api/v1/runs/{run_id}/metrics/", {"name": "loss", "limit": 10000}).json()["series"]
        return (body, progress) if len(loss.get("loss", [])) >= 100 else None

    body, progress = wait_for(mid_run, timeout=120, interval=0.2,
                              what=f"run {run_id} to run and report its progress\n{reading_worker.logs()[-3000:]}")
    eta, started = parse(progress["eta"]), parse(body["started_at"])
    assert 0 < progress["step"] < progress["total"] == DURATION * 10 * 20
    page = Client()
    page.force_login(member)
    html = page.get(f"/runs/{run_id}/").content.decode()
    assert 'id="metric-loss"' in html and "<polyline" in html and 'id="run-progress"' in html and "ETA " in html

    # 2. It ends: loss for 200 steps and more, the last progress done, the ETA within 20 % of the real end.
    final = wait_for(lambda: (lambda b: b if b["state"] in ("succeeded", "failed") else None)(
        api.get(f"/api/v1/runs/{run_id}/").json()), timeout=120, interval=0.3, what=f"run {run_id} to end")
    assert final["state"] == "succeeded", reading_worker.logs()[-3000:]
    ended = parse(final["finished_at"])

    def read_to_the_end():
        answer = api.get(f"/api/v1/runs/{run_id}/metrics/", {"name": "loss", "limit": 10000}).json()
        return answer if answer["progress"] and answer["progress"]["step"] >= DURATION * 200 - 120 else None

    answer = wait_for(read_to_the_end, timeout=30, what="the last lines to be read")
    steps = [step for step, _value in answer["series"]["loss"]]
    assert len(steps) >= 200 and steps == sorted(steps)
    assert RunMetric.objects.filter(run_id=run_id, name="loss").count() == len(steps)
    values = [value for _step, value in answer["series"]["loss"]]
    assert values[-1] < values[0]  # the loss went down
    error = abs((eta - ended).total_seconds()) / (ended - started).total_seconds()
    print(f"ETA read mid-run {eta.isoformat()}, real end {ended.isoformat()}: {error:.1%} of its running time")
    assert error <= 0.20
