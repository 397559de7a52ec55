"""``slipway metrics RUN [--follow]`` and ``slipway top`` against a live server (docs/metrics.md)."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from cluster.backends.base import GpuReading, WorkloadTelemetry
from jobs import metrics
from jobs.constants import RunState
from jobs.metric_lines import Point, ProgressMark
from jobs.models import TrainingRun
from slipway import polling
from tests.cli.test_cli import run_id_of
from workloads.tasks import apply_workload
from workloads.telemetry import readings as telemetry

pytestmark = pytest.mark.django_db(transaction=True)


def running_run(cli, spec_path) -> TrainingRun:
    run_id = run_id_of(cli("run", "-f", spec_path).stdout)
    apply_workload("run", run_id)
    # Its pods started before it reports (report() dates its first mark a minute back): a report from before
    # the attempt started would be the start of a new attempt's window (jobs.progress.advance), with no rate.
    TrainingRun.objects.filter(pk=run_id).update(state=RunState.RUNNING, started_at=timezone.now() - timedelta(minutes=5))
    return TrainingRun.objects.get(pk=run_id)


def report(run: TrainingRun, steps: range, total: int = 1000) -> None:
    now = timezone.now()
    points = [Point(s, name, 2.0 - s / 1000 if name == "loss" else s / 1000, now) for s in steps
              for name in ("loss", "accuracy")]
    metrics.record(run, points, [ProgressMark(steps.start, total, now - timedelta(seconds=60)),
                                 ProgressMark(steps[-1], total, now)], now)


@pytest.fixture
def spec(tmp_path):
    from tests.cli.test_cli import write
    from tests.jobs.conftest import run_payload

    return write(tmp_path / "spec.yaml", run_payload(max_retries=0))


def test_metrics_prints_a_line_per_step_and_the_progress(cli, spec):
    run = running_run(cli, spec)
    report(run, range(0, 100, 10))
    result = cli("metrics", str(run.pk), "--last", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:2] == ["step=80 accuracy=0.08 loss=1.92", "step=90 accuracy=0.09 loss=1.91"]
    last = result.stdout.splitlines()[-1]
    assert last.startswith("progress: step 90 of 1,000 (9.0 %), ETA ") and "(in 10 min)" in last
    only_loss = cli("runs", "metrics", str(run.pk), "--name", "loss", "--last", "0").stdout.splitlines()
    assert only_loss[0] == "step=0 loss=2" and len([line for line in only_loss if line.startswith("step=")]) == 10
    answer = json.loads(cli("metrics", str(run.pk), "-o", "json").stdout)
    assert answer["names"] == ["accuracy", "loss"] and len(answer["series"]["loss"]) == 10


def test_metrics_follow_prints_new_steps_until_the_run_ends(cli, spec, monkeypatch):
    run = running_run(cli, spec)
    report(run, range(0, 30, 10))

    def more_then_the_end(_seconds):
        report(run, range(30, 50, 10))
        TrainingRun.objects.filter(pk=run.pk).update(state=RunState.SUCCEEDED, finished_at=timezone.now())

    monkeypatch.setattr(polling, "pause", more_then_the_end)
    result = cli("metrics", str(run.pk), "--follow", "--name", "loss")
    assert result.exit_code == 0, result.output
    steps = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("step=")]
    assert steps == ["step=0", "step=10", "step=20", "step=30", "step=40"]
    assert "progress: step 40 of 1,000" in result.stdout
    assert cli("metrics", str(run.pk), "--follow", "-o", "json").exit_code == 2


def test_metrics_of_a_silent_run_and_of_no_run(cli, spec):
    run = running_run(cli, spec)
    assert cli("metrics", str(run.pk)).stdout.strip() == f"run {run.pk}: no metrics reported yet"
    assert cli("metrics", "999999").exit_code == 4


def test_top_lists_the_running_work_with_progress_eta_and_cost(cli, spec):
    assert cli("top").stdout.strip() == "Nothing holds GPUs in your teams."
    run = running_run(cli, spec)
    report(run, range(0, 500, 10))
    TrainingRun.objects.filter(pk=run.pk).update(idle_since=timezone.now() - timedelta(minutes=40))
    lines = cli("top", "--team", "ml-research").stdout.splitlines()
    assert lines[0].split() == ["KIND", "ID", "TEAM", "NAME", "GPUS", "GPU", "UTIL", "GPU", "MEM", "PROGRESS", "ETA",
                                "COST"]
    row = lines[1].split()
    assert row[:5] == ["run", str(run.pk), "ml-research", run.name, "2"]
    assert "idle" in lines[1] and "49.0 %" in lines[1] and "in 1 min" in lines[1]
    assert re.search(r" \d+\.\d\d USD$", lines[1].rstrip())  # cost in cents with the API's currency (issue 46)
    as_json = json.loads(cli("top", "-o", "json").stdout)
    assert [r["id"] for r in as_json["runs"]] == [run.pk] and as_json["runs"][0]["progress"]["step"] == 490


def test_top_shows_the_gpus_now_from_their_telemetry_as_the_page_does(cli, spec, client, member):
    run = running_run(cli, spec)
    reading = WorkloadTelemetry((GpuReading("GPU-a", 92.0, 40960.0, 40960.0, 71.0, 380.0),
                                 GpuReading("GPU-b", 88.0, 30720.0, 51200.0, 69.0, 360.0)))
    telemetry.record(None, {run.identity: reading}, timezone.now())
    row = cli("top", "--team", "ml-research").stdout.splitlines()[1]
    assert "90 %" in row and "70/160 GiB" in row and "idle" not in row
    client.force_login(member)
    assert "90 % busy, 70 of 160 GiB memory in use (2 GPUs)" in client.get(f"/runs/{run.pk}/").content.decode()
