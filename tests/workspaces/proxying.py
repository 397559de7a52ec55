"""The sandbox's workspace proxy as a real process for tests (``manage.py workspace_proxy``), and a browser on a
workspace's host (``ws-<id>.localhost``: connecting to 127.0.0.1 with that ``Host``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from django.db import connection

from tests.conftest import redis_url
from workspaces import access

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def run_proxy(tmp_path: Path, portal_url: str) -> Iterator[int]:
    """The body of a fixture: the proxy on a free port against the test database and Redis, as ``make run`` starts
    it; yields its port; stopped by SIGTERM (it must exit 0)."""
    port = free_port()
    db = connection.settings_dict
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "REDIS_URL": redis_url(),
           "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
           "SLIPWAY_VAR_DIR": str(tmp_path)}
    env.pop("SLIPWAY_TEST_DB_NAME", None)
    log_path = tmp_path / "proxy.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "manage.py", "workspace_proxy", "--port", str(port),
                                    "--portal-url", portal_url], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    # A minute: Django's start under a loaded CI machine (2 cores, three test workers) took over 30 s once.
    deadline = time.monotonic() + 60
    while not _listening(port) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if process.poll() is not None or not _listening(port):
        process.kill()  # never leave a proxy behind a failed start (one outlived its CI run)
        process.wait(timeout=10)
        raise AssertionError(f"the proxy did not listen on {port} within 60 s: {log_path.read_text()!r}")
    try:
        yield port
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0, log_path.read_text()  # stops cleanly, as make run's Ctrl-C asks


def browser_on(url: str) -> httpx.Client:
    """A client on the host of ``url`` (``http://ws-7.localhost:<port>/…``), connecting to 127.0.0.1."""
    parts = urlsplit(url)
    return httpx.Client(base_url=f"http://127.0.0.1:{parts.port}", headers={"Host": parts.netloc}, timeout=10)


def signed_in_through(url: str) -> tuple[httpx.Client, str]:
    """Follow an Open address (its one-use ticket) through the proxy: a client holding the workspace's cookie, and
    the server's base path."""
    parts = urlsplit(url)
    client = browser_on(url)
    exchanged = client.get(f"{parts.path}?{parts.query}")
    assert exchanged.status_code == 302, exchanged.text
    client.cookies.set(access.COOKIE, exchanged.cookies[access.COOKIE])
    return client, parts.path.removesuffix("lab")  # Open lands on JupyterLab's page under the server's base path
