"""Running a piece of a test in its own thread, as another request or worker would, and
waiting, on PostgreSQL, until that thread is blocked on a lock.

Each thread gets its own database connection (Django opens one per thread); it is closed when
the thread ends. Exceptions are collected for the test to assert on, not lost in the thread.

A race test holds one side inside its transaction (:func:`paused_after` a given statement)
and starts the other; :func:`wait_until_lock_waiter` then returns as soon as PostgreSQL shows
the other side waiting for a lock the held side has, so the test releases the held side
knowing the race happened, instead of sleeping and hoping it did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from django.db import connection

#: How often PostgreSQL is asked whether the other side is waiting yet (seconds).
POLL_INTERVAL = 0.01


def in_thread(target: Callable[[], object], errors: list[Exception]) -> threading.Thread:
    """Start ``target`` in a new thread; any exception it raises is appended to ``errors``."""

    def body() -> None:
        try:
            target()
        except Exception as exc:  # the test asserts there were none
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


@contextmanager
def paused_after(statement: str, inside: threading.Event, go: threading.Event) -> Iterator[None]:
    """Within the block, pause this thread right after the first SQL statement starting with ``statement``.

    The pause sets ``inside`` and waits (at most 10 s) for ``go``; the transaction stays open,
    so whatever it has locked stays locked while the test plays the other side. Built on
    Django's execute wrappers (its documented hook into every query of a connection, which is
    per thread), so the product runs unpatched and the pause point is named by the statement
    whose locks the race is about rather than by a private function.
    """

    def wrapper(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not inside.is_set() and sql.startswith(statement):
            inside.set()
            go.wait(10)
        return result

    with connection.execute_wrapper(wrapper):
        yield


@dataclass(frozen=True)
class LockWait:
    """A backend waiting for a lock: what kind of lock (``transactionid`` for a row another
    transaction holds, ``tuple``, ``relation``, ``advisory`` …) and the statement waiting."""

    lock: str
    query: str


def wait_until_lock_waiter(thread: threading.Thread, timeout: float = 10.0) -> LockWait:
    """Block until another connection to the test database waits for a lock; return that wait.

    ``thread`` is the side expected to block: if it ends first it never waited, and the test
    fails at once rather than at the deadline. The caller's own connection is not counted.
    """
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while True:
            cursor.execute(
                "SELECT wait_event, query FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
                " ORDER BY query_start LIMIT 1"
            )
            row = cursor.fetchone()
            if row is not None:
                return LockWait(lock=row[0], query=row[1])
            if not thread.is_alive():
                pytest.fail("the other side finished without ever waiting for a lock")
            if time.monotonic() > deadline:
                pytest.fail(f"no connection waited for a lock within {timeout} s")
            time.sleep(POLL_INTERVAL)
