"""Training-run actions racing the reconciler's admissions on PostgreSQL: no deadlock, nothing lost."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import QuotaHold
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import cancel_run, submit_run
from quotas import admission
from quotas.events import workload_admitted
from quotas.models import QueuedRequest
from tests.jobs.conftest import run_payload
from tests.threads import in_thread, paused_after, wait_until_lock_waiter
from workloads.cycle import reconcile as rec
from workloads.receivers import admitted_from_queue
from workloads.tasks import apply_workload

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_cancelling_a_queued_run_while_it_is_being_admitted_neither_deadlocks_nor_leaks(
        member, team, quota, published):
    first = submit_run(member, team, {k: v for k, v in run_payload(gpus_per_worker=8).items() if k != "team"})
    queued = submit_run(member, team, {k: v for k, v in run_payload(name="second", gpus_per_worker=8).items()
                                       if k != "team"})
    assert queued.state == RunState.QUEUED
    admission.release(first.ref)  # the first run ended: the queued one fits now

    # Hold the admission (the reconciler's admit_waiting) just before it marks the run admitted:
    # it has locked the team's quota, reserved the units and deleted the queue entry.
    inside, go = threading.Event(), threading.Event()

    def paused_admission(sender, **kwargs):
        inside.set()
        go.wait(10)
        admitted_from_queue(sender, **kwargs)

    workload_admitted.disconnect(dispatch_uid="workloads.workload_admitted")
    workload_admitted.connect(paused_admission, dispatch_uid="workloads.workload_admitted")
    errors: list[Exception] = []
    try:
        admitting = in_thread(lambda: admission.admit_waiting(team), errors)
        assert inside.wait(10)
        cancelling = in_thread(lambda: cancel_run(member, queued), errors)
        # The cancel takes the team's admission lock first, which the held admission has.
        assert '"portal_team"' in wait_until_lock_waiter(cancelling).query
        go.set()
        admitting.join(30)
        cancelling.join(30)
    finally:
        go.set()  # a failed assertion must not leave the held side waiting
        workload_admitted.disconnect(dispatch_uid="workloads.workload_admitted")
        workload_admitted.connect(admitted_from_queue, dispatch_uid="workloads.workload_admitted")

    assert errors == []
    queued.refresh_from_db()
    assert queued.state == RunState.CANCELLED
    assert not QuotaHold.objects.held().filter(ref=queued.ref).exists()
    assert not QueuedRequest.objects.filter(ref=queued.ref).exists()
    assert TrainingRun.objects.get(pk=first.pk).state == first.state


def test_cancelling_a_running_run_while_the_reconciler_bills_it_neither_deadlocks_nor_double_bills(
        member, team, quota, published, fake_backend):

    from billing.models import UsageRecord

    run = submit_run(member, team, {k: v for k, v in run_payload(gpus_per_worker=2).items() if k != "team"})
    assert apply_workload("run", run.pk) == "applied"
    run.refresh_from_db()
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=2)
    fake_backend.set_running(run.namespace, run.object_name, units=2, started=t0.strftime("%Y-%m-%dT%H:%M:%SZ"))
    rec.reconcile(fake_backend, now=t0 + timedelta(hours=1))  # billed up to t0 + 1 h

    # Hold the next cycle right after it has billed the run's interval in the ledger (its
    # transaction has updated the run's row first, and keeps it locked while held).
    inside, go = threading.Event(), threading.Event()

    def held_cycle():
        with paused_after('INSERT INTO "quotas_usagerecord"', inside, go):
            rec.reconcile(fake_backend)

    errors: list[Exception] = []
    cycle = in_thread(held_cycle, errors)
    assert inside.wait(10)
    try:
        cancelling = in_thread(lambda: cancel_run(member, run), errors)
        # The cancel's conditional state change waits for the run's row, which the cycle has.
        assert '"workloads_workload"' in wait_until_lock_waiter(cancelling).query
    finally:
        go.set()  # also when the assertion fails: the held cycle must not wait on
    cycle.join(30)
    cancelling.join(30)

    assert errors == []
    run.refresh_from_db()
    assert run.state == RunState.CANCELLED
    # Billed once, from the start to the cancel, and the run's cost is the ledger's.
    rows = UsageRecord.objects.filter(ref=run.ref)
    billed_hours = float(sum(r.gpu_hours for r in rows))
    assert billed_hours == pytest.approx(2 * (run.finished_at - t0).total_seconds() / 3600, abs=1e-6)
    assert run.cost_to_date == sum(r.cost for r in rows)
    assert not QuotaHold.objects.held().filter(ref=run.ref).exists()
