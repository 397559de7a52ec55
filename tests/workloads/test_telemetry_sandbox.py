"""GPU telemetry end to end on the simulated cluster: the apply task, the sandbox's exporter, the reconcile
cycle's one reading a cycle, the stored minutes and the API's series — a run that loads, trains, leaks
memory and goes idle shows all of it, and idle waste reads the same utilization."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import submit_run
from sandbox.backend import SandboxBackend
from tests.backends import use_backend
from tests.jobs.conftest import run_payload
from workloads import reconcile as rec
from workloads.models import GpuTelemetry
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_simulated_runs_telemetry_shows_its_phases_its_leak_and_its_idle_end(settings, member, team, quota,
                                                                               published, api):
    backend = use_backend(settings, SandboxBackend())
    payload = {k: v for k, v in run_payload(name="story", gpus_per_worker=2).items() if k != "team"}
    run = submit_run(member, team, {**payload, "max_retries": 0, "env": {
        "SLIPWAY_SIM_DURATION": "20m", "SLIPWAY_SIM_IDLE_AFTER": "6m", "SLIPWAY_SIM_GPU_MEMORY_GB": "10",
        "SLIPWAY_SIM_GPU_MEMORY_LEAK": "2"}})
    now = timezone.now().replace(second=0, microsecond=0)
    reports = []
    for _ in range(2 * 9):  # a cycle every 30 s for 9 minutes
        now += timedelta(seconds=30)
        while published:
            apply_workload(*published.pop(0)[1])
        backend.tick(now)
        reports.append(rec.reconcile(backend, now=now))
    run.refresh_from_db()
    assert run.state == RunState.RUNNING
    readings = [r.telemetry[run.identity] for r in reports if run.identity in r.telemetry]
    assert len(readings) >= 15 and all(len(t.gpus) == 2 for t in readings)  # every cycle once its pod ran
    # Minute rows: the last reading of each minute, both GPUs.
    rows = list(GpuTelemetry.objects.filter(ref=run.ref).order_by("start"))
    assert len(rows) >= 8 and all(r.step == 60 and len(r.gpus) == 2 for r in rows)
    answer = api.get(f"/api/v1/runs/{run.pk}/telemetry/").json()
    util = answer["series"]["util_pct"][0]["v"]
    used = answer["series"]["fb_used_mib"][0]["v"]
    assert util[0] < 25 and max(util) > 80 and util[-1] < 5  # loading, training, idle from 6 minutes on
    assert used == sorted(used) and used[-1] - used[0] >= 12 * 1024  # 2 GiB a minute
    assert answer["series"]["power_w"][0]["v"][-1] < min(answer["series"]["power_w"][0]["v"][2:5])
    # Idle waste reads the same readings: idle since the cycle that first saw it under the threshold.
    first_idle = next(r for r in readings if r.util_pct < settings.SLIPWAY_IDLE_UTIL_PCT)
    assert first_idle.util_pct == readings[-1].util_pct == 1.0
    assert run.idle_since is not None and TrainingRun.objects.get(pk=run.pk).open_idle
