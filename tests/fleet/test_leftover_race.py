"""A leftover deleted while its workload is placed on the same cluster again (PostgreSQL).

A cluster's cycle deletes what it finds of work that now lives nowhere or elsewhere: say a run
requeued off this cluster while it was lost, whose next attempt is not placed yet. Its objects
and the next attempt's have the same names, so if a worker places that attempt here between the
cycle's query and its delete, the delete would take the new copy. The cycle holds the workload's
row across the check and the delete; these tests play both orders of the race, each side in its
own thread and connection, and wait for PostgreSQL to show the lock wait instead of sleeping.
"""

from __future__ import annotations

import threading

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from fleet.models import Cluster
from jobs.constants import RunState
from jobs.models import TrainingRun
from tests.fleet.conftest import apply
from tests.threads import in_thread, wait_until_lock_waiter
from workloads.cycle import reconcile as rec
from workloads.cycle.placement import place_workload
from workloads.registry import kind_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _requeued_off_west(submit) -> TrainingRun:
    """A 4-GPU run that ran on west, its next attempt queued and admitted, placed nowhere yet (what a
    requeue off a lost cluster leaves): west still holds the earlier attempt's Job."""
    run = apply(submit(gpus_per_worker=4))
    assert run.cluster.name == "west"
    TrainingRun.objects.filter(pk=run.pk).update(cluster=None, placed_at=None, applied_at=None,
                                                 state=RunState.ADMITTED, attempt=F("attempt") + 1)
    return run


def _has_job(backend, run: TrainingRun) -> bool:
    return any(kind == "Job" and name == run.object_name for (_ns, kind, name) in backend.objects)


def test_a_leftover_whose_workload_was_placed_here_since_the_query_is_kept(clusters, submit):
    run = _requeued_off_west(submit)
    west = Cluster.objects.get(name="west")
    placing, go, errors, reports = threading.Event(), threading.Event(), [], []

    def place_here() -> None:
        # A worker's placement: the conditional update of the row, its transaction not committed yet.
        with transaction.atomic():
            assert TrainingRun.objects.filter(pk=run.pk, cluster__isnull=True).update(cluster=west) == 1
            placing.set()
            go.wait(10)

    placer = in_thread(place_here, errors)
    assert placing.wait(10)
    cycle = in_thread(lambda: reports.append(rec.reconcile_cluster(west, clusters["west"])), errors)
    # The cycle read the run as placed nowhere (the placement is not committed) and now waits for its row.
    assert wait_until_lock_waiter(cycle).lock == "transactionid"
    assert _has_job(clusters["west"], run)
    go.set()
    placer.join(10)
    cycle.join(10)
    assert not errors and not cycle.is_alive()
    # Checked again with the row held: placed here now, so what west holds is the run's and stays.
    assert run.object_name not in reports[0].orphans_deleted
    assert _has_job(clusters["west"], run)


def test_a_placement_on_the_cluster_while_its_leftover_is_deleted_waits_for_the_delete(clusters, submit):
    run = _requeued_off_west(submit)
    west, backend = Cluster.objects.get(name="west"), clusters["west"]
    deleting, go, errors, reports, placed = threading.Event(), threading.Event(), [], [], []
    delete = backend.delete

    def delete_in_flight(address, resources, **options):
        # The API call under way: the cycle holds the row until it returns.
        deleting.set()
        go.wait(10)
        return delete(address, resources, **options)

    backend.delete = delete_in_flight  # this test's own fake backend, not a module attribute
    cycle = in_thread(lambda: reports.append(rec.reconcile_cluster(west, backend)), errors)
    assert deleting.wait(10)
    placer = in_thread(lambda: placed.append(
        place_workload(kind_for("run"), TrainingRun.objects.get(pk=run.pk), timezone.now())), errors)
    assert wait_until_lock_waiter(placer).lock == "transactionid"
    assert TrainingRun.objects.get(pk=run.pk).cluster_id is None  # not placed while the delete runs
    go.set()
    cycle.join(10)
    placer.join(10)
    assert not errors and not cycle.is_alive() and not placer.is_alive()
    assert run.object_name in reports[0].orphans_deleted
    assert not _has_job(backend, run)
    # Placed on west once the delete was done: its apply comes after, on a cluster holding nothing of it.
    assert placed[0] is not None and placed[0].name == "west"
    assert TrainingRun.objects.get(pk=run.pk).cluster_id == west.pk
