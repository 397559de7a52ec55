"""The browser fixtures themselves (tests/conftest.py, tests/browser/support.py).

One chromium serves the session; each test gets a fresh context; the test's thread never sees
Playwright's event loop, so its ORM calls are ordinary ones (no ``DJANGO_ALLOW_ASYNC_UNSAFE``);
and once the session ends, or is killed, nothing it started keeps running.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from teams.models import Role
from tests.browser.support import BROWSER_MARKS
from tests.e2e.conftest import wait_for
from tests.factories import add_member, make_team, make_user

pytestmark = BROWSER_MARKS

ROOT = Path(__file__).resolve().parents[2]
PROBE = "tests/browser/session_probe.py"  #: a test run in a pytest session of its own


def test_the_test_thread_has_no_event_loop_and_the_live_server_sees_its_writes(live_server, browser):
    assert "DJANGO_ALLOW_ASYNC_UNSAFE" not in os.environ
    browser.goto(f"{live_server.url}/login/")
    with pytest.raises(RuntimeError, match="no running event loop"):
        asyncio.get_running_loop()
    # Written between two browser calls on the test's own connection, read by the server's thread.
    add_member(make_team("ml-research", "ML Research"), make_user("zoe", password="pw-Slipway-123"), Role.MEMBER)
    browser.fill("#id_username", "zoe")
    browser.fill("#id_password", "pw-Slipway-123")
    browser.click("button[type=submit]")
    browser.wait_for_url(f"{live_server.url}/")
    assert browser.locator(".username").inner_text() == "zoe"


def test_each_page_has_a_context_of_its_own(chromium, live_server, browser):
    browser.goto(f"{live_server.url}/login/")  # the login page sets the CSRF cookie
    assert [cookie["name"] for cookie in browser.context.cookies()] == ["csrftoken"]
    other = chromium.new_page()
    try:
        assert other.context.cookies() == []
        assert chromium.call(lambda: len(chromium.browser.contexts)) == 2  # both in the one chromium
    finally:
        chromium.call(lambda: other.target.context.close())


def processes_with(token: str) -> set[tuple[int, str]]:
    """(pid, start time) of the processes started with ``token`` in their environment, and of their descendants."""
    parents: dict[int, int] = {}
    started: dict[int, str] = {}
    marked: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or another user's
            continue
        fields = stat.rsplit(")", 1)[1].split()
        pid = int(entry.name)
        parents[pid], started[pid] = int(fields[1]), fields[19]
        if f"BROWSER_SESSION_PROBE={token}".encode() in environ.split(b"\0"):
            marked.add(pid)
    found, grew = set(marked), True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in found} - found
        found |= children
        grew = bool(children)
    return {(pid, started[pid]) for pid in found}


def alive(processes: set[tuple[int, str]]) -> set[tuple[int, str]]:
    still = set()
    for pid, start in processes:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[19] == start and fields[0] != "Z":  # the same process (not a reused pid), not a zombie
            still.add((pid, start))
    return still


#: A process holding the session's chromium as the fixture does, without pytest: it is killed, not ended.
HOLDER = """
import sys
from tests.browser.support import BrowserThread
page = BrowserThread().new_page()
page.set_content("<p id=up>up</p>")
assert page.inner_text("#up") == "up"
print("chromium up", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("ending", ["session ends", "killed"])
def test_nothing_is_left_running_after_a_session(ending):
    """A pytest session whose test opens a page ends, and its fixture closes everything; or a process
    holding chromium is SIGKILLed, and Playwright's driver, seeing its pipe close, takes chromium with it."""
    token = uuid.uuid4().hex
    env = {key: value for key, value in os.environ.items() if key not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    command = ([sys.executable, "-m", "pytest", PROBE, "-q", "-s", "-p", "no:cacheprovider"]
               if ending == "session ends" else [sys.executable, "-c", HOLDER])
    probe = subprocess.Popen(command, cwd=ROOT, env={**env, "BROWSER_SESSION_PROBE": token},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output = []
        for line in probe.stdout:
            output.append(line)
            if "chromium up" in line:
                break
        else:
            raise AssertionError(f"the probe ended before its page was up:\n{''.join(output)}")
        started = processes_with(token)
        commands = {Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] for pid, _ in alive(started)}
        assert any(command.endswith(b"chromium") for command in commands), commands
        assert any(command.endswith(b"node") for command in commands), commands  # Playwright's driver
        if ending == "session ends":
            probe.stdin.write("end\n")
            probe.stdin.flush()
            rest = probe.communicate(timeout=60)[0]
            assert probe.returncode == 0, "".join(output) + rest
        else:
            probe.send_signal(signal.SIGKILL)
            probe.wait(timeout=10)
        wait_for(lambda: not alive(started), timeout=15, interval=0.1, what=f"{alive(started)} to exit")
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait()
