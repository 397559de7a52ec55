"""docs/api-walkthrough.md works as written, on a freshly seeded demo.

The page's ``sh`` blocks run, in order and unchanged, in one bash against a real server
process (gunicorn on 127.0.0.1, its own SQLite database, migrated and seeded as ``make run``
does; no worker, so work stays where admission put it). Every command must succeed (``set -e``;
the page's ``api`` helper fails on an HTTP error status), and what each block prints must
agree with the answers the page shows under it: a ``json`` block is a subset of the last JSON
the block printed (``"…"`` stands for any value), each line of a ``text`` block is a line it
printed (``…`` standing for any text).

The page's commands call ``.venv/bin/python`` and ``manage.py`` from the top of the checkout;
they run in a scratch directory where those two names lead to this interpreter and this
checkout, so the test passes wherever the suite runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import db_template

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api-walkthrough.md"
ANY = "…"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("curl") is None and os.environ.get("CI", "").lower() != "true",
                       reason="the walk-through needs curl"),
]


@dataclass
class Step:
    """One ``sh`` block of the page and the answers shown under it."""

    script: str
    expected: list[tuple[str, str]] = field(default_factory=list)  # (language, text)


def steps(markdown: str) -> list[Step]:
    found: list[Step] = []
    for language, body in re.findall(r"^```(\w*)\n(.*?)^```", markdown, re.S | re.M):
        if language == "sh":
            found.append(Step(body))
        elif language in ("json", "text") and found:
            found[-1].expected.append((language, body))
    return found


def matches(expected, actual) -> bool:
    """``expected`` (from the page) is ``actual`` with keys and list items left out; ``"…"`` is anything."""
    if expected == ANY:
        return True
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and matches(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return False
        if all(not isinstance(item, dict | list) for item in expected):
            # argv, messages: item by item, all of them
            return len(expected) == len(actual) and all(map(matches, expected, actual))
        return all(any(matches(item, candidate) for candidate in actual) for item in expected)
    return expected == actual


def last_json(output: str):
    for line in reversed(output.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    raise AssertionError(f"no JSON in the output:\n{output}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def demo_server(tmp_path):
    """A fresh demo served by gunicorn, as ``make run`` serves it (without worker and beat)."""
    var = tmp_path / "var"
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "SLIPWAY_TEST_DB_NAME")}
    env.update(DJANGO_SETTINGS_MODULE="portal.settings", SLIPWAY_VAR_DIR=str(var), DEBUG="true",
               DATABASE_URL=f"sqlite:///{var / 'slipway.sqlite3'}")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # The run's migrated file (tests/db_template.py), then make run's own steps: its migrate has nothing to do.
    var.mkdir(parents=True, exist_ok=True)
    db_template.migrated_sqlite(var / "slipway.sqlite3")
    for command in (["migrate", "--noinput"], ["seed_demo", "--url", f"{url}/"]):
        subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True, capture_output=True)
    log = open(tmp_path / "web.log", "wb")  # noqa: SIM115 - closed with the process
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "portal.wsgi", "--bind", f"127.0.0.1:{port}",
                               "--workers", "1", "--threads", "4"],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "web.log").read_text()
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline, "the demo server did not answer within 60 s"
                time.sleep(0.2)
        yield url, env
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()


def checkout_like(tmp_path: Path) -> Path:
    """A directory where ``.venv/bin/python`` is this interpreter and ``manage.py`` this checkout's."""
    top = tmp_path / "checkout"
    (top / ".venv" / "bin").mkdir(parents=True)
    python = top / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    (top / "manage.py").symlink_to(ROOT / "manage.py")  # Python puts the real file's folder on sys.path
    return top


def test_the_api_walkthrough_runs_verbatim_on_a_fresh_demo(demo_server, tmp_path):
    url, env = demo_server
    page = steps(DOC.read_text())
    assert len(page) >= 6 and all(step.expected for step in page), "every command block shows its answer"
    marker = "@@step-{}@@"
    script = "set -euo pipefail\n" + "".join(f"echo {marker.format(i)}\n{step.script}" for i, step in enumerate(page))
    result = subprocess.run(["bash", "-c", script], cwd=checkout_like(tmp_path), env={**env, "SLIPWAY_URL": url},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    outputs = re.split(r"^@@step-\d+@@$", result.stdout, flags=re.M)[1:]
    assert len(outputs) == len(page)
    for number, (step, output) in enumerate(zip(page, outputs, strict=True)):
        for language, text in step.expected:
            if language == "json":
                shown = json.loads(text)
                assert matches(shown, last_json(output)), f"block {number}: {output!r} is not {shown!r}"
            else:
                for line in text.strip().splitlines():
                    pattern = ".*".join(re.escape(part) for part in line.split(ANY))
                    assert re.search(f"^{pattern}$", output, re.M), f"block {number}: no line like {line!r} in {output!r}"
