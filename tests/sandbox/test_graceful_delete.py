"""Preemption that loses no work, on the simulated cluster: a delete with a grace period keeps the
pods (terminating, still holding their quota) until its end; the notice annotation reaches the
pods, and one that honours it checkpoints and exits early, which ends the delete early too."""

from __future__ import annotations

import pytest

from tests.sandbox.helpers import at, observed, ref, run_until, team_objects, training
from workloads.registry import resource_kinds

pytestmark = pytest.mark.django_db

NOTICE = "slipway.dev/notice"
HONOURS = (("SLIPWAY_SIM_CHECKPOINT_EVERY", "20s"), ("SLIPWAY_SIM_HONOUR_NOTICE", "1"))


def _gpus_in_use(backend) -> int:
    return sum(row.in_use for row in backend.capacity())


def test_a_grace_period_keeps_the_pods_running_until_its_end(backend):
    backend.apply(team_objects(quotas=(("nvidia.com/gpu", 8),)) + training("run-1", duration="300s"),
                  resource_kinds(), now=at(0))
    run_until(backend, 0, 30)
    assert backend.delete(ref("run-1"), resource_kinds(), grace_seconds=30, now=at(32)) == 1

    run_until(backend, 35, 60)
    seen = observed(backend, "run-1")
    assert seen is not None  # the reconciler still sees the workload, so the quota stays held
    job = seen.first("Job")
    assert (job["metadata"]["deletionTimestamp"], job["metadata"]["deletionGracePeriodSeconds"]) == (
        "2026-11-22T10:01:02Z", 30)
    [pod] = seen.pods
    assert pod["status"]["phase"] == "Running"
    assert pod["metadata"]["deletionTimestamp"] == "2026-11-22T10:01:02Z"
    assert _gpus_in_use(backend) == 1
    assert any(e.reason == "Killing" for e in backend.events(ref("run-1")))

    backend.tick(at(62))  # the deadline: the objects go, and their pods with them
    assert observed(backend, "run-1") is None
    assert backend.pods(ref("run-1")) == []
    assert _gpus_in_use(backend) == 0


def test_no_grace_deletes_at_once_and_a_second_delete_may_shorten_the_grace(backend):
    backend.apply(team_objects() + training("run-1", duration="300s") + training("run-2", duration="300s"),
                  resource_kinds(), now=at(0))
    run_until(backend, 0, 30)
    backend.delete(ref("run-1"), resource_kinds(), grace_seconds=0, now=at(31))
    assert backend.pods(ref("run-1")) == []

    backend.delete(ref("run-2"), resource_kinds(), grace_seconds=60, now=at(31))
    backend.delete(ref("run-2"), resource_kinds(), grace_seconds=600, now=at(32))  # cannot lengthen it
    backend.delete(ref("run-2"), resource_kinds(), grace_seconds=10, now=at(33))
    assert observed(backend, "run-2").first("Job")["metadata"]["deletionTimestamp"] == "2026-11-22T10:00:43Z"
    run_until(backend, 35, 40)
    assert backend.pods(ref("run-2")) != []
    backend.tick(at(45))
    assert backend.pods(ref("run-2")) == []


def test_a_workload_without_live_pods_goes_at_once_whatever_the_grace(backend):
    backend.apply(team_objects() + training("run-1", duration="20s"), resource_kinds(), now=at(0))
    run_until(backend, 0, 40)  # finished at 30s
    assert backend.delete(ref("run-1"), resource_kinds(), grace_seconds=60, now=at(41)) == 1
    assert backend.pods(ref("run-1")) == []


def test_the_notice_reaches_the_pods_and_a_pod_that_honours_it_checkpoints_and_exits(backend):
    backend.apply(team_objects() + training("run-1", duration="300s", extra_env=HONOURS), resource_kinds(), now=at(0))
    run_until(backend, 0, 45)
    assert backend.annotate_pods(ref("run-1"), {NOTICE: "2026-11-22T10:01:47Z"}, now=at(47)) == 1
    [pod] = observed(backend, "run-1").pods
    assert pod["metadata"]["annotations"][NOTICE] == "2026-11-22T10:01:47Z"
    backend.delete(ref("run-1"), resource_kinds(), grace_seconds=60, now=at(47))

    # It saw the notice at 37s of run time: a last checkpoint (step 80, its 37 s rounded up to the next
    # training line of 20 steps every 10 s: the steps its metric lines count), then exit.
    backend.tick(at(50))
    [pod] = observed(backend, "run-1").pods
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (pod["status"]["phase"], terminated["exitCode"], terminated["finishedAt"]) == (
        "Failed", 143, "2026-11-22T10:00:47Z")
    lines = backend.logs(ref("run-1"), pod["metadata"]["name"], tail=None)
    assert [line for line in lines if "SLIPWAY_CHECKPOINT" in line] == [
        "2026-11-22T10:00:30Z INFO  SLIPWAY_CHECKPOINT step=40 path=/ckpt/step-40",
        "2026-11-22T10:00:47Z INFO  SLIPWAY_CHECKPOINT step=80 path=/ckpt/step-80"]
    assert lines[-1].endswith("preemption notice received: checkpoint saved, exiting")
    assert _gpus_in_use(backend) == 0

    backend.tick(at(55))  # its pods have exited: the delete is over long before the grace's end (107s)
    assert observed(backend, "run-1") is None


def test_a_pod_that_ignores_the_notice_runs_until_the_deadline(backend):
    backend.apply(team_objects() + training("run-1", duration="300s",
                                            extra_env=(("SLIPWAY_SIM_CHECKPOINT_EVERY", "20s"),)),
                  resource_kinds(), now=at(0))
    run_until(backend, 0, 45)
    backend.annotate_pods(ref("run-1"), {NOTICE: "2026-11-22T10:01:47Z"}, now=at(47))
    backend.delete(ref("run-1"), resource_kinds(), grace_seconds=60, now=at(47))
    run_until(backend, 50, 105)
    assert [p["status"]["phase"] for p in observed(backend, "run-1").pods] == ["Running"]
    backend.tick(at(107))
    assert observed(backend, "run-1") is None


def test_annotations_merge_and_none_removes_one(backend):
    backend.apply(team_objects() + training("run-1", duration="300s"), resource_kinds(), now=at(0))
    run_until(backend, 0, 20)
    backend.annotate_pods(ref("run-1"), {NOTICE: "soon", "example.com/a": "1"}, now=at(21))
    assert backend.annotate_pods(ref("run-1"), {"example.com/a": None}, now=at(22)) == 1
    annotations = backend.pods(ref("run-1"))[0]["metadata"]["annotations"]
    assert annotations[NOTICE] == "soon" and "example.com/a" not in annotations
    assert backend.annotate_pods(ref("nothing"), {NOTICE: "soon"}) == 0
