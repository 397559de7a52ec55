"""GPU telemetry in the reconcile cycle: one query, kept per minute, handed on in the report."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from cluster.backends.base import GpuReading, WorkloadTelemetry
from cluster.errors import Transient
from jobs.services import submit_run
from tests.jobs.conftest import run_payload
from workloads import reconcile as rec
from workloads import telemetry
from workloads.models import GpuTelemetry
from workloads.tasks import apply_workload

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
