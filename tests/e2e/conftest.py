"""A real Celery worker (with embedded beat) as a subprocess, on Redis and the test database.

The worker must see the rows the test writes, so these tests use ``transactional_db`` on
PostgreSQL (an in-memory SQLite test database cannot be shared with another process).
Outside CI they are skipped without PostgreSQL and Redis; in CI both are required.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tests.conftest import redis_url

ROOT = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).with_name("celery"))


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.25, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


class WorkerProcess:
    """Starts, kills and restarts ``celery worker -B`` against the test database."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
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
        self.proc: subprocess.Popen | None = None
        self.generation = 0

    @property
    def log_path(self) -> Path:
        return self.tmp_path / f"worker-{self.generation}.log"

    def start(self) -> None:
        self.generation += 1
        log = open(self.log_path, "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [CELERY, "-A", "portal", "worker", "-B", "-Q", "default,cluster,reconcile", "--concurrency", "2",
             "--loglevel", "INFO", "-s", str(self.tmp_path / "beat-schedule"), "-n", f"e2e{self.generation}@%h"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        wait_for(lambda: b"ready." in self.log_path.read_bytes() or self.proc.poll() is not None,
                 timeout=60, what="the Celery worker to start")
        assert self.proc.poll() is None, self.log_path.read_text()

    def kill(self) -> None:
        """SIGKILL the worker and its pool children: no shutdown, no acks."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """End the worker after its test, at once: the next test starts on a flushed broker and cache
        (:func:`started_worker`) and emptied tables, so nothing a warm shutdown would finish matters
        — and a warm shutdown waits for the tasks in flight and for beat (seconds per test)."""
        self.kill()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")


def started_worker(tmp_path: Path, **env: str) -> WorkerProcess:
    """A worker on an empty broker and cache (no tasks left over from other tests), ``env`` added to its environment."""
    if "postgresql" not in connection.settings_dict["ENGINE"]:
        pytest.skip("needs PostgreSQL to share the test database with the worker process")
    import redis

    redis.Redis.from_url(redis_url()).flushdb()
    process = WorkerProcess(tmp_path, **env)
    process.start()
    return process


@pytest.fixture
def worker(transactional_db, tmp_path):
    process = started_worker(tmp_path)
    yield process
    process.stop()
