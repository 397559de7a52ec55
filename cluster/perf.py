"""Keeping big observations cheap: pausing Python's cyclic garbage collector around them.

At 10,000 workloads one ``observe()`` decodes ~50 MB of JSON into millions of dicts and
lists. Every allocation burst makes the cyclic collector run, and once that many objects
are alive each run walks all of them: measured by ``bench/reconcile_scale.py``, the
collector cost three to four times the parse itself. Observed payloads are trees (no
reference cycles), so reference counting frees them without the collector's help.

The reconciler should therefore hold an observation only inside :func:`gc_paused`::

    with gc_paused():
        observed = backend.observe(resources)
        ...map with each kind's status mapping, update rows...
        del observed  # freed by refcount before the collector resumes

``KubernetesBackend.observe()`` pauses by itself too (nested pauses are fine); the outer
pause matters because the first collection after a pause, with the observation still alive,
walks all of it once.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = True


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic GC for the block; nested/concurrent pauses are counted.

    The collector resumes when the last pause ends, and only if it was running before the
    first one began (a process that disabled it on purpose keeps it disabled).
    """
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
