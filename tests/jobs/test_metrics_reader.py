"""The stdout reader (jobs.metrics.read_run_logs): Katib lines and progress from running runs'
logs, from where the last read ended, bounded per cycle; and the progress ETA in the queue's
start estimates (workloads.estimates.forecast)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from jobs import metrics, services
from jobs.constants import RunState
from jobs.metric_lines import ProgressMark
from jobs.models import RunLogCursor, RunMetric, RunProgress, TrainingRun
from quotas.demo import seed_team_quotas
from tests.jobs.conftest import run_payload
from workloads.estimates.forecast import estimated_starts
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def started_run(member, team, fake_backend, name: str = "bert", **overrides) -> tuple[TrainingRun, str]:
    fields = {k: v for k, v in run_payload(name=name, gpus_per_worker=1, **overrides).items() if k != "team"}
    run = services.submit_run(member, team, fields)
    assert apply_workload("run", run.pk) == "applied"
    run.refresh_from_db()
    fake_backend.set_running(run.namespace, run.object_name, 1)
    TrainingRun.objects.filter(pk=run.pk).update(state=RunState.RUNNING, started_at=T0, attempt_started_at=T0)
    run.refresh_from_db()
    return run, fake_backend.pods(run)[0]["metadata"]["name"]


def lines(first: int, last: int, total: int = 400) -> list[str]:
    """The Katib lines of steps ``first``..``last`` (one every 10 s, 20 steps each) and progress lines."""
    out = []
    for k in range(first, last + 1):
        out.append(f"{stamp(k * 10)} INFO  step={k * 20} loss={2.0 - k / 100:.4f} lr=3e-4")
        out.append(f"{stamp(k * 10)} SLIPWAY_PROGRESS step={k * 20} total={total}")
    return out


def test_it_reads_new_lines_from_where_it_ended_and_duplicates_nothing(member, team, quota, fake_backend, published):
    run, pod = started_run(member, team, fake_backend)
    fake_backend.log_lines[pod] = ["starting", *lines(1, 5)]
    figures = metrics.read_run_logs(now=T0 + timedelta(seconds=55))
    assert (figures.runs, figures.points) == (1, 10)  # loss and lr at 5 steps
    cursor = RunLogCursor.objects.get(run=run)
    assert cursor.since == T0 + timedelta(seconds=50) and not cursor.done
    fake_backend.log_lines[pod] += lines(6, 10)
    metrics.read_run_logs(now=T0 + timedelta(seconds=105))
    # From the time of the last line read (the cluster's sinceTime): that second again, nothing older.
    assert fake_backend.log_reads[-1] == (pod, T0 + timedelta(seconds=50))
    assert RunMetric.objects.filter(run=run, name="loss").count() == 10
    assert list(RunMetric.objects.filter(run=run, name="loss", step=200).values_list("value", flat=True)) == [1.9]
    progress = RunProgress.objects.get(run=run)
    assert (progress.step, progress.total) == (200, 400) and progress.rate == pytest.approx(2.0)
    eta = metrics.etas([run], T0 + timedelta(seconds=105))[run.pk]
    assert eta.at == T0 + timedelta(seconds=200)  # 200 steps left at 2 a second, from the last report


def test_a_finished_run_is_read_once_more_then_never(member, team, quota, fake_backend, published):
    run, pod = started_run(member, team, fake_backend)
    fake_backend.log_lines[pod] = lines(1, 3)
    now = timezone.now()
    TrainingRun.objects.filter(pk=run.pk).update(state=RunState.SUCCEEDED, finished_at=now)
    assert metrics.read_run_logs(now=now).runs == 1
    assert RunLogCursor.objects.get(run=run).done
    assert metrics.read_run_logs(now=now + timedelta(seconds=30)).runs == 0


def test_each_cycle_reads_at_most_the_setting_runs_longest_unread_first(member, team, fake_backend, published,
                                                                        flavors, settings):
    seed_team_quotas(team, {"a100-80gb": 8})
    settings.SLIPWAY_RUN_METRICS_READ_RUNS = 2
    runs = [started_run(member, team, fake_backend, name=f"run-{i}")[0] for i in range(3)]
    first = metrics.read_run_logs(now=T0 + timedelta(seconds=10))
    second = metrics.read_run_logs(now=T0 + timedelta(seconds=20))
    assert first.runs == second.runs == 2
    read_at = dict(RunLogCursor.objects.values_list("run_id", "read_at"))
    # The one left out of the first cycle came first in the second.
    assert read_at[runs[2].pk] == T0 + timedelta(seconds=20) and len(read_at) == 3


def test_a_log_past_the_names_limit_drops_the_new_names_only(member, team, quota, fake_backend, published):
    run, pod = started_run(member, team, fake_backend)
    fake_backend.log_lines[pod] = [f"{stamp(1)} step=1 " + " ".join(f"m{i}=1" for i in range(31)),
                                   f"{stamp(2)} step=2 " + " ".join(f"n{i}=1" for i in range(5)) + " m0=2"]
    metrics.read_run_logs(now=T0 + timedelta(seconds=5))
    assert len(metrics.names(run)) == metrics.MAX_NAMES
    assert RunMetric.objects.get(run=run, name="m0", step=2).value == 2.0


def test_the_queue_expects_a_running_run_at_its_progress_eta(member, team, fake_backend, published, flavors):
    seed_team_quotas(team, {"a100-80gb": 1})
    now = timezone.now()
    holder, _pod = started_run(member, team, fake_backend, name="holder", max_runtime_minutes=600)
    TrainingRun.objects.filter(pk=holder.pk).update(started_at=now - timedelta(minutes=10),
                                                    attempt_started_at=now - timedelta(minutes=10))
    waiting = services.submit_run(member, team, {k: v for k, v in run_payload(name="waiting", gpus_per_worker=1).items()
                                                 if k != "team"})
    assert waiting.state == RunState.QUEUED
    # Without progress: the holder's limit (no history of the job, no platform figure yet).
    assert estimated_starts(team, now)[waiting.ref].at == now - timedelta(minutes=10) + timedelta(minutes=600)
    # It reports a quarter done after 10 minutes: it should end 30 minutes from now.
    metrics.record(holder, [], [ProgressMark(0, 4000, now - timedelta(minutes=10)), ProgressMark(1000, 4000, now)], now)
    assert estimated_starts(team, now)[waiting.ref].at == now + timedelta(minutes=30)
    # A stale report (nothing for 20 minutes) is not trusted: the limit again.
    later = now + timedelta(minutes=20)
    assert estimated_starts(team, later)[waiting.ref].at == now - timedelta(minutes=10) + timedelta(minutes=600)
