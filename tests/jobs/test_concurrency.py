"""Training-run actions racing the reconciler's admissions on PostgreSQL: no deadlock, nothing lost."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import cancel_run, submit_run
from jobs.signals import run_admitted
from quotas import admission
from quotas.models import QueuedRequest, Reservation
from quotas.signals import workload_admitted
from tests.jobs.conftest import run_payload

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def in_thread(target, errors: list) -> threading.Thread:
    def body():
        try:
            target()
        except Exception as exc:  # the test asserts there were none
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


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

    def paused_run_admitted(sender, **kwargs):
        inside.set()
        go.wait(10)
        run_admitted(sender, **kwargs)

    workload_admitted.disconnect(dispatch_uid="jobs.run_admitted")
    workload_admitted.connect(paused_run_admitted, dispatch_uid="jobs.run_admitted")
    errors: list[Exception] = []
    try:
        admitting = in_thread(lambda: admission.admit_waiting(team), errors)
        assert inside.wait(10)
        cancelling = in_thread(lambda: cancel_run(member, queued), errors)
        time.sleep(0.5)  # let the cancel get as far as it can while the admission is held
        go.set()
        admitting.join(30)
        cancelling.join(30)
    finally:
        workload_admitted.disconnect(dispatch_uid="jobs.run_admitted")
        workload_admitted.connect(run_admitted, dispatch_uid="jobs.run_admitted")

    assert errors == []
    queued.refresh_from_db()
    assert queued.state == RunState.CANCELLED
    assert not Reservation.objects.active().filter(ref=queued.ref).exists()
    assert not QueuedRequest.objects.filter(ref=queued.ref).exists()
    assert TrainingRun.objects.get(pk=first.pk).state == first.state
