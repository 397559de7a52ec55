"""A real Celery worker (with embedded beat) as a subprocess, on Redis and the test database.

The worker must see the rows the test writes, so these tests use ``transactional_db`` on
PostgreSQL (an in-memory SQLite test database cannot be shared with another process).
Outside CI they are skipped without PostgreSQL and Redis; in CI both are required.

One worker serves a whole module (:func:`module_worker`, lent to each test by :func:`lend`):
starting one costs seconds, and a module has up to seven tests. What a test leaves behind
never reaches the next one, although the process outlives the tables ``transactional_db``
empties after each test:

1. after the test, the worker is *paused* (:meth:`WorkerProcess.pause`): it stops consuming
   its queues (confirmed by its own list of queues, not by the reply to the request), tasks
   waiting for a countdown are revoked, and the fixture waits until it holds no task at all —
   so nothing runs while the tables are emptied, and no transaction of its holds a lock the
   flush waits for. A worker that does not answer, or is still busy at the deadline, is
   SIGKILLed instead: a dead worker touches nothing either, and the next test starts a new one;
2. pytest-django empties the tables (a ``DELETE`` per table, tests/conftest.py ``delete_flush``,
   without restarting the id sequences: a later test's rows never have the ids of an earlier test's);
3. before the next test, Redis loses everything but the broker's queue bindings
   (:func:`reset_redis`): the queued and unacknowledged messages (beat's included: it goes
   on publishing during the pause), the reconcile cycle's lock, the cache. Only then does
   the worker consume again.

Beat's schedule needs no reset: its entries only publish, and what their tasks do depends on
the rows of the moment, not on when the worker started.

A test may kill and restart the worker (:meth:`WorkerProcess.kill`, :meth:`WorkerProcess.start`);
one that leaves it dead (failed before restarting it) gets it started again for the next test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection

from portal.celery import app
from tests.conftest import redis_url

ROOT = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).with_name("celery"))
#: Every queue of the app: the e2e worker takes from them all (scripts/run.sh and deploy/ give ``notify`` a worker of
#: its own, which :mod:`tests.notifications.test_notify_worker_e2e` runs as they do).
QUEUES = tuple(queue.name for queue in app.conf.task_queues)
#: The broker's routing table in Redis (kombu's redis transport): kept when Redis is reset, so that
#: what beat publishes during a reset still reaches a queue.
BINDINGS = b"_kombu.binding."


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.25, what: str | Callable[[], str] = "condition"):
    """Poll ``predicate`` until it returns a truthy value; fail with ``what`` after ``timeout`` (a callable ``what`` is
    called then: the state the test waited on, as it was when the wait gave up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what() if callable(what) else what}")


def reset_redis() -> None:
    """Delete every key of the test's Redis database but the broker's bindings: queues, unacked
    messages, locks, cache."""
    client = redis.Redis.from_url(redis_url())
    doomed = [key for key in client.scan_iter(count=1000) if not key.startswith(BINDINGS)]
    if doomed:
        client.delete(*doomed)


class WorkerProcess:
    """Starts, pauses, resumes, kills and restarts ``celery worker -B`` against the test database.

    By default it consumes every queue with beat embedded and two prefork processes; ``queues``, ``beat``,
    ``pool`` and ``concurrency`` start another shape (the notification worker of scripts/run.sh: ``notify`` alone,
    threads, no beat), ``name`` its node name's prefix.
    """

    def __init__(self, tmp_path: Path, *, queues: tuple[str, ...] = QUEUES, beat: bool = True,
                 pool: str = "prefork", concurrency: int = 2, name: str = "e2e", **env: str) -> None:
        self.queues, self.beat, self.pool, self.concurrency, self.name = queues, beat, pool, concurrency, name
        db = connection.settings_dict
        self.env = {
            **os.environ,
            "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
            "REDIS_URL": redis_url(),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "SLIPWAY_RECONCILE_INTERVAL": "0.5",
            # A killed worker's cycle lock keeps the next worker out this long (not production's 30 s).
            "SLIPWAY_RECONCILE_LOCK_SECONDS": "5",
            # Unacked messages of a killed worker come back after this (not after an hour).
            "CELERY_VISIBILITY_TIMEOUT": "8",
            "SLIPWAY_VAR_DIR": str(tmp_path),
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "SLIPWAY_SANDBOX_INVENTORY": settings.SLIPWAY_SANDBOX_INVENTORY,  # the suite's, as in this process
            **env,
        }
        self.env.pop("SLIPWAY_TEST_DB_NAME", None)
        self.tmp_path = tmp_path
        # Its temporary files (billiard's pool makes a pymp-* directory) in a directory of its own: a SIGKILLed worker
        # cannot remove them, and /tmp would gather one per kill (dozens a suite run).
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.env["TMPDIR"] = str(self.tmp)
        self.proc: subprocess.Popen | None = None
        self.generation = 0
        self._log_from = (0, 0)  # (generation, offset): where the current test's lines begin

    @property
    def log_path(self) -> Path:
        return self.tmp_path / f"worker-{self.generation}.log"

    @property
    def hostname(self) -> str:
        """The node name the worker answers remote control by (``-n``)."""
        return f"{self.name}{self.generation}@{socket.gethostname()}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.generation += 1
        log = open(self.log_path, "wb")  # noqa: SIM115 - closed with the process
        beat = ["-B", "-s", str(self.tmp_path / "beat-schedule")] if self.beat else []
        self.proc = subprocess.Popen(
            [CELERY, "-A", "portal", "worker", *beat, "-Q", ",".join(self.queues), "-P", self.pool,
             "--concurrency", str(self.concurrency), "--loglevel", "INFO", "-n", f"{self.name}{self.generation}@%h"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        wait_for(lambda: b"ready." in self.log_path.read_bytes() or self.proc.poll() is not None,
                 timeout=60, what="the Celery worker to start")
        assert self.proc.poll() is None, self.log_path.read_text()

    def kill(self) -> None:
        """SIGKILL the worker and its pool children and beat: no shutdown, no acks."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """End the worker at once: whoever comes next starts on a reset broker and cache and emptied
        tables, so nothing a warm shutdown would finish matters — and a warm shutdown waits for the
        tasks in flight and for beat (seconds)."""
        self.kill()

    def _inspect(self, method: str):
        """This worker's answer to the inspect command ``method``; None when it does not answer."""
        replies = getattr(app.control.inspect(destination=[self.hostname], timeout=5), method)()
        return (replies or {}).get(self.hostname)

    def active(self) -> list[dict]:
        """The tasks the worker is running now (its own answer to ``inspect active``; [] when it does not answer)."""
        return self._inspect("active") or []

    def pause(self, timeout: float = 30.0) -> bool:
        """Stop consuming and wait until the worker holds no task; True once it is idle.

        A task waiting for its countdown (a retry) is revoked: it would run in a later test.
        False when the worker does not answer or is still busy at ``timeout``.
        """
        for queue in self.queues:
            app.control.cancel_consumer(queue, destination=[self.hostname], reply=True, timeout=5)
        revoked: set[str] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            consuming, active, reserved, scheduled = (
                self._inspect(method) for method in ("active_queues", "active", "reserved", "scheduled"))
            if None in (consuming, active, reserved, scheduled):
                return False
            waiting = {entry["request"]["id"] for entry in scheduled} - revoked
            if waiting:
                app.control.revoke(sorted(waiting), destination=[self.hostname])
                revoked |= waiting
            # ``reserved`` lists what is received and not yet in a pool process, ``active`` what is:
            # together, every task in hand. Revoked countdowns never run.
            if not consuming and not active and not reserved:
                return True
            time.sleep(0.05)
        return False

    def resume(self) -> None:
        """Consume the queues again (the request is carried out asynchronously: wait for it)."""
        for queue in self.queues:
            app.control.add_consumer(queue, destination=[self.hostname], reply=True, timeout=5)
        wait_for(lambda: {q["name"] for q in self._inspect("active_queues") or ()} == set(self.queues),
                 timeout=30, interval=0.05, what="the worker to consume its queues again")

    def mark(self) -> None:
        """Start :meth:`logs` here: the next test reads its own lines."""
        self._log_from = (self.generation, self.log_path.stat().st_size if self.log_path.exists() else 0)

    def logs(self) -> str:
        """The worker's log since :meth:`mark` (the whole log of a worker started after it)."""
        generation, offset = self._log_from
        with self.log_path.open("rb") as log:
            log.seek(offset if generation == self.generation else 0)
            return log.read().decode(errors="replace")


def own_connection():
    """``(connection, its backend pid)``: a connection of the test's own to the test database (to hold locks that
    the worker's transactions then wait for, seen in ``pg_stat_activity``)."""

    db = connection.settings_dict
    conn = psycopg.connect(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"],
                           password=db["PASSWORD"] or None, dbname=db["NAME"])
    return conn, conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def waiting_for(pid: int) -> list[tuple[int, str]]:
    """``(pid, query)`` of the sessions waiting for locks the session ``pid`` holds (read on the test's connection:
    ``pg_stat_activity`` is a snapshot per transaction, and the holder's is open)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid, query FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [pid])
        return cursor.fetchall()


def require_postgresql(what: str = "worker") -> None:
    if "postgresql" not in connection.settings_dict["ENGINE"]:
        pytest.skip(f"needs PostgreSQL to share the test database with the {what} process")


def started_worker(tmp_path: Path, **env: str) -> WorkerProcess:
    """A worker of one test's own, on an emptied broker and cache, ``env`` added to its environment."""
    require_postgresql()
    redis.Redis.from_url(redis_url()).flushdb()
    process = WorkerProcess(tmp_path, **env)
    process.start()
    return process


def module_worker(tmp_path_factory: pytest.TempPathFactory, **env: str) -> Iterator[WorkerProcess]:
    """The body of a module-scoped fixture: the module's worker (``env`` added to its environment),
    started by the first :func:`lend`, killed after the module."""
    require_postgresql()
    process = WorkerProcess(tmp_path_factory.mktemp("worker"), **env)
    yield process
    process.stop()


def lend(process: WorkerProcess) -> Iterator[WorkerProcess]:
    """The body of a test's fixture (after ``transactional_db``): the module's worker on a reset Redis,
    consuming; paused (or, failing that, killed) after the test, before its tables are emptied."""
    reset_redis()
    if process.alive():
        process.resume()
    else:
        process.start()
    process.mark()
    yield process
    if process.alive() and not process.pause():
        process.kill()


@pytest.fixture(scope="module")
def shared_worker(django_db_setup, tmp_path_factory):
    yield from module_worker(tmp_path_factory)


@pytest.fixture
def worker(transactional_db, shared_worker):
    yield from lend(shared_worker)
