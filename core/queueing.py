"""Publishing Celery tasks from request code without ever losing the request.

A task is published only after the surrounding transaction commits (the worker must see the
row), and a broker that is down does not turn a successful submit into a 500: the row is
already committed in a state the reconciler re-drives (e.g. "admitted but no cluster
object after one period"), so the publish failure is logged and swallowed.
"""

from __future__ import annotations

import logging

from django.db import transaction

logger = logging.getLogger(__name__)


def publish(task, *args, **kwargs) -> bool:
    """Send ``task`` (a task, or a signature carrying its options) now; False (logged) when the broker cannot
    be reached."""
    try:
        task.apply_async(args=args, kwargs=kwargs, retry=False)
    except Exception as exc:  # kombu/redis raise many classes for "broker unreachable"
        logger.warning("could not publish %s%r (%s: %s); the reconciler will re-drive it",
                       task.name, args, exc.__class__.__name__, exc)
        return False
    return True


def publish_on_commit(task, *args, **kwargs) -> None:
    """Send ``task`` once the current transaction commits (at once outside a transaction)."""
    transaction.on_commit(lambda: publish(task, *args, **kwargs))
