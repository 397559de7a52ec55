"""GPU telemetry in the reconcile cycle: one query, kept per minute, handed on in the report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from django.core.cache import cache
from django.utils import timezone

from cluster.backends.base import GpuReading, WorkloadTelemetry
from cluster.errors import Transient
from jobs.services import submit_run
from tests.jobs.conftest import run_payload
from workloads.checks import check_telemetry_step
from workloads.cycle import reconcile as rec
from workloads.models import GpuTelemetry
from workloads.tasks import TELEMETRY_LOCK, apply_workload, compact_telemetry
from workloads.telemetry import readings as telemetry

TWO_GPUS = WorkloadTelemetry((GpuReading("GPU-a", 90.0, 70000.0, 11920.0, 74.0, 380.0),
                              GpuReading("GPU-b", 70.0, 50000.0, None, 68.5, None)))


@pytest.fixture
def running(member, team, quota, fake_backend, published):
    run = submit_run(member, team, {k: v for k, v in run_payload(gpus_per_worker=2).items() if k != "team"})
    apply_workload("run", run.pk)
    fake_backend.set_running("team-ml-research", run.object_name, units=2)
    return run


@pytest.mark.django_db
def test_a_cycle_keeps_each_workloads_readings_in_its_minute_and_reports_them(running, fake_backend):
    now = timezone.now().replace(second=10, microsecond=0)
    fake_backend.utilization = {running.object_name: TWO_GPUS}
    report = rec.reconcile(fake_backend, now=now)
    assert report.telemetry == {running.identity: TWO_GPUS}
    (row,) = GpuTelemetry.objects.all()
    assert (row.team_id, row.ref, row.start, row.step, row.slots, row.gpus) == (
        running.team_id, running.ref, now.replace(second=0), 60, 1, ["GPU-a", "GPU-b"])
    values = telemetry.unpack(row.values, 2, 1)
    assert values[:, 0, 0].tolist() == [90.0, 70000.0, 11920.0, 74.0, 380.0]
    assert values[telemetry.FB_FREE, 1, 0] != values[telemetry.FB_FREE, 1, 0]  # NaN: not reported
    # A later cycle of the same minute overwrites it; the next minute is a row of its own.
    fake_backend.utilization = {running.object_name: 20.0}
    rec.reconcile(fake_backend, now=now + timedelta(seconds=30))
    rec.reconcile(fake_backend, now=now + timedelta(seconds=60))
    rows = list(GpuTelemetry.objects.order_by("start"))
    assert [(r.start, r.gpus) for r in rows] == [(now.replace(second=0), ["GPU-fake-0"]),
                                                 (now.replace(second=0) + timedelta(minutes=1), ["GPU-fake-0"])]
    assert fake_backend.calls.count("gpu_telemetry") == 3  # one query per cycle: idle reads the same answer


@pytest.mark.django_db
def test_an_outage_records_nothing_and_reports_nothing(running, fake_backend):
    fake_backend.utilization = Transient("Prometheus unreachable")
    report = rec.reconcile(fake_backend, now=timezone.now())
    assert report.telemetry == {} and not GpuTelemetry.objects.exists()


@pytest.mark.django_db
def test_a_workload_the_metrics_do_not_cover_gets_no_row(running, fake_backend):
    fake_backend.utilization = {"run-999999": 50.0}
    assert rec.reconcile(fake_backend, now=timezone.now()).telemetry == {}
    assert not GpuTelemetry.objects.exists()


def test_a_reading_packs_and_unpacks_every_series_of_every_gpu():
    values = telemetry.reading_values(TWO_GPUS)
    assert values.shape == (5, 2, 1)
    back = telemetry.unpack(telemetry.pack(values), 2, 1)
    assert np.array_equal(back, values, equal_nan=True)


# -- storage: minutes folded into days, retention ------------------------------------------------------
T0 = datetime(2026, 11, 3, 23, 30, tzinfo=UTC)


def reading(util: float, used: float, free: float | None, temp: float, power: float, gpu: str = "GPU-a"):
    return WorkloadTelemetry((GpuReading(gpu, util, used, free, temp, power),))


def record_minutes(run, first: datetime, figures: list[WorkloadTelemetry]) -> None:
    for i, figure in enumerate(figures):
        telemetry.record(None, {run.identity: figure}, first + timedelta(minutes=i, seconds=5))


@pytest.mark.django_db
def test_minutes_past_the_raw_window_fold_into_a_day_row_by_each_series_rule(running, settings):
    settings.SLIPWAY_TELEMETRY_RAW_MINUTES, settings.SLIPWAY_TELEMETRY_STEP_MINUTES = 60, 10
    # 23:30-23:59 on the 3rd (three 10-minute slots), then 00:00-00:09 on the 4th.
    record_minutes(running, T0, [reading(10.0 * (i % 10), 1000.0 + i, 9000.0 - i, 40.0 + i, 100.0) for i in range(40)])
    assert telemetry.compact(T0 + timedelta(minutes=65))[0] == 0  # nothing older than the window yet
    folded, pruned = telemetry.compact(T0 + timedelta(minutes=40 + 60))
    assert (folded, pruned) == (40, 0)
    days = list(GpuTelemetry.objects.order_by("start"))
    assert [(d.start, d.step, d.slots, d.gpus) for d in days] == [
        (datetime(2026, 11, 3, tzinfo=UTC), 600, 144, ["GPU-a"]), (datetime(2026, 11, 4, tzinfo=UTC), 600, 144, ["GPU-a"])]
    first = telemetry.unpack(days[0].values, 1, 144)[:, 0, 141]  # 23:30-23:39
    assert first.tolist() == [45.0, 1009.0, 8991.0, 49.0, 100.0]  # mean util, peak used, least free, hottest, mean power
    assert np.isnan(telemetry.unpack(days[0].values, 1, 144)[:, 0, :141]).all()  # before the run: nothing
    assert telemetry.unpack(days[0].values, 1, 144)[telemetry.TEMP, 0, 143] == 69.0
    assert telemetry.unpack(days[1].values, 1, 144)[telemetry.TEMP, 0, 0] == 79.0


@pytest.mark.django_db
def test_a_fold_keeps_the_raw_window_and_adds_gpus_that_came_later(running, settings):
    settings.SLIPWAY_TELEMETRY_RAW_MINUTES, settings.SLIPWAY_TELEMETRY_STEP_MINUTES = 60, 10
    start = datetime(2026, 11, 3, 10, 0, tzinfo=UTC)
    record_minutes(running, start, [reading(50.0, 1.0, 2.0, 3.0, 4.0)] * 10)
    record_minutes(running, start + timedelta(minutes=10), [WorkloadTelemetry((
        GpuReading("GPU-b", 70.0, 1.0, None, 3.0, 4.0), GpuReading("GPU-a", 60.0, 1.0, 2.0, 3.0, 4.0)))] * 10)
    telemetry.compact(start + timedelta(minutes=80))  # 10:00-10:19 fold; later minutes would stay raw
    (day,) = GpuTelemetry.objects.filter(step=600)
    assert day.gpus == ["GPU-a", "GPU-b"]
    values = telemetry.unpack(day.values, 2, 144)
    assert values[telemetry.UTIL, 0, 60] == 50.0 and np.isnan(values[telemetry.UTIL, 1, 60])  # GPU-b: not there yet
    assert values[telemetry.UTIL, :, 61].tolist() == [60.0, 70.0]
    assert np.isnan(values[telemetry.FB_FREE, 1, 61])  # never reported: stays missing
    record_minutes(running, start + timedelta(minutes=75), [reading(5.0, 1.0, 2.0, 3.0, 4.0)])
    telemetry.compact(start + timedelta(minutes=80))
    assert GpuTelemetry.objects.filter(step=60).count() == 1  # the last hour stays minute by minute


@pytest.mark.django_db
def test_rows_past_retention_are_pruned_and_zero_keeps_everything(running, settings):
    settings.SLIPWAY_TELEMETRY_KEEP_DAYS = 30
    record_minutes(running, T0, [reading(50.0, 1.0, 2.0, 3.0, 4.0)] * 3)
    telemetry.compact(T0 + timedelta(days=2))
    assert GpuTelemetry.objects.filter(step=600).count() == 1
    settings.SLIPWAY_TELEMETRY_KEEP_DAYS = 0
    assert telemetry.compact(T0 + timedelta(days=400)) == (0, 0)
    settings.SLIPWAY_TELEMETRY_KEEP_DAYS = 30
    assert telemetry.prune(T0 + timedelta(days=30)) == 0  # its day (the 3rd) ended less than 30 days ago
    assert telemetry.prune(T0 + timedelta(days=30, hours=1)) == 1
    assert not GpuTelemetry.objects.exists()


@pytest.mark.django_db
def test_the_beat_task_folds_single_flight(running, settings):
    record_minutes(running, timezone.now() - timedelta(hours=3), [reading(50.0, 1.0, 2.0, 3.0, 4.0)] * 2)
    assert compact_telemetry() == "folded=2 pruned=0"
    cache.add(TELEMETRY_LOCK, "another worker's", timeout=60)
    assert compact_telemetry() == "busy"


def test_the_bucket_must_divide_a_day(settings):
    settings.SLIPWAY_TELEMETRY_STEP_MINUTES = 7
    assert [e.id for e in check_telemetry_step(None)] == ["slipway.E003"]
    settings.SLIPWAY_TELEMETRY_STEP_MINUTES = 15
    assert check_telemetry_step(None) == []
