"""Two conditional moves of one workload at once, through its kind's queryset: exactly one wins (issue 48, point 1).

The state lives on the one Workload table; an update through the kind's model locks the shared row first
(``WorkloadQuerySet.update``: ``SELECT … FOR UPDATE OF``), so the second mover waits, sees the row the first
moved, and matches nothing. Django's own update of a child model would read the ids without a lock and then
write by id: both would win, the later overwriting the earlier. On PostgreSQL, with two connections.
"""

from __future__ import annotations

import threading

import pytest

from fleet.models import GpuFlavor
from jobs.models import TrainingRun
from tests.threads import in_thread, paused_after, wait_until_lock_waiter

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_the_second_of_two_racing_moves_matches_nothing(member, team, flavors):
    run = TrainingRun.objects.create(team=team, created_by=member, name="raced", flavor=GpuFlavor.objects.get(
        name="a100-80gb"), image="registry.example.com/t:1", command=["python"])
    assert run.state == "queued"
    inside, go = threading.Event(), threading.Event()
    moved: dict[str, int] = {}
    errors: list[Exception] = []

    def cancel() -> None:  # holds the shared row after its UPDATE, its transaction open
        with paused_after('UPDATE "workloads_workload" SET "state"', inside, go):
            moved["cancel"] = TrainingRun.objects.filter(pk=run.pk, state="queued").update(
                state="cancelled", reason="cancelled by a user", max_retries=0)

    first = in_thread(cancel, errors)
    assert inside.wait(10)
    try:
        second = in_thread(lambda: moved.__setitem__("admit", TrainingRun.objects.filter(
            pk=run.pk, state="queued").update(state="admitted", workers=3)), errors)
        assert '"workloads_workload"' in wait_until_lock_waiter(second).query  # it waits for the shared row
    finally:
        go.set()
    first.join(30)
    second.join(30)

    assert errors == [] and moved == {"cancel": 1, "admit": 0}
    run.refresh_from_db()
    assert (run.state, run.reason, run.max_retries, run.workers) == ("cancelled", "cancelled by a user", 0, 1)
