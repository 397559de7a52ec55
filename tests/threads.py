"""Running a piece of a test in its own thread, as another request or worker would.

Each thread gets its own database connection (Django opens one per thread); it is closed when
the thread ends. Exceptions are collected for the test to assert on, not lost in the thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connection


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
