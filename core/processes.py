"""Local helper processes Slipway starts on its own machine (the sandbox's engines): started with a
minimal environment, found again by process id, stopped without waiting, and reaped.

A process started here is a child of the process that started it (a Celery worker's, usually), in its
process group: whatever stops the worker (Ctrl-C on ``make run``, a kill) reaches it too. Its
environment is built from nothing (:func:`minimal_env`): the platform's own secrets (the database's
password, the secret key, cloud credentials) never reach it, only the few variables it needs and the
ones the caller names.

Children that exit become zombies until their parent reaps them: :func:`reap` polls the children
this process started (each call of :func:`start` and of :func:`stop` does, and a caller that
watches its helpers calls it regularly), and :func:`stop` ends a
process with SIGTERM and, a few seconds later at the next :func:`reap`, SIGKILL if it is still there.
Another process's helper (a process id from a row another worker wrote) can be signalled too, but only
its own parent can reap it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Variables a helper may inherit from this process (none carries a secret).
INHERITED = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")
#: Seconds a stopped process gets after SIGTERM before SIGKILL.
KILL_AFTER_SECONDS = 5.0

#: The children this process started and has not reaped yet: pid → (process, SIGKILL deadline or None).
_CHILDREN: dict[int, tuple[subprocess.Popen, float | None]] = {}


def minimal_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a helper: :data:`INHERITED` from this process, then ``extra``."""
    env = {name: os.environ[name] for name in INHERITED if name in os.environ}
    env.setdefault("LANG", "C.UTF-8")
    env["PYTHONUNBUFFERED"] = "1"
    return {**env, **extra}


def free_port() -> int:
    """A TCP port of 127.0.0.1 free now (the helper binds it right after; a lost race makes it exit)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(argv: Sequence[str], *, env: Mapping[str, str], cwd: str | Path, log: Path | None = None) -> int:
    """Start ``argv`` with ``env`` (give it :func:`minimal_env`'s) in ``cwd``; its process id. Never waits for it."""
    reap()
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") if log is not None else open(os.devnull, "wb") as out:
        process = subprocess.Popen(list(argv), env=dict(env), cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT)
    _CHILDREN[process.pid] = (process, None)
    return process.pid


def alive(pid: int, marker: bytes) -> bool:
    """Whether process ``pid`` runs (not a zombie) and its command line holds ``marker`` (a recycled id of
    another program is not it)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1][:1]
    except OSError:
        return False
    return marker in cmdline and state not in ("Z", "X")


def stop(pid: int, marker: bytes) -> None:
    """SIGTERM process ``pid`` if it is the one (``marker``, :func:`alive`); no wait. A child of this process
    is SIGKILLed by a later :func:`reap` if it is still there :data:`KILL_AFTER_SECONDS` on."""
    if alive(pid, marker):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    if pid in _CHILDREN:
        _CHILDREN[pid] = (_CHILDREN[pid][0], time.monotonic() + KILL_AFTER_SECONDS)
    reap()


def reap() -> None:
    """Collect the exit status of this process's children that exited; SIGKILL the stopped ones past their time."""
    now = time.monotonic()
    for pid, (process, kill_at) in list(_CHILDREN.items()):
        if process.poll() is not None:
            del _CHILDREN[pid]
        elif kill_at is not None and now >= kill_at:
            process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.1)
            if process.returncode is not None:
                del _CHILDREN[pid]
