"""Simulated checkpointing (``SLIPWAY_SIM_CHECKPOINT_EVERY``): checkpoint lines at the pod's run
times, and a run resumed from ``step-<k>`` that says so, counts on from k and finishes sooner."""

from __future__ import annotations

import pytest

from jobs.status import TrainingPhase, training_status
from tests.sandbox.helpers import at, observed, ref, run_until, team_objects, training
from workloads.registry import resource_kinds

pytestmark = pytest.mark.django_db

EVERY_20S = (("SLIPWAY_SIM_CHECKPOINT_EVERY", "20s"), ("SLIPWAY_CHECKPOINT_DIR", "/mnt/ckpt/run-1"))


def _pod(backend, workload: str = "run-1") -> dict:
    return backend.pods(ref(workload))[0]


def _checkpoints(lines: list[str]) -> list[str]:
    """The checkpoint lines, without the logger's time stamp before each."""
    return [line[line.index("SLIPWAY_CHECKPOINT "):] for line in lines if "SLIPWAY_CHECKPOINT " in line]


def test_it_prints_a_checkpoint_line_every_n_seconds_of_run_time(backend):
    backend.apply(team_objects() + training("run-1", duration="100s", extra_env=EVERY_20S), resource_kinds(),
                  now=at(0))
    run_until(backend, 0, 55)  # started at 10s (image pull): 45s of run time
    name = _pod(backend)["metadata"]["name"]
    lines = backend.logs(ref("run-1"), name, tail=None, now=at(55))

    # Its step is the training step it reached (issue 46: one scale with the metric and progress lines):
    # a line of 20 steps every 10 s, so 20 s of work is step 40.
    assert _checkpoints(lines) == ["SLIPWAY_CHECKPOINT step=40 path=/mnt/ckpt/run-1/step-40",
                                   "SLIPWAY_CHECKPOINT step=80 path=/mnt/ckpt/run-1/step-80"]
    # Each follows the training line of its own second, stamped with it: 20s of run time is 10:00:30.
    first = lines.index("2026-11-22T10:00:30Z INFO  SLIPWAY_CHECKPOINT step=40 path=/mnt/ckpt/run-1/step-40")
    assert lines[first - 1].startswith("2026-11-22T10:00:30Z INFO  step=40 ")
    assert not any("resuming" in line for line in lines)
    # Run time 40s: the newest line is the checkpoint just saved; a tail of one shows it.
    assert backend.logs(ref("run-1"), name, tail=1, now=at(50)) == [
        "2026-11-22T10:00:50Z INFO  SLIPWAY_CHECKPOINT step=80 path=/mnt/ckpt/run-1/step-80"]
    assert backend.logs(ref("run-1"), name, tail=1, now=at(29)) != []  # before the first: progress only
    assert _checkpoints(backend.logs(ref("run-1"), name, tail=None, now=at(29))) == []


def test_it_checkpoints_to_the_default_directory_and_not_without_the_knob(backend):
    backend.apply(team_objects() + training("run-1", duration="100s",
                                            extra_env=(("SLIPWAY_SIM_CHECKPOINT_EVERY", "30"),))
                  + training("run-2", duration="100s"), resource_kinds(), now=at(0))
    run_until(backend, 0, 45)
    assert _checkpoints(backend.logs(ref("run-1"), _pod(backend)["metadata"]["name"], tail=None)) == [
        "SLIPWAY_CHECKPOINT step=60 path=/ckpt/step-60"]
    assert _checkpoints(backend.logs(ref("run-2"), _pod(backend, "run-2")["metadata"]["name"], tail=None)) == []


def test_a_resumed_run_says_so_counts_on_and_finishes_sooner(backend):
    resume = (*EVERY_20S, ("SLIPWAY_RESUME_FROM", "/mnt/ckpt/run-1/step-120"))
    backend.apply(team_objects() + training("run-1", duration="100s", extra_env=resume), resource_kinds(), now=at(0))
    run_until(backend, 0, 60)

    # Step 120 is 6 lines of 10 s: 60 s were done, 40 s of the 100 s are left, from 10s to 50s.
    assert training_status(observed(backend, "run-1")).state == TrainingPhase.SUCCEEDED
    pod = _pod(backend)
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] == "2026-11-22T10:00:50Z"
    lines = backend.logs(ref("run-1"), pod["metadata"]["name"], tail=None)
    assert "resuming from step 120 (/mnt/ckpt/run-1/step-120)" in lines[0]
    assert _checkpoints(lines) == ["SLIPWAY_CHECKPOINT step=160 path=/mnt/ckpt/run-1/step-160",
                                   "SLIPWAY_CHECKPOINT step=200 path=/mnt/ckpt/run-1/step-200"]
    # It says at once where its progress is (issue 46), then its training lines count on from the same
    # step: the checkpoint's step is a training step.
    assert lines[1].endswith("INFO  SLIPWAY_PROGRESS step=120 total=200")
    assert any(line.endswith("INFO  SLIPWAY_PROGRESS step=160 total=200") or " step=160 loss=" in line
               for line in lines)
    assert "training complete" in lines[-1]


def test_the_same_run_from_scratch_runs_its_whole_duration(backend):
    backend.apply(team_objects() + training("run-1", duration="100s", extra_env=EVERY_20S), resource_kinds(), now=at(0))
    run_until(backend, 0, 60)
    assert training_status(observed(backend, "run-1")).state == TrainingPhase.RUNNING
    run_until(backend, 65, 110)
    assert training_status(observed(backend, "run-1")).state == TrainingPhase.SUCCEEDED


def test_only_the_master_of_a_pytorchjob_prints_checkpoints(backend):
    backend.apply(team_objects() + training("dist", workers=2, duration="5m", extra_env=EVERY_20S), resource_kinds(),
                  now=at(0))
    run_until(backend, 0, 35)
    logs = {p["metadata"]["name"]: backend.logs(ref("dist"), p["metadata"]["name"], tail=None)
            for p in backend.pods(ref("dist"))}
    assert {name: len(_checkpoints(lines)) for name, lines in logs.items()} == {"dist-master-0": 1, "dist-worker-0": 0}
