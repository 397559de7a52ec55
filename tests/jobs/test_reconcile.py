"""Workers and the reconcile cycle against a scripted cluster: states, reasons, cost, re-drive."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from celery.exceptions import Retry
from django.core.cache import cache
from django.utils import timezone

from billing.ledger import usage_hour
from billing.models import QuotaHold, UsageRecord
from cluster.backends.base import NodeCapacity
from cluster.errors import Invalid, Transient
from fleet.models import Cluster
from fleet.services import default_cluster
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import cancel_run
from workloads import services as workloads
from workloads.constants import MAX_APPLY_ATTEMPTS
from workloads.cycle import reconcile as rec
from workloads.tasks import RECONCILE_LOCK, apply_workload, delete_workload, reconcile, reconcile_cluster

pytestmark = pytest.mark.django_db
NS = "team-ml-research"


def iso(dt) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def applied(run, backend) -> TrainingRun:
    assert apply_workload("run", run.pk) == "applied"
    run.refresh_from_db()
    return run


# -- apply_workload ---------------------------------------------------------------------------


def test_it_applies_the_team_namespace_and_the_job_then_marks_the_run_pending(submit, fake_backend):
    run = applied(submit(), fake_backend)
    assert run.state == RunState.PENDING
    assert run.apply_attempts == 1
    kinds = sorted(kind for (_ns, kind, _name) in fake_backend.objects)
    # Two NetworkPolicies: the team's isolation and its endpoint pods' (the gateway only).
    assert kinds == ["Job", "LimitRange", "Namespace", "NetworkPolicy", "NetworkPolicy", "ResourceQuota"]
    job = fake_backend.main_object(NS, run.object_name)
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] in (2, "2")


def test_it_skips_a_run_already_past_the_create_step(submit, fake_backend):
    run = applied(submit(), fake_backend)
    assert apply_workload("run", run.pk) == "skipped"
    assert apply_workload("run", 999999) == "skipped"
    assert fake_backend.calls.count("apply") == 1


def test_it_fails_the_run_with_the_api_servers_message_when_the_cluster_rejects_it(submit, fake_backend):
    run = submit()
    fake_backend.fail_with = Invalid('Job.batch "run-1" is invalid: spec.template: Required value', status=422)
    assert apply_workload("run", run.pk) == "failed"
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert "the cluster rejected the run: Job.batch" in run.reason
    assert not QuotaHold.objects.held().filter(ref=run.ref).exists()


def test_it_has_celery_retry_transient_errors(submit, fake_backend):
    run = submit()
    fake_backend.fail_with = Transient("503 Service Unavailable", status=503)
    with pytest.raises(Retry) as retry:
        apply_workload.apply(args=("run", run.pk), throw=True)
    assert isinstance(retry.value.exc, Transient)
    run.refresh_from_db()
    assert run.state == RunState.ADMITTED  # nothing lost: the reconciler re-drives it
    assert QuotaHold.objects.held().filter(ref=run.ref).exists()


def test_it_deletes_a_runs_objects_and_tolerates_a_second_delete(submit, fake_backend):
    run = applied(submit(), fake_backend)
    assert delete_workload("run", run.pk) == 1
    assert delete_workload("run", run.pk) == 0


# -- the reconcile cycle -----------------------------------------------------------------------------


def test_it_says_in_plain_words_why_a_pending_run_waits_for_the_cluster(submit, fake_backend, monkeypatch):
    run = applied(submit(gpus_per_worker=4), fake_backend)
    fake_backend.set_pending(NS, run.object_name, "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.")
    a100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    monkeypatch.setattr(fake_backend, "capacity", lambda: [
        NodeCapacity("a100-0", "nvidia.com/gpu", 8, 8, a100), NodeCapacity("a100-1", "nvidia.com/gpu", 8, 6, a100),
        NodeCapacity("h100-0", "nvidia.com/gpu", 8, 0, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})])
    rec.reconcile(fake_backend)
    run.refresh_from_db()
    assert run.state == RunState.PENDING
    # Not the scheduler's words (those stay in the events): the team's flavor and the largest free block.
    assert run.reason == ("waiting for capacity: needs 4\u00d7 a100-80gb on one node; "
                          "the largest free block is 2 (node a100-1)")
    assert run.reason_code == "waiting_for_capacity"  # what the Capacity page and the run page read
    assert fake_backend.ticks == 1
    # Seen again: the words hold, and nothing else is written.
    rec.reconcile(fake_backend)
    run.refresh_from_db()
    assert (run.reason_code, run.reason.startswith("waiting for capacity")) == ("waiting_for_capacity", True)


def test_it_follows_a_run_to_success_and_charges_its_gpu_time_once(submit, fake_backend):
    run = applied(submit(gpus_per_worker=2), fake_backend)
    t0 = timezone.now().replace(microsecond=0)
    fake_backend.set_running(NS, run.object_name, units=2, started=iso(t0))
    rec.reconcile(fake_backend, now=t0 + timedelta(seconds=5))
    run.refresh_from_db()
    assert run.state == RunState.RUNNING
    assert run.started_at == t0
    assert run.open_units == 2

    # One hour later it is still running: 2 GPUs × 1 h × 4.10 charged (the ledger's part plus
    # the open segment).
    rec.reconcile(fake_backend, now=t0 + timedelta(hours=1))
    run.refresh_from_db()
    assert run.cost_at(t0 + timedelta(hours=1)) == Decimal("8.2000")

    # It finished 30 minutes after that: half an hour more.
    end = t0 + timedelta(hours=1, minutes=30)
    fake_backend.set_finished(NS, run.object_name, ok=True, started=iso(t0), finished=iso(end))
    report = rec.reconcile(fake_backend, now=end + timedelta(seconds=20))
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED
    assert run.finished_at == end
    assert run.cost_to_date == Decimal("12.3000")
    assert (run.ref, "running", "succeeded") in report.transitions
    assert not QuotaHold.objects.held().filter(ref=run.ref).exists()
    # One ledger row per hour the run touched (segments close at hour boundaries); the rows hold the total.
    hours = {usage_hour(t0), usage_hour(t0 + timedelta(hours=1)), usage_hour(end - timedelta(microseconds=1))}
    rows = UsageRecord.objects.filter(ref=run.ref)
    assert sorted(r.hour for r in rows) == sorted(hours)
    assert sum(r.cost for r in rows) == Decimal("12.3000")

    # A replayed cycle changes nothing.
    rec.reconcile(fake_backend, now=end + timedelta(minutes=5))
    run.refresh_from_db()
    assert run.cost_to_date == Decimal("12.3000")
    assert UsageRecord.objects.filter(ref=run.ref).count() == len(hours)
    assert sum(r.cost for r in UsageRecord.objects.filter(ref=run.ref)) == Decimal("12.3000")


def test_it_fails_an_out_of_memory_run_with_the_oomkilled_reason_and_a_plain_hint(submit, fake_backend, api, client,
                                                                                  member):
    run = applied(submit(), fake_backend)
    t0 = timezone.now().replace(microsecond=0)
    fake_backend.set_finished(NS, run.object_name, ok=False, started=iso(t0), finished=iso(t0), oom=True)
    rec.reconcile(fake_backend)
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    hint = "OOMKilled (exit 137): the container ran out of memory — raise memory_gb or lower the batch size"
    assert hint in run.reason
    assert not QuotaHold.objects.held().filter(ref=run.ref).exists()
    # What to do is said where people read the reason: the API and the run's page.
    assert hint in api.get(f"/api/v1/runs/{run.pk}/").json()["reason"]
    client.force_login(member)
    assert hint in client.get(f"/runs/{run.pk}/").content.decode()


def test_it_admits_queued_work_when_a_run_finishes(submit, fake_backend):
    big = applied(submit(name="big", gpus_per_worker=8), fake_backend)
    waiting = submit(name="waiting", gpus_per_worker=4)
    assert waiting.state == RunState.QUEUED
    t0 = timezone.now().replace(microsecond=0)
    fake_backend.set_finished(NS, big.object_name, ok=True, started=iso(t0), finished=iso(t0))
    report = rec.reconcile(fake_backend)
    waiting.refresh_from_db()
    assert report.admitted == [waiting.ref]
    assert waiting.state == RunState.ADMITTED


def test_it_keeps_queued_reasons_current(submit, fake_backend):
    big = applied(submit(name="big", gpus_per_worker=6), fake_backend)
    waiting = submit(name="waiting", gpus_per_worker=4)
    assert waiting.reason == "waiting for quota: needs 4× a100-80gb, 6 of 8 in use"
    cancel_run(big.created_by, big)  # frees 6, admits waiting (4 of 8)
    third = submit(name="third", gpus_per_worker=6)
    assert third.reason == "waiting for quota: needs 6× a100-80gb, 4 of 8 in use"
    TrainingRun.objects.filter(pk=third.pk).update(reason="stale")
    rec.reconcile(fake_backend)
    third.refresh_from_db()
    assert third.reason == "waiting for quota: needs 6× a100-80gb, 4 of 8 in use"


def test_it_redrives_a_run_admitted_but_never_created(submit, fake_backend, published):
    run = submit()  # admitted; its create task was "lost"
    now = timezone.now()
    assert rec.reconcile(fake_backend, now=now).redriven == []  # not stuck yet
    report = rec.reconcile(fake_backend, now=now + timedelta(minutes=1))
    assert report.redriven == [run.identity]
    # The same cycle replayed does not re-drive again for the same period.
    assert rec.reconcile(fake_backend, now=now + timedelta(minutes=1)).redriven == []


def test_the_reconcile_task_publishes_what_the_cycle_redrives(submit, fake_backend, published):
    run = submit()  # admitted a minute ago; its create task was "lost"
    TrainingRun.objects.filter(pk=run.pk).update(admitted_at=timezone.now() - timedelta(minutes=1))
    published.clear()
    # Not placed yet: the queue's step (here) re-drives it; each cluster's step is a task of its own.
    assert reconcile().startswith("admitted=")
    assert published == [("workloads.tasks.reconcile_cluster", ("default",)),
                         ("workloads.tasks.apply_workload", ("run", run.pk))]
    published.clear()
    assert reconcile_cluster("default").startswith("observed=")
    assert published == []
    # Placed on its cluster and still absent a period later: that cluster's task re-drives it.
    TrainingRun.objects.filter(pk=run.pk).update(cluster=default_cluster(),
                                                 apply_started_at=timezone.now() - timedelta(minutes=1))
    assert reconcile_cluster("default").startswith("observed=")
    assert published == [("workloads.tasks.apply_workload", ("run", run.pk))]


def test_it_gives_up_on_a_run_that_never_reaches_the_cluster(submit, fake_backend, published):
    run = submit()
    TrainingRun.objects.filter(pk=run.pk).update(apply_attempts=MAX_APPLY_ATTEMPTS)
    rec.reconcile(fake_backend, now=timezone.now() + timedelta(minutes=5))
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert "could not be reached" in run.reason
    assert not QuotaHold.objects.held().filter(ref=run.ref).exists()


def test_it_moves_a_run_applied_by_a_worker_that_died_before_saving(submit, fake_backend):
    run = submit()
    # The worker placed the run and applied its objects, but was killed before marking it pending.
    TrainingRun.objects.filter(pk=run.pk).update(cluster=default_cluster())
    fake_backend.apply(create_objects(run))
    fake_backend.set_running(NS, run.object_name, units=2)
    rec.reconcile(fake_backend)
    run.refresh_from_db()
    assert run.state == RunState.RUNNING


def test_objects_of_a_run_not_placed_yet_are_an_earlier_attempts_and_not_followed(submit, fake_backend):
    """A run queued again off a lost cluster waits for its next attempt's apply, placed nowhere; the
    copy its last attempt left on the cluster is not taken for it, and is deleted as a leftover."""
    run = submit()
    fake_backend.apply(create_objects(run))
    fake_backend.set_running(NS, run.object_name, units=2)
    report = rec.reconcile(fake_backend)
    run.refresh_from_db()
    assert (run.state, run.started_at, run.cluster_id) == (RunState.ADMITTED, None, None)
    assert report.orphans_deleted == [run.object_name] and not fake_backend.objects


def create_objects(run):
    return workloads.manifests(run)


def test_it_fails_a_run_whose_objects_vanished(submit, fake_backend):
    run = applied(submit(), fake_backend)
    fake_backend.objects.clear()
    assert rec.reconcile(fake_backend).vanished == []  # just applied: give the cluster a period
    report = rec.reconcile(fake_backend, now=timezone.now() + timedelta(minutes=1))
    run.refresh_from_db()
    assert report.vanished == [run.ref]
    assert run.state == RunState.FAILED
    assert "disappeared" in run.reason


def test_it_deletes_objects_left_behind_by_a_cancelled_run(submit, fake_backend, member):
    run = applied(submit(), fake_backend)
    cancel_run(member, run)  # its delete task was "lost" (published is captured)
    report = rec.reconcile(fake_backend)
    assert report.orphans_deleted == [run.object_name]
    assert not any(k[1] == "Job" for k in fake_backend.objects)


def test_it_keeps_the_objects_of_finished_runs_for_their_logs(submit, fake_backend):
    run = applied(submit(), fake_backend)
    t0 = timezone.now().replace(microsecond=0)
    fake_backend.set_finished(NS, run.object_name, ok=True, started=iso(t0), finished=iso(t0))
    rec.reconcile(fake_backend)
    assert rec.reconcile(fake_backend).orphans_deleted == []
    assert fake_backend.main_object(NS, run.object_name)


def test_it_never_overwrites_a_cancel_that_raced_the_cycle(submit, fake_backend, member, monkeypatch):
    run = applied(submit(), fake_backend)
    fake_backend.set_running(NS, run.object_name, units=2)
    real_observe = fake_backend.observe

    def observe_then_cancel(resources):
        result = real_observe(resources)
        cancel_run(member, TrainingRun.objects.get(pk=run.pk))
        return result

    monkeypatch.setattr(fake_backend, "observe", observe_then_cancel)
    rec.reconcile(fake_backend)
    run.refresh_from_db()
    assert run.state == RunState.CANCELLED


def test_it_runs_one_reconcile_at_a_time_per_cluster_and_one_queue_step(fake_backend, db, published):
    cluster_lock = f"{RECONCILE_LOCK}:default"
    cache.set(cluster_lock, "someone-else", 30)
    try:
        assert reconcile_cluster("default") == "busy"
        assert fake_backend.ticks == 0
    finally:
        cache.delete(cluster_lock)
    assert reconcile_cluster("default").startswith("observed=")
    assert fake_backend.ticks == 1
    assert cache.get(cluster_lock) is None
    cache.set(RECONCILE_LOCK, "someone-else", 30)
    try:
        assert reconcile() == "busy"  # the queue's step is busy; the clusters' tasks are published all the same
        assert published[-1] == ("workloads.tasks.reconcile_cluster", ("default",))
    finally:
        cache.delete(RECONCILE_LOCK)
    assert reconcile().startswith("admitted=") and cache.get(RECONCILE_LOCK) is None


def test_it_bills_a_cancelled_run_up_to_the_cancel(submit, fake_backend, member):
    run = applied(submit(gpus_per_worker=2), fake_backend)
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=2)
    fake_backend.set_running(NS, run.object_name, units=2, started=iso(t0))
    rec.reconcile(fake_backend, now=t0 + timedelta(hours=1))  # 2 GPUs × 1 h × 4.10
    run.refresh_from_db()
    assert run.cost_at(t0 + timedelta(hours=1)) == Decimal("8.2000")
    cancel_run(member, run)  # an hour later: the last hour is billed by the cancel itself
    run.refresh_from_db()
    assert Decimal("16.39") <= run.cost_to_date <= Decimal("16.42")
    rec.reconcile(fake_backend)  # the cycle after the cancel charges nothing more
    again = TrainingRun.objects.get(pk=run.pk)
    assert again.cost_to_date == run.cost_to_date


def test_it_skips_a_cycle_while_the_cluster_cannot_be_observed(submit, fake_backend, monkeypatch):
    run = applied(submit(), fake_backend)

    def down(resources):
        raise Transient("connection refused")

    monkeypatch.setattr(fake_backend, "observe", down)
    assert reconcile_cluster("default") == "cluster default unavailable: connection refused"
    assert cache.get(f"{RECONCILE_LOCK}:default") is None  # the next cycle may run
    run.refresh_from_db()
    assert run.state == RunState.PENDING  # nothing was taken for vanished
    cluster = Cluster.objects.get(name="default")
    assert (cluster.state, cluster.silent_cycles, cluster.last_error) == ("degraded", 1, "connection refused")


def test_an_interval_the_ledger_already_holds_is_not_charged_twice(submit, fake_backend):
    from billing.ledger import record_usage

    run = applied(submit(gpus_per_worker=2), fake_backend)
    # Ten minutes into the next hour: the first cycle's five seconds never cross an hour (at 03:59:57 they did,
    # and the CI's SQLite pass failed at that minute), and the hour after rolls over once.
    t0 = usage_hour(timezone.now()) + timedelta(minutes=70)
    fake_backend.set_running(NS, run.object_name, units=2, started=iso(t0))
    rec.reconcile(fake_backend, now=t0 + timedelta(seconds=5))
    run.refresh_from_db()
    # Someone billed the next hour already (a writer that did not move billed_until).
    record_usage(run.team, run.ref, run.flavor, None, run.billed_until, t0 + timedelta(hours=1), 2, False)

    rec.reconcile(fake_backend, now=t0 + timedelta(hours=1))
    run.refresh_from_db()
    assert run.billed_until == usage_hour(t0 + timedelta(hours=1))  # the segment rolled over at the hour
    ledger_total = sum(r.cost for r in UsageRecord.objects.filter(ref=run.ref))
    assert ledger_total == Decimal("8.2")  # 2 x 4.10 for one hour, once
    assert run.billed_cost == ledger_total


def test_a_pending_run_without_pods_is_explained_by_its_controllers_warning(submit, fake_backend):
    from cluster.backends.base import ClusterEvent

    run = applied(submit(), fake_backend)
    t0 = run.apply_started_at
    rec.reconcile(fake_backend, now=t0 + timedelta(seconds=1))
    run.refresh_from_db()
    assert (run.state, run.reason) == (RunState.PENDING, "submitted to the cluster")
    fake_backend.warnings[(NS, run.object_name)].append(ClusterEvent(
        "Warning", "FailedCreate", 'Error creating: pods "run-1-x" is forbidden: exceeded quota: slipway-gpu-quota',
        f"Job/{run.object_name}", iso(t0)))

    # Within the first period the controller may still create the pods: no events call yet.
    fake_backend.calls.clear()
    rec.reconcile(fake_backend, now=t0 + timedelta(seconds=2))
    assert "events" not in fake_backend.calls
    # After it, the warning is the reason, and it is fetched no more once it is known.
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=1))
    run.refresh_from_db()
    assert run.state == RunState.PENDING
    assert run.reason == 'FailedCreate: Error creating: pods "run-1-x" is forbidden: exceeded quota: slipway-gpu-quota'
    fake_backend.calls.clear()
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=2))
    assert "events" not in fake_backend.calls

    # Once pods appear (the quota was raised) and run, the reason clears.
    fake_backend.set_running(NS, run.object_name, units=2, started=iso(t0 + timedelta(minutes=3)))
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=4))
    run.refresh_from_db()
    assert (run.state, run.reason) == (RunState.RUNNING, "")


def test_events_that_cannot_be_read_leave_the_reason_empty(submit, fake_backend):
    run = applied(submit(), fake_backend)
    fake_backend.events_error = Transient("503 Service Unavailable", status=503)
    report = rec.reconcile(fake_backend, now=run.apply_started_at + timedelta(minutes=1))
    run.refresh_from_db()
    assert (run.state, run.reason) == (RunState.PENDING, "submitted to the cluster")
    assert report.observed > 0 and "events" in fake_backend.calls
