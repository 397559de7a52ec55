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
from notifications.models import Event
from sandbox import faults
from sandbox.backend import SandboxBackend
from sandbox.models import SimPod
from tests.backends import use_backend
from tests.jobs.conftest import run_payload
from workloads.cycle import reconcile as rec
from workloads.models import AlertEpisode, GpuTelemetry
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


def test_an_overheated_node_gives_the_hot_gpu_alert_to_staff_and_cooling_closes_it(settings, member, team, quota,
                                                                                   published, staff):
    """The sandbox's overheat fault (a failed fan) is what the hot-GPU alert watches for: the node's GPUs report
    more than 85 °C, and after the rule's minutes the episode opens once, for platform staff; cooled, it closes."""
    settings.SLIPWAY_ALERT_TEMP_MINUTES = 2
    settings.SLIPWAY_ALERT_CLEAR_MINUTES = 1
    backend = use_backend(settings, SandboxBackend())
    payload = {k: v for k, v in run_payload(name="warm", gpus_per_worker=1).items() if k != "team"}
    run = submit_run(member, team, {**payload, "max_retries": 0, "env": {"SLIPWAY_SIM_DURATION": "30m"}})
    now = timezone.now().replace(second=0, microsecond=0)

    def cycles(count: int) -> list:
        nonlocal now
        reports = []
        for _ in range(count):
            now += timedelta(seconds=30)
            for name, args in published:
                if name == apply_workload.name:
                    apply_workload(*args)
            published.clear()  # the rest: the alert's notification, whose fan-out is notifications' own test
            backend.tick(now)
            reports.append(rec.reconcile(backend, now=now))
        return [r.telemetry[run.identity] for r in reports if run.identity in r.telemetry]

    before = cycles(6)
    assert before and max(r.temp_c for r in before) < 85  # its load alone keeps it under the line
    node = SimPod.objects.filter(workload=run.object_name, active=True).values_list("node", flat=True).first()
    faults.overheat_node(backend, node, 40)
    hot = cycles(6)  # three minutes over the line: the rule's two, then open
    assert min(r.temp_c for r in hot[1:]) > 85
    [episode] = AlertEpisode.objects.filter(ref=run.ref, alert_kind="gpu_hot")
    assert episode.state == AlertEpisode.State.OPEN and episode.team == team
    assert Event.objects.filter(event_kind="gpu_hot").count() == 1  # one message for the episode
    assert faults.cool_node(backend, node) and not faults.cool_node(backend, node)
    cycles(4)
    episode.refresh_from_db()
    assert episode.state == AlertEpisode.State.CLOSED and Event.objects.filter(event_kind="gpu_hot").count() == 1
