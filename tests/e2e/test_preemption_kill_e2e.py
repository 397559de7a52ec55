"""Issue 24's proof with a real worker: a borrowed run with the checkpoint contract is preempted,
resumes from its step-40 checkpoint as attempt 2 and succeeds — and the same when the Celery
worker is SIGKILLed in the middle of the preemption, with the same outcome and no double charge.

The kill lands at one known point. The test holds the row locks of the victim's simulated pods
from a connection of its own (as a slow API server holds a PATCH), so the worker's reconcile
cycle, having written the preemption (its log row, ``preempting_since``, the reason) and
committed it and given the graceful delete, waits in :meth:`sandbox.backend.SandboxBackend.annotate_pods`
— the notice, which comes after the delete (workloads/cycle/preemption.py ``_stop_pods`` says why). The test
sees that wait in ``pg_stat_activity`` and then, killed or not, lets go. Killed, the notice is lost with the
worker (the next cycle gives it again, and the delete, with what is left of the grace), and its reconcile
lock (a Redis key) keeps the next worker's cycles out for the lock's lifetime (5 s for the test's
worker, ``SLIPWAY_RECONCILE_LOCK_SECONDS``); that is why the contract's grace here is longer than that
and a worker's restart together.

Both runs of the test assert the same outcome, against the figures the run itself gives:

* one preemption logged; the notice on the pods before the grace's deadline;
* attempt 2 starts with ``SLIPWAY_RESUME_FROM`` = the step-40 path (and the simulated run's log
  says "resuming from step 40") and succeeds;
* the ledger: no two rows overlap, none holds more GPU-time than it spans, and it bills attempt 1
  from its start to the cycle that requeued it — never before the grace's deadline, never after
  the test saw it queued — and attempt 2 from the cycle that saw it running — never before its
  pod started, never after the test saw it running — to its end. The bounds are what the test
  observed, not a guess at how late a cycle runs on a loaded machine (a fixed slack of one
  interval plus the rounding second failed a CI run by 14 ms);
* the lost work: the minutes from the step-40 report to the preemption × 4 GPUs × the price.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from itertools import pairwise

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from billing.ledger import LEDGER_PRECISION
from billing.models import PreemptionEvent, UsageRecord, flavor_price
from cluster.status import parse_time
from fleet.models import GpuFlavor
from jobs.checkpoint_contract import CHECKPOINT_DIR
from jobs.models import TrainingRun
from quotas.demo import seed_flavors
from sandbox.models import SimObject, SimPod
from tests.e2e.conftest import own_connection, wait_for, waiting_for
from tests.factories import cohort_pair, member_api, secret_values
from tests.jobs.conftest import post_share_run

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(300)]

#: The worker's reconcile interval (tests/e2e/conftest.py WorkerProcess) and the contract's grace.
INTERVAL = 0.5
GRACE = 20
#: A checkpoint every 1,000 s and a training line (20 steps) every 1,000 s: no checkpoint line is printed in
#: attempt 1's minute, and step 40 is two lines, 2,000 s of work (sandbox.checkpoints: a checkpoint's step
#: is the training step), so attempt 2, resumed from step 40, has 12 of its 2,012 s left to run.
EVERY, LOG_EVERY, DURATION = "1000s", "1000", "2012s"
STEP_40 = f"{CHECKPOINT_DIR}/step-40"
#: The ledger's rounding (gpu_hours to 10 places) and the database's microseconds, in GPU-seconds.
EPSILON = timedelta(milliseconds=10)
#: What one row's GPU-hours may exceed its exact span by: half of LEDGER_PRECISION per interval
#: added to it, for up to 20 intervals (a run here closes one to three segments per row).
ROUNDING = LEDGER_PRECISION * 10


class PodLocks:
    """The row locks of a workload's live simulated pods, held from a connection of the test's own."""

    def __init__(self, workload: str) -> None:
        self.conn, self.pid = own_connection()
        rows = self.conn.execute("SELECT id FROM sandbox_simpod WHERE workload = %s AND active FOR UPDATE",
                                 [workload]).fetchall()
        assert rows, f"{workload} has no live pods to hold"

    def waiting(self) -> list[tuple[int, str]]:
        """``(pid, query)`` of the sessions waiting for these locks."""
        return waiting_for(self.pid)

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


def session_alive(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone() is not None


def state(client: APIClient, run_id: int) -> dict:
    return client.get(f"/api/v1/runs/{run_id}/").json()


def billed_seconds(ref: str) -> float:
    """Seconds of the run's 4 GPUs its ledger rows hold."""
    return float(sum(r.gpu_hours for r in UsageRecord.objects.filter(ref=ref)) * 3600 / 4)


def job_env(run_id: int) -> dict[str, str]:
    job = SimObject.objects.get(resource_kind="Job", name=f"run-{run_id}")
    return {e["name"]: e.get("value", "") for e in job.manifest["spec"]["template"]["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("killed", [False, True], ids=["worker-lives", "worker-sigkilled"])
def test_a_preempted_run_resumes_from_step_40_and_is_billed_once(worker, staff, killed):
    seed_flavors()
    cohort_pair(staff, reclaim="any", min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = member_api("vision", "alice")[0], member_api("nlp-platform", "noor")[0]

    # 1. Vision runs 4 A100s of its own and borrows nlp-platform's 4 for a run with the contract.
    post_share_run(alice, "vision", "own", "30m")
    borrowed = post_share_run(alice, "vision", "borrowed", checkpoint={"grace_seconds": GRACE},
                              env={"SLIPWAY_SIM_DURATION": DURATION, "SLIPWAY_SIM_CHECKPOINT_EVERY": EVERY,
                                   "SLIPWAY_SIM_LOG_EVERY": LOG_EVERY})
    workload, ref = f"run-{borrowed}", f"run:{borrowed}"
    pod = wait_for(lambda: SimPod.objects.filter(workload=workload, active=True, phase="Running").first(),
                   timeout=60, what="the borrowed run's pod to run")
    wait_for(lambda: state(alice, borrowed)["state"] == "running", timeout=30, what="the portal to see it running")
    assert state(alice, borrowed)["borrowed_units"] == 4
    first_start = pod.started_at

    # 2. It reports step 40 with its run token.
    pods = APIClient()
    pods.credentials(HTTP_AUTHORIZATION=f"Bearer {secret_values(ref)['SLIPWAY_RUN_TOKEN']}")
    report = pods.post(f"/api/v1/runs/{borrowed}/checkpoints/", {"step": 40, "path": STEP_40}, format="json")
    assert report.status_code == 201, report.content
    reported_at = state(alice, borrowed)["last_checkpoint"]["at"]

    # 3. nlp-platform submits: the next cycle preempts the run and stops at its notice.
    locks = PodLocks(workload)
    try:
        mine = post_share_run(noor, "nlp-platform", "mine", "3s")
        waiting = wait_for(lambda: PreemptionEvent.objects.filter(ref=ref).exists() and locks.waiting(),
                           timeout=30, interval=0.02, what="the cycle to wait at the preemption notice")
        (blocked_pid, query), = waiting
        assert "sandbox_simpod" in query and "FOR UPDATE" in query, query  # annotate_pods, after the commit
        if killed:
            worker.kill()
    finally:
        locks.release()
    if killed:
        # The killed worker's database session goes once it finds no one to answer.
        wait_for(lambda: not session_alive(blocked_pid), timeout=30, what="the killed worker's session to end")
        worker.start()
    event = PreemptionEvent.objects.get(ref=ref)
    deadline = event.at + timedelta(seconds=GRACE)

    # 4. The notice reaches the pods before the deadline; once they are gone the run queues again.
    noticed = wait_for(lambda: SimPod.objects.filter(workload=workload, notice_at__isnull=False)
                       .values_list("notice_at", flat=True).first(), timeout=GRACE, what="the notice on the pods")
    assert noticed < deadline
    body = wait_for(lambda: (b := state(alice, borrowed))["state"] == "queued" and b, timeout=GRACE + 30,
                    what="the preempted run to queue again")
    queued_seen = timezone.now()
    # Attempt 1's segment closed when the run was requeued, in that move's transaction; attempt 2
    # writes no ledger row before its own segment closes.
    first_attempt = billed_seconds(ref)
    assert (body["attempt"], body["preemptions"]) == (2, 1)
    assert body["reason"].startswith("preempted: team nlp-platform reclaimed 4\u00d7 a100-80gb of its quota")

    # 5. The units come back once nlp-platform's short run is done: attempt 2 resumes from step 40.
    wait_for(lambda: (b := state(alice, borrowed))["state"] == "running" and b["attempt"] == 2, timeout=120,
             interval=0.05, what="attempt 2 to run")
    running_seen = timezone.now()
    body = wait_for(lambda: (b := state(alice, borrowed))["state"] in ("succeeded", "failed") and b, timeout=120,
                    what="the run to end")
    assert body["state"] == "succeeded", (body, worker.logs())
    assert state(noor, mine)["state"] == "succeeded"
    env = job_env(borrowed)
    assert (env["SLIPWAY_ATTEMPT"], env["SLIPWAY_RESUME_FROM"]) == ("2", STEP_40)
    log = alice.get(f"/api/v1/runs/{borrowed}/logs/").json()
    assert any(f"resuming from step 40 ({STEP_40})" in line for line in log["lines"]), log["lines"][:3]
    second = SimPod.objects.get(workload=workload)  # attempt 1's pod went with its Job

    # 6. One preemption, billed once: attempt 1 through the grace, attempt 2 from start to finish.
    log = alice.get(f"/api/v1/runs/{borrowed}/preemptions/").json()
    assert len(log) == 1 and PreemptionEvent.objects.filter(ref=ref).count() == 1
    rows = list(UsageRecord.objects.filter(ref=ref).order_by("start"))
    assert rows and all(a.end <= b.start for a, b in pairwise(rows))
    # A row holds no more GPU-time than it spans, give or take the ledger's rounding: each interval added
    # to it is rounded half-up to LEDGER_PRECISION (so up to half of it over the exact figure). When
    # the attempts fall in different ledger hours a row spans exactly its intervals and that half shows.
    # A double charge would be over by whole seconds (1e-3 GPU-h), far past ROUNDING.
    assert all(r.gpu_hours <= Decimal((r.end - r.start).total_seconds()) * r.units / 3600 + ROUNDING for r in rows)
    run = TrainingRun.objects.get(pk=borrowed)
    # Billing opened at attempt 1's start as its status gave it (whole seconds, as Kubernetes writes them).
    assert run.started_at == first_start.replace(microsecond=0)
    closed = run.started_at + timedelta(seconds=first_attempt)  # where attempt 1's billing stopped
    assert deadline - EPSILON <= closed <= queued_seen, (closed, deadline, queued_seen)
    opened = run.finished_at - timedelta(seconds=billed_seconds(ref) - first_attempt)  # where attempt 2's began
    assert second.started_at - EPSILON <= opened <= running_seen, (opened, second.started_at, running_seen)
    assert run.finished_at == second.finished_at.replace(microsecond=0)  # and closed at its status's end
    assert sum(r.cost for r in rows) == run.billed_cost

    # 7. What it lost: the minutes from its step-40 report to the preemption × 4 GPUs × the price.
    price = flavor_price(GpuFlavor.objects.get(name="a100-80gb"))
    lost = Decimal((event.at - parse_time(reported_at)).total_seconds()) / 3600 * 4
    assert abs(event.lost_gpu_hours - lost) <= Decimal(INTERVAL * 4) / 3600
    assert abs(event.lost_cost - lost * price) <= Decimal(INTERVAL * 4) / 3600 * price
    assert "since its last checkpoint lost" in event.reason
    assert abs(Decimal(log[0]["lost_gpu_hours"]) - event.lost_gpu_hours) <= Decimal("0.0001")  # shown to 4 places
