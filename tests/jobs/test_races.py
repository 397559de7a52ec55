"""Races of training-run actions, the create task and the reconciler (found in review).

The first interleaving is played in one thread: the fake cluster's ``apply`` runs a reconcile
cycle before it stores the objects, which is exactly what a cycle running while a worker
waits on a slow API server does (the create task holds no transaction while it applies).
The second needs real row locks: PostgreSQL, one thread per transaction, one of them paused.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import QuotaHold
from fleet.models import GpuFlavor
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import cancel_run, submit_run
from quotas import admission
from quotas.models import QueuedRequest, TeamQuota
from tests.jobs.conftest import run_payload
from tests.threads import in_thread, paused_after, wait_until_lock_waiter
from workloads.constants import MAX_APPLY_ATTEMPTS
from workloads.cycle import reconcile as rec
from workloads.tasks import apply_workload, delete_workload

pytestmark = pytest.mark.django_db
NS = "team-ml-research"


def test_a_run_failed_while_its_last_apply_was_in_flight_leaves_no_job_on_the_cluster(
        member, team, quota, published, fake_backend, monkeypatch):
    data = run_payload()
    data.pop("team")
    run = submit_run(member, team, data)
    # The reconciler re-drove it nine times already; this is the worker's last attempt.
    TrainingRun.objects.filter(pk=run.pk).update(apply_attempts=MAX_APPLY_ATTEMPTS - 1)

    real_apply = fake_backend.apply

    def slow_apply(objects, resources=()):
        # The API server is slow: a cycle runs more than one period after the attempt began,
        # sees no object yet, and gives up on the run (fails it, releases its quota).
        monkeypatch.setattr(fake_backend, "apply", real_apply)
        rec.reconcile(fake_backend, now=timezone.now() + timedelta(minutes=1))
        assert TrainingRun.objects.get(pk=run.pk).state == RunState.FAILED
        return real_apply(objects, resources)  # ...and then the apply goes through

    monkeypatch.setattr(fake_backend, "apply", slow_apply)
    assert apply_workload("run", run.pk) == "deleted"
    # The task has the objects it just applied deleted (by the delete task, with its retries).
    assert ("workloads.tasks.delete_workload", ("run", run.pk)) in published
    delete_workload("run", run.pk)

    rec.reconcile(fake_backend)
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert not QuotaHold.objects.held().filter(ref=run.ref).exists()  # quota given back...
    # ...so the Job must not stay on the cluster, running unreserved and unbilled
    # (the reconciler no longer follows a final run and keeps failed runs' objects for their logs).
    assert not any(kind == "Job" for (_ns, kind, _name) in fake_backend.objects)


# -- on PostgreSQL: the team's admission lock ---------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_cancelling_a_queued_run_of_a_team_without_quota_rows_does_not_deadlock_with_its_admission(
        member, team, quota, published):
    """The team's admission lock must exist even when the team has no quota rows.

    The design keeps queued work queued when its quota is removed, "so an admin can fix the
    quota and the work continues". When the admin adds the quota back while a member cancels the
    queued run, the cancel and the admission the new quota triggers must still serialise: the
    lock is the Team row (it was the quota rows, of which there were none to lock).
    """
    l4 = {k: v for k, v in run_payload(flavor="l4", gpus_per_worker=1, workers=2).items() if k != "team"}
    first = submit_run(member, team, l4)
    queued = submit_run(member, team, {**l4, "name": "second"})
    assert queued.state == RunState.QUEUED
    admission.release(first.ref)  # the first run ended: the queued one would fit...
    TeamQuota.objects.filter(team=team).delete()  # ...but staff had removed the team's quotas

    # Hold the cancel after it moved the run to cancelled (it bills next, then releases), with
    # the team's lock and the run's row held.
    inside, go = threading.Event(), threading.Event()

    def held_cancel():
        with paused_after('UPDATE "workloads_workload" SET "state"', inside, go):
            cancel_run(member, queued)

    errors: list[Exception] = []
    cancelling = in_thread(held_cancel, errors)
    assert inside.wait(10)
    # Staff give the quota back; the admission it triggers (schedule_team_sync, or the next
    # reconcile) waits for the team's lock, which the cancel holds.
    TeamQuota.objects.create(team=team, flavor=GpuFlavor.objects.get(name="l4"), limit=2)
    try:
        admitting = in_thread(lambda: admission.admit_waiting(team), errors)
        assert '"portal_team"' in wait_until_lock_waiter(admitting).query
    finally:
        go.set()  # the cancel releases: it deletes the queue entry the admission deleted
    cancelling.join(30)
    admitting.join(30)

    assert errors == []  # it was: DeadlockDetected in one of the two
    queued.refresh_from_db()
    assert queued.state == RunState.CANCELLED
    assert not QuotaHold.objects.held().filter(ref=queued.ref).exists()
    assert not QueuedRequest.objects.filter(ref=queued.ref).exists()
