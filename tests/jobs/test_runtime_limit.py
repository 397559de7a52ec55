"""A runtime limit counts every attempt (docs/glossary.md "Runtime limit"), as Kueue's
``maximumExecutionTimeSeconds`` does: a run queued again after a preemption or an interruption gets what its
earlier attempts left of ``max_runtime_minutes`` as its next Job's ``activeDeadlineSeconds``, admission commits
that much, and a run whose attempts ran it all fails rather than starting over."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.apps import apps as django_apps
from django.utils import timezone

from billing.models import QuotaHold
from jobs.constants import RunState
from jobs.kind import _deadline_seconds
from jobs.manifests import build_training
from jobs.models import TrainingRun
from jobs.services import submit_run
from notifications.models import Event
from quotas.models import QueuedRequest
from tests.cluster import samples
from tests.jobs.conftest import run_payload
from tests.jobs.test_reconcile import NS, applied, iso
from tests.jobs.test_spot_interruption import disrupt
from workloads import lifecycle
from workloads.cycle import reconcile as rec
from workloads.models import Attempt, ReasonCode
from workloads.registry import kind_for
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db

RAN = timedelta(minutes=12)  # how long the first attempt's pods ran before the provider took the node


def deadline(objects: list[dict]) -> int | None:
    """The ``activeDeadlineSeconds`` of a run's main object among ``objects`` (a Job here)."""
    [job] = [o for o in objects if o["kind"] == "Job"]
    return job["spec"].get("activeDeadlineSeconds")


@pytest.fixture
def interrupted(member, team, quota, published, fake_backend):
    """A spot run with a runtime limit of ``minutes``, its pods running for :data:`RAN`, then its node reclaimed:
    the cycle that sees its objects gone decides what becomes of it."""
    def make(minutes: int) -> TrainingRun:
        data = {k: v for k, v in run_payload(spot=True, max_runtime_minutes=minutes).items() if k != "team"}
        run = applied(submit_run(member, team, data), fake_backend)
        assert deadline(fake_backend.applied[-1]) == minutes * 60  # a first attempt gets its whole limit
        t0 = timezone.now().replace(microsecond=0) - RAN
        fake_backend.set_running(NS, run.object_name, units=2, started=iso(t0))
        rec.reconcile(fake_backend, now=t0 + timedelta(minutes=1))
        disrupt(fake_backend, run)
        rec.reconcile(fake_backend, now=t0 + RAN)  # the interruption: its objects deleted
        run.refresh_from_db()
        assert run.preempting_since is not None
        return run

    return make


def test_the_next_attempt_gets_what_the_earlier_one_left_of_its_limit(interrupted, fake_backend, published, client,
                                                                       member):
    run = interrupted(minutes=30)
    published.clear()
    now = run.preempting_since
    assert rec.reconcile(fake_backend, now=now).requeued == [run.ref]
    run.refresh_from_db()
    assert (run.state, run.attempt, run.earlier_run_seconds) == (RunState.ADMITTED, 2, RAN.total_seconds())
    # Admitted again at once (its quota was free): what it commits is what is left, 18 of its 30 minutes.
    assert QuotaHold.objects.held().get(ref=run.ref).limit_minutes == 18
    assert Attempt.objects.get(ref=run.ref, number=1).ran_for == RAN  # one rule for an attempt's time

    assert apply_workload("run", run.pk) == "applied"
    assert deadline(fake_backend.applied[-1]) == 18 * 60

    client.force_login(member)
    body = client.get(f"/api/v1/runs/{run.pk}/").json()
    assert (body["attempt"], body["earlier_run_seconds"], body["max_runtime_minutes"]) == (2, 720, 30)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert ('<dt>Runtime left</dt><dd id="run-runtime-left">18 min of its 30 min limit: its earlier attempts '
            'ran 12 min</dd>') in page


def test_a_run_whose_attempt_ran_its_whole_limit_fails_rather_than_start_over(interrupted, fake_backend, published,
                                                                             client, member):
    run = interrupted(minutes=10)
    published.clear()
    rec.reconcile(fake_backend, now=run.preempting_since)
    run.refresh_from_db()
    assert (run.state, run.reason_code, run.attempt, run.earlier_run_seconds) == (
        RunState.FAILED, ReasonCode.RUNTIME_LIMIT, 1, 0)
    assert run.reason == ("Its runtime limit (10 min) is used up: it ran 12 min until it was preempted; "
                          "not queued again")
    # Nothing held, queued or published; billed to the end of its grace; its people told it failed.
    assert not QuotaHold.objects.held().filter(ref=run.ref).exists()
    assert not QueuedRequest.objects.filter(ref=run.ref).exists()
    assert published == [] and run.open_units == 0 and run.billed_until == run.finished_at and run.billed_cost > 0
    # Its one attempt is the run's own row: nothing closed, only its pods' logs kept as they stopped, which its
    # logs still show (its pods are gone).
    assert Attempt.objects.get(ref=run.ref).ended_at is None
    client.force_login(member)
    assert client.get(f"/api/v1/runs/{run.pk}/logs/").json()["lines"] == ["log line 0", "log line 1", "log line 2"]
    assert Event.objects.filter(ref=run.ref, event_kind="run_failed").count() == 1


def test_a_later_attempt_that_runs_out_says_how_long_its_attempts_ran(member, team, quota, published):
    """Straight through the requeue: a run on its third attempt, its earlier two having run 50 of its 60
    minutes, lost with its cluster after 10 more."""
    data = {k: v for k, v in run_payload(max_runtime_minutes=60).items() if k != "team"}
    run = submit_run(member, team, data)
    now = timezone.now()
    TrainingRun.objects.filter(pk=run.pk).update(
        state=RunState.RUNNING, attempt=3, earlier_run_seconds=50 * 60, started_at=now - timedelta(hours=3),
        attempt_started_at=now - timedelta(minutes=10), admitted_at=now - timedelta(minutes=11))
    run.refresh_from_db()
    assert lifecycle.requeue(kind_for("run"), run, now, reason="cluster east lost: queued again to resume elsewhere",
                             code=ReasonCode.CLUSTER_LOST, place_again=True)
    run.refresh_from_db()
    assert (run.state, run.reason_code, run.attempt) == (RunState.FAILED, ReasonCode.RUNTIME_LIMIT, 3)
    assert run.reason == ("Its runtime limit (1 h 00 min) is used up: its 3 attempts ran 1 h 00 min in all, the "
                          "last until its cluster was lost; not queued again")
    # A replay moves nothing: it is no longer the preemption the call matched.
    assert not lifecycle.requeue(kind_for("run"), run, now)


def test_the_builders_take_the_attempts_deadline_as_they_are_given_it():
    """Pure: a Job, a PyTorchJob and a TrainJob carry the attempt's deadline, and nothing without a limit."""
    trainjob = {"training_api": "trainjob", "runtime": "torch-distributed", "workers": 2}
    for shape in ({}, {"workers": 3}, trainjob):
        [main] = [o for o in build_training(samples.training(active_deadline_seconds=1080, **shape), samples.CONFIG)
                  if o["kind"] in ("Job", "PyTorchJob", "TrainJob")]
        policy = main["spec"].get("runPolicy", main["spec"])
        assert policy["activeDeadlineSeconds"] == 1080, main["kind"]
        [main] = [o for o in build_training(samples.training(active_deadline_seconds=None, **shape), samples.CONFIG)
                  if o["kind"] in ("Job", "PyTorchJob", "TrainJob")]
        assert "activeDeadlineSeconds" not in main["spec"].get("runPolicy", main["spec"])


def test_what_is_left_is_the_limit_less_the_earlier_attempts_and_a_deadline_is_never_none():
    kind = kind_for("run")
    run = TrainingRun(max_runtime_minutes=30, earlier_run_seconds=0)
    assert (kind.runtime_left(run), _deadline_seconds(run)) == (timedelta(minutes=30), 1800)
    run.earlier_run_seconds = 1799
    assert (kind.runtime_left(run), _deadline_seconds(run)) == (timedelta(seconds=1), 1)
    # More than its limit: only a run in flight when the limit began to count attempts (its earlier attempts
    # counted by the migration). Nothing is left, but its deadline is never 0, which would be none at all.
    run.earlier_run_seconds = 4000
    assert (kind.runtime_left(run), _deadline_seconds(run)) == (timedelta(0), 1)
    unlimited = TrainingRun(max_runtime_minutes=None, earlier_run_seconds=600)
    assert (kind.runtime_left(unlimited), _deadline_seconds(unlimited)) == (None, None)


def test_the_migration_counts_what_the_earlier_attempts_of_every_workload_ran(member, team, quota, published):
    """``workloads`` 0017: a workload on a later attempt gets its recorded earlier attempts' time, final or not."""
    migration = importlib.import_module("workloads.migrations.0017_runtime_limit_counts_attempts")
    data = {k: v for k, v in run_payload(max_runtime_minutes=60).items() if k != "team"}
    in_flight, ended = submit_run(member, team, data), submit_run(member, team, {**data, "name": "ended"})
    first = submit_run(member, team, {**data, "name": "first"})
    TrainingRun.objects.filter(pk=in_flight.pk).update(state=RunState.QUEUED, attempt=3)
    TrainingRun.objects.filter(pk=ended.pk).update(state=RunState.SUCCEEDED, attempt=2)
    t0 = timezone.now() - timedelta(hours=2)
    for ref, number, started, minutes in ((in_flight.ref, 1, t0, 10), (in_flight.ref, 2, t0, 5),
                                          (ended.ref, 1, t0, 20), (ended.ref, 2, t0, 30), (first.ref, 1, t0, 9)):
        Attempt.objects.create(ref=ref, number=number, started_at=started, ended_at=t0 + timedelta(minutes=minutes))
    migration.count_earlier_attempts(django_apps, None)
    assert TrainingRun.objects.get(pk=in_flight.pk).earlier_run_seconds == 15 * 60
    # Its own attempt's row (logs saved as it stopped) is not an earlier attempt's; a first attempt has none.
    assert TrainingRun.objects.get(pk=ended.pk).earlier_run_seconds == 20 * 60
    assert TrainingRun.objects.get(pk=first.pk).earlier_run_seconds == 0
