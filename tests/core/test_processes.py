"""Local helper processes (core.processes): a minimal environment, found again by id and marker, stopped without
waiting, killed when they ignore SIGTERM, and reaped (no zombie left behind)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from core import processes
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.slow

MARKER = b"slipway-test-helper"


def _start(code: str) -> int:
    return processes.start([sys.executable, "-c", code, MARKER.decode()], env=processes.minimal_env({}),
                           cwd=Path.cwd())


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1][:1]
    except OSError:
        return None


def test_the_environment_is_built_from_nothing_but_the_allow_list(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://secret@db/slipway")
    monkeypatch.setenv("SECRET_KEY", "not-for-helpers")
    env = processes.minimal_env({"SLIPWAY_SIM_TOKEN_MS": "5"})
    assert "DATABASE_URL" not in env and "SECRET_KEY" not in env
    assert env["SLIPWAY_SIM_TOKEN_MS"] == "5" and env["PATH"]
    assert set(env) <= {*processes.INHERITED, "PYTHONUNBUFFERED", "SLIPWAY_SIM_TOKEN_MS"}


def test_an_exited_child_is_not_alive_and_is_reaped():
    pid = _start("pass")
    wait_for(lambda: _state(pid) in ("Z", None), timeout=10, interval=0.02, what="the child to exit")
    assert not processes.alive(pid, MARKER)  # a zombie is no helper
    processes.reap()
    assert _state(pid) is None and pid not in processes._CHILDREN


def test_stop_signals_and_a_child_that_ignores_sigterm_is_killed_later(monkeypatch, tmp_path):
    monkeypatch.setattr(processes, "KILL_AFTER_SECONDS", 0.3)
    deaf = tmp_path / "deaf"
    pid = _start(f"import pathlib, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                 f"pathlib.Path({str(deaf)!r}).touch()\ntime.sleep(60)")
    wait_for(deaf.exists, timeout=10, interval=0.02, what="the child to ignore SIGTERM")
    assert processes.alive(pid, MARKER)
    assert not processes.alive(pid, b"another-program")  # a recycled id of another program is not it
    processes.stop(pid, MARKER)  # returns at once
    assert pid in processes._CHILDREN and processes.alive(pid, MARKER)  # SIGTERM did nothing

    def gone() -> bool:
        processes.reap()
        return _state(pid) is None

    wait_for(gone, timeout=10, interval=0.05, what="the child to be killed and reaped")
    assert pid not in processes._CHILDREN
