"""The messages of the reconcile cycle's fan-out, on the real broker: where they wait and how long they live.

Beat publishes ``reconcile`` every period; it publishes one ``reconcile_cluster`` per cluster. When a cycle
outlasts the period (a loaded machine, a large fleet), those messages outnumber what the workers take. They
used to wait on the ``default`` queue with no expiry: the canary rule's and the stdout reader's beat messages
(which expire after two of their own periods) queued behind the backlog and expired before a worker reached
them — on a slow CI boot a bad canary was never rolled back and a 30-s run's progress was never read. Here the
ticks come while no worker consumes (a worker busy with cycles), and the broker's lists are read as Redis holds
them.
"""

from __future__ import annotations

import ast
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from inference.tasks import evaluate_canaries
from workloads.tasks import RECONCILE_LOCK, reconcile

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def test_ticks_while_cycles_run_leave_the_default_queue_to_beat_tasks_and_their_own_messages_expire(
        broker, clusters):
    # The queue's step holds its lock (another worker's cycle): each tick only fans out.
    assert cache.add(RECONCILE_LOCK, "another worker", timeout=60)
    try:
        before = timezone.now()
        for _ in range(5):
            assert reconcile() == "busy"
        after = timezone.now()
    finally:
        cache.delete(RECONCILE_LOCK)
    evaluate_canaries.apply_async(**settings.CELERY_BEAT_SCHEDULE["canary-evaluate"]["options"])

    default = broker.waiting("default")
    assert [m["task"] for m in default] == ["inference.tasks.evaluate_canaries"]  # nothing ahead of it
    cycles = broker.waiting("reconcile")
    assert [(m["task"], ast.literal_eval(m["argsrepr"])) for m in cycles] == [
        ("workloads.tasks.reconcile_cluster", (name,)) for _ in range(5) for name in ("east", "west")]
    period = timedelta(seconds=settings.CELERY_RECONCILE_INTERVAL)
    for message in cycles:  # superseded by the next tick's: gone after two periods, not left for a worker
        expires = datetime.fromisoformat(message["expires"])
        assert before + 2 * period <= expires <= after + 2 * period, (message["expires"], before, after)
