"""A preempted run with the checkpoint contract, end to end on the simulated cluster (issue #24).

Vision's run borrows nlp-platform's idle A100s with the contract; it reports a checkpoint with
its run token; nlp-platform takes its units back: the run's pods get the contract's grace, its
Job goes but its checkpoint claim stays; it queues again as attempt 2, comes back when the units
free up with SLIPWAY_ATTEMPT=2 and SLIPWAY_RESUME_FROM at the reported path, and once it ends on
its own the claim goes (and the token with the run).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from itertools import pairwise

import pytest
from rest_framework.test import APIClient

from billing.models import PreemptionEvent, UsageRecord
from cluster.backends.base import NOTICE_ANNOTATION
from cluster.errors import Invalid
from jobs.constants import RunState
from jobs.kind import TrainingKind
from jobs.models import TrainingRun
from sandbox.backend import SandboxBackend
from sandbox.models import SimObject
from tests.factories import cohort_pair, member_api, secret_values
from tests.jobs.conftest import post_share_run
from tests.workloads.timeline import INTERVAL, scripted_timeline

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 11, 24, 9, 0, 0, tzinfo=UTC)


@pytest.fixture
def timeline(published, monkeypatch, settings):
    settings.SLIPWAY_PREEMPTION_GRACE_SECONDS = 30
    return scripted_timeline(published, monkeypatch, settings, START)


def claim_exists(run_id: int) -> bool:
    return SimObject.objects.filter(resource_kind="PersistentVolumeClaim", name=f"run-{run_id}-checkpoints").exists()


def job_env(run_id: int) -> dict[str, str]:
    job = SimObject.objects.get(resource_kind="Job", name=f"run-{run_id}")
    return {e["name"]: e.get("value", "") for e in job.manifest["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_a_preempted_run_resumes_from_its_checkpoint_as_its_next_attempt(timeline, flavors, staff):
    cohort_pair(staff, reclaim="any", min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = member_api("vision", "alice")[0], member_api("nlp-platform", "noor")[0]
    post_share_run(alice, "vision", "own", "2h")
    borrowed = post_share_run(alice, "vision", "borrowed", "4m", checkpoint={"grace_seconds": 45})
    timeline.cycles(6)
    assert TrainingRun.objects.get(pk=borrowed).state == RunState.RUNNING
    assert claim_exists(borrowed)
    assert job_env(borrowed)["SLIPWAY_ATTEMPT"] == "1" and job_env(borrowed)["SLIPWAY_RESUME_FROM"] == ""

    # 1. The run reports a checkpoint with its own token.
    token = secret_values(f"run:{borrowed}")["SLIPWAY_RUN_TOKEN"]
    pods = APIClient()
    pods.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert pods.post(f"/api/v1/runs/{borrowed}/checkpoints/", {"step": 300, "path": "/slipway/checkpoints/s300.pt"},
                     format="json").status_code == 201

    # 2. nlp-platform takes its units back: the contract's grace, the Job gone, the claim kept.
    reported_at = TrainingRun.objects.get(pk=borrowed).last_checkpoint_at
    mine = post_share_run(noor, "nlp-platform", "short", "2m")
    noticed = False
    for _ in range(16):  # the simulated pods take the contract's 45 s grace to stop
        timeline.cycle()
        victim = TrainingRun.objects.get(pk=borrowed)
        if victim.preempting_since is not None:  # the deadline is on its pods before they go
            pods_now = timeline.backend.pods(victim.address)
            noticed |= any(NOTICE_ANNOTATION in (p["metadata"].get("annotations") or {}) for p in pods_now)
        if victim.state == RunState.QUEUED:
            break
    assert noticed
    run = TrainingRun.objects.get(pk=borrowed)
    # What it lost: the minutes since its step-300 report × 4 GPUs (within one reconcile interval).
    event = PreemptionEvent.objects.get(ref=run.ref)
    expected = Decimal((event.at - reported_at).total_seconds()) * 4 / 3600
    assert abs(event.lost_gpu_hours - expected) <= Decimal(INTERVAL * 4) / 3600
    assert "since its last checkpoint lost" in event.reason
    assert (run.state, run.preemptions, run.attempt) == (RunState.QUEUED, 1, 2)
    assert PreemptionEvent.objects.get(ref=run.ref).grace_seconds == 45
    assert not SimObject.objects.filter(resource_kind="Job", name=f"run-{borrowed}").exists()
    assert claim_exists(borrowed)
    body = alice.get(f"/api/v1/runs/{borrowed}/").json()
    assert body["attempt"] == 2 and body["last_checkpoint"]["path"] == "/slipway/checkpoints/s300.pt"

    # 3. The units free up: attempt 2 resumes from the reported checkpoint.
    for _ in range(60):
        timeline.cycle()
        if TrainingRun.objects.get(pk=borrowed).state == RunState.RUNNING:
            break
    assert TrainingRun.objects.get(pk=mine).state == RunState.SUCCEEDED
    assert TrainingRun.objects.get(pk=borrowed).state == RunState.RUNNING
    assert job_env(borrowed)["SLIPWAY_ATTEMPT"] == "2"
    assert job_env(borrowed)["SLIPWAY_RESUME_FROM"] == "/slipway/checkpoints/s300.pt"

    # 4. It ends on its own: its Job stays for the logs, its claim goes, its token dies.
    for _ in range(70):
        timeline.cycle()
        if TrainingRun.objects.get(pk=borrowed).is_final:
            break
    assert TrainingRun.objects.get(pk=borrowed).state == RunState.SUCCEEDED
    assert SimObject.objects.filter(resource_kind="Job", name=f"run-{borrowed}").exists()
    assert not claim_exists(borrowed)
    assert pods.post(f"/api/v1/runs/{borrowed}/checkpoints/", {"step": 301, "path": "/slipway/checkpoints/p"},
                     format="json").status_code == 401
    # Both attempts and the grace between were billed, no second of it twice.
    rows = list(UsageRecord.objects.filter(ref=f"run:{borrowed}").order_by("start"))
    assert rows and all(a.end <= b.start for a, b in pairwise(rows))


def test_a_checkpoint_line_in_the_log_counts_when_the_run_is_preempted(timeline, flavors, staff):
    """A run that prints ``SLIPWAY_CHECKPOINT step=… path=…`` instead of POSTing: the line is read
    once, when it is preempted, so its lost work counts from it and attempt 2 resumes from it (the
    simulated run logs "resuming from step k")."""
    cohort_pair(staff, reclaim="any", min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = member_api("vision", "alice")[0], member_api("nlp-platform", "noor")[0]
    post_share_run(alice, "vision", "own", "2h")
    response = alice.post("/api/v1/runs/", {
        "team": "vision", "name": "printer", "image": "registry.example.com/ml/trainer:1.4",
        "command": ["python", "train.py"], "flavor": "a100-80gb", "gpus_per_worker": 4,
        "env": {"SLIPWAY_SIM_DURATION": "30m", "SLIPWAY_SIM_CHECKPOINT_EVERY": "20s"},
        "checkpoint": {"grace_seconds": 10},
    }, format="json")
    assert response.status_code == 201, response.content
    borrowed = response.json()["id"]
    timeline.cycles(20)  # about 100 s: a few checkpoint lines printed
    run = TrainingRun.objects.get(pk=borrowed)
    assert run.state == RunState.RUNNING and run.last_checkpoint_path == ""  # nothing read every cycle

    post_share_run(noor, "nlp-platform", "mine", "2h")
    for _ in range(8):
        timeline.cycle()
        if TrainingRun.objects.get(pk=borrowed).state == RunState.QUEUED:
            break
    run = TrainingRun.objects.get(pk=borrowed)
    assert run.state == RunState.QUEUED
    assert run.last_checkpoint_step and run.last_checkpoint_path.endswith(f"step-{run.last_checkpoint_step}")
    event = PreemptionEvent.objects.get(ref=run.ref)
    # Dated by the line's time stamp, not when the portal read it: the seconds since it were lost.
    assert run.last_checkpoint_at < event.at and event.lost_gpu_hours > 0
    assert "of work since its last checkpoint lost" in event.reason


def claim_spec(run_id: int) -> dict:
    return SimObject.objects.get(resource_kind="PersistentVolumeClaim", name=f"run-{run_id}-checkpoints").manifest["spec"]


def test_a_changed_claim_size_setting_never_reaches_a_runs_existing_claim(timeline, flavors, staff, settings):
    """The size (and class) of a run's checkpoint claim is the one of its submission: attempt 2
    applies its claim again unchanged, though SLIPWAY_CHECKPOINT_STORAGE changed meanwhile
    (a smaller request would be refused by the API server, and the run fail)."""
    settings.SLIPWAY_CHECKPOINT_STORAGE = "50Gi"
    cohort_pair(staff, reclaim="any", min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = member_api("vision", "alice")[0], member_api("nlp-platform", "noor")[0]
    post_share_run(alice, "vision", "own", "2h")
    borrowed = post_share_run(alice, "vision", "borrowed", "10m", checkpoint={"grace_seconds": 10})
    timeline.cycles(6)
    assert TrainingRun.objects.get(pk=borrowed).state == RunState.RUNNING
    assert claim_spec(borrowed)["resources"]["requests"]["storage"] == "50Gi"

    settings.SLIPWAY_CHECKPOINT_STORAGE, settings.SLIPWAY_CHECKPOINT_STORAGE_CLASS = "20Gi", "fast-ssd"
    mine = post_share_run(noor, "nlp-platform", "short", "1m")
    for _ in range(60):  # preempted, then back as attempt 2 once nlp-platform's minute is over
        timeline.cycle()
        run = TrainingRun.objects.get(pk=borrowed)
        if run.attempt == 2 and run.state == RunState.RUNNING:
            break
    assert TrainingRun.objects.get(pk=mine).state == RunState.SUCCEEDED
    run = TrainingRun.objects.get(pk=borrowed)
    assert (run.state, run.attempt) == (RunState.RUNNING, 2), run.reason
    assert claim_spec(borrowed) == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "50Gi"}}}
    # A run submitted now gets the claim the settings say now.
    later = TrainingRun.objects.get(pk=post_share_run(alice, "vision", "later", "1m", checkpoint={}))
    claims = [o for o in TrainingKind().manifests(later) if o["kind"] == "PersistentVolumeClaim"]
    assert [c["spec"] for c in claims] == [{"accessModes": ["ReadWriteOnce"], "storageClassName": "fast-ssd",
                                            "resources": {"requests": {"storage": "20Gi"}}}]


class RefusingSandbox(SandboxBackend):
    """The sandbox, whose API server refuses every apply while ``refusing`` (an admission webhook, say)."""

    refusing = False

    def apply(self, objects, resources=(), **kwargs):
        if self.refusing:
            raise Invalid("admission webhook \"policy.example.com\" denied the request")
        return super().apply(objects, resources, **kwargs)


def preempted_between_attempts(timeline, staff, duration: str) -> tuple[APIClient, int]:
    """Vision's borrowed run with the contract, preempted by nlp-platform's run of ``duration`` and
    queued again: its claim stays, whatever the cycles do meanwhile."""
    cohort_pair(staff, reclaim="any", min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = member_api("vision", "alice")[0], member_api("nlp-platform", "noor")[0]
    post_share_run(alice, "vision", "own", "2h")
    borrowed = post_share_run(alice, "vision", "borrowed", "2h", checkpoint={"grace_seconds": 10})
    timeline.cycles(6)
    assert TrainingRun.objects.get(pk=borrowed).state == RunState.RUNNING and claim_exists(borrowed)
    post_share_run(noor, "nlp-platform", "mine", duration)
    for _ in range(8):
        timeline.cycle()
        if TrainingRun.objects.get(pk=borrowed).state == RunState.QUEUED:
            break
    timeline.cycles(3)
    run = TrainingRun.objects.get(pk=borrowed)
    assert (run.state, run.attempt) == (RunState.QUEUED, 2)
    assert claim_exists(borrowed)  # never deleted between attempts
    return alice, borrowed


def test_a_run_cancelled_between_attempts_loses_its_claim_even_when_the_delete_task_is_lost(timeline, flavors, staff):
    alice, borrowed = preempted_between_attempts(timeline, staff, "2h")
    assert alice.post(f"/api/v1/runs/{borrowed}/cancel/").status_code == 202
    timeline.published.clear()  # the delete task the cancel published is lost
    assert claim_exists(borrowed)
    report = timeline.cycle()
    assert report.kept_deleted == [f"run-{borrowed}"] and not claim_exists(borrowed)
    assert TrainingRun.objects.get(pk=borrowed).state == RunState.CANCELLED


@pytest.fixture
def refusing(published, monkeypatch, settings):
    settings.SLIPWAY_PREEMPTION_GRACE_SECONDS = 30
    return scripted_timeline(published, monkeypatch, settings, START, backend=RefusingSandbox())


def test_a_run_whose_next_attempt_is_refused_loses_its_claim(refusing, flavors, staff):
    timeline = refusing
    _alice, borrowed = preempted_between_attempts(timeline, staff, "1m")
    timeline.backend.refusing, timeline.apply_outcomes = True, ("failed",)
    for _ in range(30):  # nlp-platform's minute, then attempt 2's apply is refused: the run fails
        timeline.cycle()
        if TrainingRun.objects.get(pk=borrowed).is_final:
            break
    run = TrainingRun.objects.get(pk=borrowed)
    assert run.state == RunState.FAILED and "denied the request" in run.reason
    timeline.backend.refusing = False
    assert claim_exists(borrowed)
    report = timeline.cycle()
    assert report.kept_deleted == [f"run-{borrowed}"] and not claim_exists(borrowed)
    timeline.cycles(2)
    assert not claim_exists(borrowed) and TrainingRun.objects.get(pk=borrowed).state == RunState.FAILED


def test_a_run_whose_job_vanished_loses_its_claim(timeline, flavors, staff):
    """Someone deleted the run's Job behind Slipway's back: the run fails ("vanished") and its claim,
    which nothing else would delete, goes with the cycle that fails it."""
    cohort_pair(staff)
    alice = member_api("vision", "alice")[0]
    run_id = post_share_run(alice, "vision", "lonely", "2h", checkpoint={})
    timeline.cycles(6)
    assert TrainingRun.objects.get(pk=run_id).state == RunState.RUNNING and claim_exists(run_id)
    SimObject.objects.filter(resource_kind="Job", name=f"run-{run_id}").delete()
    for _ in range(6):
        report = timeline.cycle()
        if report.vanished:
            break
    assert report.vanished == [f"run:{run_id}"] and report.kept_deleted == [f"run-{run_id}"]
    assert TrainingRun.objects.get(pk=run_id).state == RunState.FAILED and not claim_exists(run_id)
