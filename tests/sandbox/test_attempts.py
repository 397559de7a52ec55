"""A retried Job in the sandbox: each attempt is a pod whose log stays readable, the run says
which attempt it is on, and ``SLIPWAY_SIM_FAILED_ATTEMPTS`` lets a run fail and then recover."""

from __future__ import annotations

import pytest

from cluster.errors import NotFound
from cluster.pods import log_sources
from jobs.status import TrainingPhase, training_status
from tests.sandbox.helpers import at, observed, ref, run_until, team_objects, training
from workloads.registry import resource_kinds

pytestmark = pytest.mark.django_db

RECOVERS = (("SLIPWAY_SIM_FAILED_ATTEMPTS", "1"),)


def test_it_fails_the_first_attempt_and_succeeds_on_the_retry(backend):
    backend.apply(team_objects() + training("run-1", duration="30s", outcome="fail", retries=2,
                                            extra_env=RECOVERS), resource_kinds(), now=at(0))
    # Attempt 1 fails at 40s (10s pull + 30s); the retry is created after a 10s back-off.
    run_until(backend, 0, 45)
    status = training_status(observed(backend, "run-1"))
    assert (status.state, status.reason) == (
        TrainingPhase.PENDING, "attempt 1 of 3 ended: Error (exit 1); retrying after a back-off")

    run_until(backend, 50, 70)
    status = training_status(observed(backend, "run-1"))
    assert (status.state, status.reason) == (TrainingPhase.RUNNING, "attempt 2 of 3; attempt 1 ended: Error (exit 1)")

    run_until(backend, 75, 120)
    status = training_status(observed(backend, "run-1"))
    assert status.state == TrainingPhase.SUCCEEDED


def test_it_keeps_every_attempts_log_readable(backend):
    backend.apply(team_objects() + training("run-1", duration="30s", outcome="fail", retries=2,
                                            extra_env=RECOVERS), resource_kinds(), now=at(0))
    run_until(backend, 0, 120)
    sources = log_sources(backend.pods(ref("run-1")))
    assert [s.label for s in sources] == ["attempt 2 (Completed (exit 0))", "attempt 1 (Error (exit 1))"]
    newest, first = (backend.logs(ref("run-1"), s.pod, tail=None) for s in sources)
    assert "training complete" in newest[-1]
    assert first[-1].endswith("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled system error")
    assert first[0].endswith("starting registry.example.com/ml/train:1.0")  # the whole log, from its start


def test_it_names_the_master_and_workers_of_a_pytorchjob(backend):
    backend.apply(team_objects() + training("dist", workers=3, duration="5m"), resource_kinds(), now=at(0))
    run_until(backend, 0, 20)
    sources = log_sources(backend.pods(ref("dist")))
    assert [s.label for s in sources] == ["master-0", "worker-0", "worker-1"]
    assert backend.logs(ref("dist"), sources[2].pod, tail=2)  # a worker's log, not only the master's


def test_it_refuses_a_pod_of_another_workload(backend):
    backend.apply(team_objects() + training("run-1") + training("run-2"), resource_kinds(), now=at(0))
    run_until(backend, 0, 20)
    other = backend.pods(ref("run-2"))[0]["metadata"]["name"]
    with pytest.raises(NotFound):
        backend.logs(ref("run-1"), other)
