"""The clock: pods move Pending → ContainerCreating → Running → Succeeded/Failed, and every
outcome reaches the portal's words through the same status mapping (``jobs.status``) as a real cluster."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from jobs.status import TrainingPhase, training_status
from sandbox import exporter
from sandbox.models import SimEvent, SimObject, SimPod
from sandbox.pods import GPU_ANNOTATION, GPU_MEMORY_ANNOTATION, GPU_UTILIZATION_ANNOTATION
from sandbox.simulation import MAX_SIM_SECONDS, default_duration, learning_rate, parse_duration
from tests.sandbox.helpers import H100, MIG_1G, at, observed, ref, run_until, team_objects, training
from workloads.registry import resource_kinds


def _status(backend, workload):
    return training_status(observed(backend, workload))


def _container(pod):
    return pod["status"]["containerStatuses"][0]


def test_it_runs_a_job_to_success_on_the_clock(backend):
    backend.apply(team_objects() + training("run-1", duration="90s"), resource_kinds(), now=at(0))
    backend.tick(at(0))
    status = _status(backend, "run-1")
    assert (status.state, status.reason, status.running_units) == (TrainingPhase.PENDING, "ContainerCreating", 0)
    backend.tick(at(10))
    (pod,) = observed(backend, "run-1").pods
    assert pod["status"]["phase"] == "Running"
    assert _container(pod)["state"] == {"running": {"startedAt": "2026-11-22T10:00:10Z"}}
    status = _status(backend, "run-1")
    assert (status.state, status.running_units) == (TrainingPhase.RUNNING, 1)
    # When its container started running (after the 10 s image pull), not when the Job was created.
    assert status.started_at == datetime(2026, 11, 22, 10, 0, 10, tzinfo=UTC)
    backend.tick(at(99))
    assert _status(backend, "run-1").state == TrainingPhase.RUNNING
    backend.tick(at(100))
    status = _status(backend, "run-1")
    assert (status.state, status.reason, status.running_units) == (TrainingPhase.SUCCEEDED, "", 0)
    assert status.finished_at == datetime(2026, 11, 22, 10, 1, 40, tzinfo=UTC)
    (pod,) = observed(backend, "run-1").pods
    assert _container(pod)["state"]["terminated"]["reason"] == "Completed"
    reasons = [e.reason for e in backend.events(ref("run-1"))]
    assert reasons == ["SuccessfulCreate", "Scheduled", "Pulling", "Pulled", "Created", "Started", "Completed"]


def test_it_retries_a_failing_job_until_the_backoff_limit(backend):
    backend.apply(team_objects() + training("run-1", duration="30s", outcome="fail", retries=2), resource_kinds(), now=at(0))
    run_until(backend, 0, 200)
    job = observed(backend, "run-1").first("Job")
    assert job["status"]["failed"] == 3  # the first attempt and two retries
    (condition,) = job["status"]["conditions"]
    assert (condition["type"], condition["reason"]) == ("Failed", "BackoffLimitExceeded")
    pods = observed(backend, "run-1").pods
    # attempt 1 fails at 40s (10s pull + 30s); the controller waits 10s, then 20s after attempt 2 fails at 90s
    assert [p["metadata"]["creationTimestamp"] for p in pods] == [
        "2026-11-22T10:00:00Z", "2026-11-22T10:00:50Z", "2026-11-22T10:01:50Z"]
    for pod in pods:
        assert _container(pod)["state"]["terminated"]["reason"] == "Error"
        assert _container(pod)["state"]["terminated"]["exitCode"] == 1
    status = _status(backend, "run-1")
    assert status.state == TrainingPhase.FAILED
    assert status.reason.startswith("BackoffLimitExceeded: Job has reached the specified backoff limit")
    assert "Error (exit 1)" in status.reason


def test_it_reports_oom_kills(backend):
    backend.apply(team_objects() + training("run-1", duration="20s", outcome="oom", retries=0), resource_kinds(), now=at(0))
    run_until(backend, 0, 40)
    (pod,) = observed(backend, "run-1").pods
    assert _container(pod)["state"]["terminated"]["reason"] == "OOMKilled"
    assert _container(pod)["state"]["terminated"]["exitCode"] == 137
    status = _status(backend, "run-1")
    assert status.state == TrainingPhase.FAILED
    assert "OOMKilled (exit 137)" in status.reason
    assert "OOMKilling" in [e.reason for e in backend.events(ref("run-1"))]


def test_it_keeps_an_image_pull_failure_waiting_without_consuming_retries(backend):
    backend.apply(team_objects() + training("run-1", outcome="image-pull", retries=0), resource_kinds(), now=at(0))
    backend.tick(at(0))
    backend.tick(at(12))
    (pod,) = observed(backend, "run-1").pods
    assert _container(pod)["state"]["waiting"]["reason"] == "ErrImagePull"
    run_until(backend, 15, 3600, step=300)
    (pod,) = observed(backend, "run-1").pods
    assert pod["status"]["phase"] == "Pending"
    waiting = _container(pod)["state"]["waiting"]
    assert waiting == {"reason": "ImagePullBackOff",
                       "message": 'Back-off pulling image "registry.example.com/ml/train:1.0"'}
    assert "failed" not in observed(backend, "run-1").first("Job")["status"]
    status = _status(backend, "run-1")
    assert status.state == TrainingPhase.PENDING
    assert status.reason == 'ImagePullBackOff: Back-off pulling image "registry.example.com/ml/train:1.0"'


def test_it_fails_a_job_past_its_active_deadline(backend):
    backend.apply(team_objects() + training("run-1", duration="5m", deadline_seconds=60), resource_kinds(), now=at(0))
    run_until(backend, 0, 60, step=10)
    job = observed(backend, "run-1").first("Job")
    (condition,) = job["status"]["conditions"]
    assert (condition["type"], condition["reason"]) == ("Failed", "DeadlineExceeded")
    assert observed(backend, "run-1").pods == []  # the Job controller deleted the running pod
    status = _status(backend, "run-1")
    assert (status.state, status.reason) == (TrainingPhase.FAILED,
                                             "DeadlineExceeded: Job was active longer than specified deadline")
    assert "Killing" in [e.reason for e in backend.events(ref("run-1"))]


def test_it_runs_a_pytorchjob_to_success(backend):
    backend.apply(team_objects() + training("dist", flavor=H100, gpus=8, workers=2, duration="2m"), resource_kinds(), now=at(0))
    backend.tick(at(0))
    backend.tick(at(10))
    job = observed(backend, "dist").first("PyTorchJob")
    types = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert types == {"Created": "True", "Running": "True"}
    assert job["status"]["replicaStatuses"] == {"Master": {"active": 1}, "Worker": {"active": 1}}
    status = _status(backend, "dist")
    assert (status.state, status.running_units) == (TrainingPhase.RUNNING, 16)
    backend.tick(at(130))
    status = _status(backend, "dist")
    assert status.state == TrainingPhase.SUCCEEDED
    assert all(c.in_use == 0 for c in backend.capacity())


def test_it_restarts_a_failing_pytorchjob_then_fails_it(backend):
    backend.apply(team_objects() + training("dist", flavor=H100, gpus=8, workers=2, duration="30s", outcome="oom",
                                            retries=1), resource_kinds(), now=at(0))
    backend.tick(at(0))
    backend.tick(at(45))  # first attempt OOMs: restart
    job = observed(backend, "dist").first("PyTorchJob")
    assert {c["type"] for c in job["status"]["conditions"]} >= {"Created", "Restarting"}
    assert _status(backend, "dist").state == TrainingPhase.RUNNING
    run_until(backend, 50, 120)
    status = _status(backend, "dist")
    assert status.state == TrainingPhase.FAILED
    assert status.reason.startswith("PyTorchJobFailed: PyTorchJob dist is failed because")
    assert "OOMKilled (exit 137)" in status.reason


def test_it_shows_unschedulable_as_the_pending_reason(backend):
    backend.apply(team_objects() + training("huge", flavor=H100, gpus=16), resource_kinds(), now=at(0))
    backend.tick(at(0))
    status = _status(backend, "huge")
    assert status.state == TrainingPhase.PENDING
    assert status.reason.startswith("Unschedulable: 0/8 nodes are available: 2 Insufficient nvidia.com/gpu")


def test_it_writes_training_logs_with_progress(backend):
    backend.apply(team_objects() + training("run-1", duration="10m"), resource_kinds(), now=at(0))
    backend.tick(at(0))
    [pod] = [p["metadata"]["name"] for p in backend.pods(ref("run-1"))]
    assert backend.logs(ref("run-1"), pod, now=at(5)) == []  # still pulling
    backend.tick(at(10))
    lines = backend.logs(ref("run-1"), pod, tail=5, now=at(310))
    assert len(lines) == 5
    # Katib's metric lines (name=value with step=), and every sixth one the progress of its 10 minutes' steps.
    assert lines[-2].startswith("2026-11-22T10:05:10Z INFO  step=600 loss=")
    assert lines[-1] == "2026-11-22T10:05:10Z INFO  SLIPWAY_PROGRESS step=600 total=1200"
    early = float(backend.logs(ref("run-1"), pod, tail=1, now=at(30))[0].split("loss=")[1].split(" ")[0])
    late = float(lines[-2].split("loss=")[1].split(" ")[0])
    assert late < early  # the loss goes down


@pytest.mark.parametrize("workers", [1, 2])
def test_training_logs_show_the_users_arguments_and_train_with_the_lr_given(backend, workers):
    backend.apply(team_objects() + training("run-1", duration="10m", workers=workers,
                                            args=("--lr", "1e-3", "--epochs", "3", "--note", "two words"))
                  + training("plain", duration="10m"), resource_kinds(), now=at(0))
    backend.tick(at(0))
    backend.tick(at(10))
    pod = sorted(p["metadata"]["name"] for p in backend.pods(ref("run-1")))[0]
    lines = backend.logs(ref("run-1"), pod, tail=None, now=at(60))
    assert "2026-11-22T10:00:10Z INFO  args: --lr 1e-3 --epochs 3 --note 'two words'" in lines
    assert "2026-11-22T10:00:10Z INFO  optimizer AdamW, learning rate 0.001 (--lr)" in lines
    steps = [line for line in lines if " step=" in line]
    assert steps and all(" lr=1.0e-03 " in line for line in steps)
    # No arguments: no args line, the default learning rate.
    [plain] = [p["metadata"]["name"] for p in backend.pods(ref("plain"))]
    plain_lines = backend.logs(ref("plain"), plain, tail=None, now=at(60))
    assert not any("args:" in line for line in plain_lines)
    assert all(" lr=3.0e-04 " in line for line in plain_lines if " step=" in line)


@pytest.mark.parametrize(("args", "lr"), [
    (("--lr", "3e-4"), 3e-4), (("--lr=5e-5",), 5e-5), (("--epochs", "3", "--learning-rate", "0.1"), 0.1),
    (("--lr",), None), (("--lr", "fast"), None), (("--lr", "nan"), None), (("--lr", "-1"), None), ((), None),
    (("--lrx", "1"), None),
])
def test_it_reads_the_learning_rate_from_the_arguments(args, lr):
    assert learning_rate(args) == lr


def test_a_running_pods_gpu_utilization_follows_its_phases(backend):
    """A 10-minute run loads (its first minute), trains, evaluates at a quarter, half and three quarters
    (24 s each) and, told so, goes idle; a pinned one stays where it is pinned whatever the phase."""
    backend.apply(team_objects() + training("run-1", duration="10m")
                  + training("stuck", duration="10m", extra_env=(("SLIPWAY_SIM_IDLE_AFTER", "4m"),))
                  + training("idle", duration="10m", extra_env=(("SLIPWAY_SIM_GPU_UTIL", "2"),)),
                  resource_kinds(), now=at(0))
    backend.tick(at(0))
    (pending,) = observed(backend, "run-1").pods
    assert "annotations" not in pending["metadata"]

    def util(name: str, seconds: float) -> int:
        backend.tick(at(seconds))
        (pod,) = observed(backend, name).pods
        return int(pod["metadata"]["annotations"]["sandbox.slipway.dev/gpu-utilization"])

    started = 10  # the image pulled (PULL_SECONDS)
    assert 14 <= util("run-1", started + 20) <= 22  # loading
    assert 81 <= util("run-1", started + 100) <= 95  # training
    assert 40 <= util("run-1", started + 160) <= 50  # evaluating (at a quarter: 150-174 s)
    assert 81 <= util("run-1", started + 200) <= 95
    assert util("stuck", started + 260) == 1  # idle from 4 minutes on
    assert util("idle", started + 270) == 2


def test_a_leak_fills_the_gpus_memory(backend):
    backend.apply(team_objects() + training("leaky", duration="1h", extra_env=(
        ("SLIPWAY_SIM_GPU_MEMORY_GB", "10"), ("SLIPWAY_SIM_GPU_MEMORY_LEAK", "8"))), resource_kinds(), now=at(0))
    backend.tick(at(0))
    readings = []
    for minutes in (1, 5, 10):
        backend.tick(at(10 + minutes * 60))
        workload = observed(backend, "leaky")
        readings.append(backend.gpu_telemetry([workload])[workload.address].gpus[0])
    assert [r.fb_used_mib for r in readings] == [18 * 1024, 50 * 1024, 81559]  # 10 GiB + 8 a minute, up to the H100's
    assert readings[-1].fb_free_mib == 0 and readings[-1].fb_used_fraction == 1.0
    assert readings[0].util_pct < 25  # still loading (the first 2 minutes of an hour)
    assert readings[1].temp_c > 60 and 450 < readings[1].power_w <= 700  # training on an H100


def test_it_ticks_idempotently_for_the_same_now(backend):
    backend.apply(team_objects() + training("run-1"), resource_kinds(), now=at(0))
    assert backend.tick(at(0)) is not None
    pods, events = SimPod.objects.count(), SimEvent.objects.count()
    assert backend.tick(at(0)) is None
    assert backend.tick(at(-5)) is None  # the past is already done
    assert (SimPod.objects.count(), SimEvent.objects.count()) == (pods, events)


def test_it_derives_durations_from_the_spec_or_the_name():
    assert parse_duration("90s") == 90
    assert parse_duration("5m") == 300
    assert parse_duration("1h") == 3600
    assert parse_duration("1h30m") == 5400
    assert parse_duration("soon") is None
    assert parse_duration("120") == 120
    # ASCII digits only, at most ten years: "²" passed isdigit() and "9" * 5000 or 99999999999999h overflowed.
    assert parse_duration("²") is None and parse_duration("٣h") is None
    assert parse_duration("9" * 5000) == parse_duration("99999999999999h") == MAX_SIM_SECONDS == 315_360_000
    assert 60 <= default_duration("run-1") <= 180
    assert default_duration("run-1") == default_duration("run-1")
    assert len({default_duration(f"run-{i}") for i in range(20)}) > 5


@pytest.mark.parametrize(("env", "state"), [
    ({"SLIPWAY_SIM_DURATION": "²"}, TrainingPhase.SUCCEEDED),  # not a duration: the default, 1-3 min
    ({"SLIPWAY_SIM_DURATION": "9" * 5000}, TrainingPhase.RUNNING),  # ten years
    ({"SLIPWAY_SIM_DURATION": "99999999999999h"}, TrainingPhase.RUNNING),
    ({"SLIPWAY_SIM_IDLE_AFTER": "²"}, TrainingPhase.SUCCEEDED),
    ({"SLIPWAY_SIM_PULL_SECONDS": "9" * 5000}, TrainingPhase.PENDING),  # held to an hour
    ({"SLIPWAY_SIM_CHECKPOINT_EVERY": "9" * 5000, "SLIPWAY_RESUME_FROM": "/ckpt/step-" + "9" * 5000},
     TrainingPhase.SUCCEEDED),
    ({"SLIPWAY_SIM_OUTCOME": "fail", "SLIPWAY_SIM_FAILED_ATTEMPTS": "9" * 5000}, TrainingPhase.FAILED),
    ({"SLIPWAY_SIM_GPU_UTIL": "nan"}, TrainingPhase.SUCCEEDED),
])
def test_no_knob_of_a_runs_env_breaks_the_clusters_apply_or_clock(backend, env, state):
    """A run's env is its owner's to write: these made the apply raise (int() of "²" or of 5,000 digits, a
    timedelta past the calendar), so no run of any team was applied or moved on that cluster."""
    extra = tuple(env.items())
    backend.apply(team_objects() + training("run-1", duration=None, retries=0, extra_env=extra), resource_kinds(),
                  now=at(0))
    for seconds in (0, 10, 200, 3000):
        backend.tick(at(seconds))
    assert _status(backend, "run-1").state == state
    for obj in SimObject.objects.all():  # NaN is no JSON: PostgreSQL's jsonb refuses the plan that holds one
        json.dumps(obj.plan, allow_nan=False)


def test_a_mig_slice_reports_its_engine_activity_and_its_own_memory(backend):
    backend.apply(team_objects(quotas=(("nvidia.com/mig-1g.10gb", 7),)) + training(
        "slice", flavor=MIG_1G, duration="10m", extra_env=(("SLIPWAY_SIM_GPU_MEMORY_GB", "4"),)), resource_kinds(),
        now=at(0))
    backend.tick(at(0))
    backend.tick(at(100))
    workload = observed(backend, "slice")
    (pod,) = workload.pods
    pod_gpus = exporter.pod_gpus(pod, GPU_UTILIZATION_ANNOTATION, GPU_MEMORY_ANNOTATION, GPU_ANNOTATION)
    published = {metric: value for _key, _gpu, metric, value in exporter.samples([pod_gpus], {})}
    assert exporter.UTIL not in published  # a MIG instance has no GPU_UTIL: its engine's active ratio
    util = int(pod["metadata"]["annotations"][GPU_UTILIZATION_ANNOTATION])
    assert published[exporter.ENGINE_ACTIVE] == util / 100
    (reading,) = backend.gpu_telemetry([workload])[workload.address].gpus
    assert reading.util_pct == util and 81 <= util <= 95
    assert (reading.fb_used_mib, reading.fb_total_mib) == (4096, 10240)  # its slice's memory, not the A100's
    assert reading.gpu.startswith("GPU-") and reading.gpu.rsplit("/", 1)[1].isdigit()
    assert reading.power_w < 400 / 7 + 1  # a seventh of the board
