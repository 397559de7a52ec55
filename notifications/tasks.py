"""Celery tasks of notifications: fan an event out, deliver it (with backoff), sweep what was lost,
prune what is old.

All take keys or primary keys and are safe to run twice (:mod:`notifications.delivery`). Fan-outs and
deliveries wait on the ``notify`` queue (portal/celery.py), which workers of their own consume (a pool of threads:
scripts/run.sh, deploy/notify-worker.yaml), beat's tasks here on ``default``: a webhook that never answers holds a
notification thread, never a process of the reconcile cycle's or the canary rule's.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from core import queueing
from notifications import delivery, events

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def fan_out(key: str) -> int:
    """Write event ``key``'s deliveries and publish one delivery task each."""
    pending = delivery.fan_out(key)
    for pk in pending:
        queueing.publish(deliver, pk)
    return len(pending)


@shared_task(bind=True, ignore_result=True, max_retries=None)
def deliver(self, pk: int) -> str:
    """One attempt at delivery ``pk``; a failure is tried again after the backoff, up to the last attempt."""
    outcome = delivery.attempt(pk)
    if outcome.result in ("retry", "deferred"):
        raise self.retry(countdown=outcome.delay)
    return outcome.result


@shared_task(ignore_result=True)
def sweep() -> str:
    """Re-drive fan-outs and deliveries whose task was lost (broker down, worker killed mid-send)."""
    keys, pks = delivery.overdue(timezone.now())
    for key in keys:
        queueing.publish(fan_out, key)
    for pk in pks:
        queueing.publish(deliver, pk)
    return f"events={len(keys)} deliveries={len(pks)}"


@shared_task(ignore_result=True)
def note_long_waits() -> int:
    """Record "waiting for quota too long" events (once per stay in the queue) and fan them out."""
    keys = events.long_waits(timezone.now())
    for key in keys:
        queueing.publish(fan_out, key)
    return len(keys)


@shared_task(ignore_result=True)
def note_reservation_windows() -> int:
    """Record the notices of reservation windows about to start and started (each once) and fan them out."""
    keys = events.reservation_windows(timezone.now())
    for key in keys:
        queueing.publish(fan_out, key)
    return len(keys)


@shared_task(ignore_result=True)
def prune() -> int:
    """Delete events past ``SLIPWAY_NOTIFY_KEEP_DAYS`` that are done, with their deliveries: batch
    after batch (each its own short transaction) until one is not full."""
    now, total = timezone.now(), 0
    while True:
        deleted = delivery.prune(now)
        total += deleted
        if deleted < delivery.PRUNE_BATCH:
            return total
