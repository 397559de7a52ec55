"""``scripts/run.sh`` (``make run``) prints the address the web server really listens on.

The script runs against a stand-in virtualenv: ``manage.py`` commands are echoed, celery
sleeps, and "gunicorn" is a tiny HTTP server bound where the script told it to bind, so the
test sees exactly which port was bound and which was printed.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

RUN_SH = Path(settings.BASE_DIR) / "scripts" / "run.sh"

FAKE_PYTHON = """#!/bin/sh
if [ "$1" = manage.py ] && [ "$2" = workspace_proxy ]; then echo "$*" >&2; exec sleep 300; fi
if [ "$1" = manage.py ] && [ "$2" = gateway ]; then echo "$* SLIPWAY_GATEWAY_URL=$SLIPWAY_GATEWAY_URL" >&2; exec sleep 300; fi
if [ "$1" = manage.py ] && [ "$2" = demo_serving ]; then echo "sw-demo" > "$4"; echo "manage.py $*"; exit 0; fi
if [ "$1" = manage.py ] && [ "$2" = serving_load ]; then echo "$*" >&2; exec sleep 300; fi
if [ "$1" = manage.py ] && [ "$2" = demo_clock ]; then
  {real} -c 'import os, socket; socket.create_connection(("127.0.0.1", int(os.environ["PORT"])), 1)' 2>/dev/null \\
    && echo "manage.py $2 $3 (the portal answers)" || echo "manage.py $2 $3 (the portal is silent)"
  exit 0
fi
if [ "$1" = manage.py ]; then shift; echo "manage.py $* PORT=$PORT SLIPWAY_PORTAL_URL=$SLIPWAY_PORTAL_URL"; exit 0; fi
exec {real} "$@"
"""
FAKE_GUNICORN = """#!{real}
import http.server, sys
host, port = sys.argv[sys.argv.index("--bind") + 1].rsplit(":", 1)
print("bound", host, port, flush=True)

class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass

http.server.HTTPServer((host, int(port)), Ok).serve_forever()
"""
FAKE_CELERY = '#!/bin/sh\necho "celery $3 SLIPWAY_PORTAL_URL=$SLIPWAY_PORTAL_URL"\nexec sleep 300\n'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A copy of run.sh in a bare checkout, with the stand-in virtualenv."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(RUN_SH, tmp_path / "scripts" / "run.sh")
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("python", FAKE_PYTHON), ("gunicorn", FAKE_GUNICORN), ("celery", FAKE_CELERY)):
        (bin_dir / name).write_text(text.replace("{real}", sys.executable))
        (bin_dir / name).chmod(stat.S_IRWXU)
    return tmp_path


def start(checkout: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    # A new user's shell: no PORT, and no SLIPWAY_VAR_DIR (scripts/test.sh sets one for the suite,
    # which would move the logs out of the checkout).
    environment = {key: value for key, value in os.environ.items() if key not in ("PORT", "SLIPWAY_VAR_DIR")}
    # The workspace proxy's and the gateway's ports are the web port + 1 and + 2 by default, which another test's
    # process may hold.
    environment.pop("SLIPWAY_GATEWAY_URL", None)
    environment.update({"VENV": str(checkout / "venv"), "SLIPWAY_WORKSPACE_PROXY_PORT": str(free_port()),
                        "SLIPWAY_GATEWAY_PORT": str(free_port()), **(env or {})})
    return subprocess.Popen(["bash", str(checkout / "scripts" / "run.sh"), *args], cwd=checkout, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def read_until(process: subprocess.Popen, marker: str, timeout: float = 30) -> str:
    out, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
        out.append(line)
        if marker in line:
            break
    return "".join(out)


def stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_the_logs_go_beside_slipway_var_dir_when_it_is_set(checkout, tmp_path_factory):
    var_dir = tmp_path_factory.mktemp("state")
    port = free_port()
    process = start(checkout, str(port), env={"SLIPWAY_VAR_DIR": str(var_dir)})
    try:
        out = read_until(process, "Logs:")
        assert f"Logs: {var_dir}/log/web.log" in out, out
        assert f"bound 127.0.0.1 {port}" in (var_dir / "log" / "web.log").read_text()
        assert not (checkout / "var").exists()
    finally:
        stop(process)


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_it_prints_the_port_the_server_listens_on(checkout, how):
    port = free_port()
    process = start(checkout, str(port)) if how == "argument" else start(checkout, env={"PORT": str(port)})
    try:
        out = read_until(process, "Logs:")
        assert f"Slipway is running:  http://127.0.0.1:{port}/" in out, out
        assert f"admin console at http://127.0.0.1:{port}/admin/" in out
        # seed_demo is told the same address (its printed links), and PORT for anything else.
        assert f"manage.py seed_demo --url http://127.0.0.1:{port}/ PORT={port}" in out
        web_log = (checkout / "var" / "log" / "web.log").read_text()
        assert f"bound 127.0.0.1 {port}" in web_log
        assert "8000" not in out
    finally:
        stop(process)


@pytest.mark.parametrize("which", ["web", "workspace proxy"])
def test_it_refuses_a_port_in_use_before_starting_anything(checkout, which):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        if which == "web":
            process = start(checkout, str(port))
        else:
            process = start(checkout, str(free_port()), env={"SLIPWAY_WORKSPACE_PROXY_PORT": str(port)})
        try:
            out, _ = process.communicate(timeout=30)
        finally:
            stop(process)
    assert process.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use" in out
    assert "manage.py" not in out and "Slipway is running" not in out


def test_it_starts_the_workspace_proxy_told_where_the_portal_is(checkout):
    """The sandbox's notebooks are served by the workspace proxy at ws-<id>.localhost on a port of their own
    (docs/workspaces.md): never the portal's host, whose cookies they must not receive."""
    port, proxy_port = free_port(), free_port()
    process = start(checkout, str(port), env={"SLIPWAY_WORKSPACE_PROXY_PORT": str(proxy_port)})
    try:
        out = read_until(process, "Logs:")
        assert f"Workspaces open at http://ws-<id>.localhost:{proxy_port}/" in out, out
        proxy_log = (checkout / "var" / "log" / "proxy.log").read_text()
        assert f"workspace_proxy --port {proxy_port} --portal-url http://127.0.0.1:{port}" in proxy_log
    finally:
        stop(process)


def test_it_starts_the_gateway_and_prints_where_endpoints_answer(checkout):
    """The endpoints' data plane runs beside the portal (docs/serving.md "The gateway"), on a port of its own, and
    every process is told its URL (the portal shows it)."""
    gateway_port = free_port()
    process = start(checkout, str(free_port()), env={"SLIPWAY_GATEWAY_PORT": str(gateway_port)})
    try:
        out = read_until(process, "Logs:")
        assert f"Endpoints answer at http://127.0.0.1:{gateway_port}/<team>/<endpoint>/" in out, out
        gateway_log = (checkout / "var" / "log" / "gateway.log").read_text()
        assert f"gateway --bind 127.0.0.1:{gateway_port} SLIPWAY_GATEWAY_URL=http://127.0.0.1:{gateway_port}" \
            in gateway_log
        # The demo's traffic: the load generator calls the demo endpoint through that gateway with the demo key,
        # which it reads from the file demo_serving wrote (never on its command line).
        load_log = (checkout / "var" / "log" / "load.log").read_text()
        assert (f"serving_load --gateway http://127.0.0.1:{gateway_port} --key-file var/demo-gateway-key "
                "--endpoint ml-research/llama-chat") in load_log, load_log
        assert "sw-demo" not in load_log
    finally:
        stop(process)


def test_it_refuses_a_port_that_is_not_a_number(checkout):
    process = start(checkout, "80a")
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 2 and "must be a number" in out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_orderly_stop_by_signal_exits_0_after_stopping_the_children(checkout, sig):
    # `make run &` then `kill`: a non-zero status made make print "Error 143" for a normal stop.
    process = start(checkout, str(free_port()))
    try:
        read_until(process, "Logs:")
        children = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 7  # worker, notification worker, beat, workspace proxy, gateway, load generator, web
        process.send_signal(sig)  # the script alone, as make (or a supervisor) signals it
        out, _ = process.communicate(timeout=20)
    finally:
        stop(process)
    assert process.returncode == 0, out
    assert "stopping Slipway" in out and "a Slipway process exited" not in out
    for pid in children:  # none left running
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_it_kills_a_service_that_ignores_sigterm_once_the_grace_ends(checkout):
    # A Celery worker in warm shutdown waits for its running task and ignores another SIGTERM:
    # Ctrl-C must still end it, and everything else, within the grace period.
    (checkout / "venv" / "bin" / "celery").write_text("#!/bin/sh\ntrap '' TERM\nexec sleep 300\n")
    process = start(checkout, str(free_port()), env={"STOP_GRACE_SECONDS": "1"})
    try:
        read_until(process, "Logs:")
        groups = {int(pid): os.getpgid(int(pid)) for pid in
                  subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()}
        assert len(set(groups.values())) == 7 and process.pid not in groups.values()  # a group per service
        started = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)  # a terminal's Ctrl-C: the script's group only
        out, _ = process.communicate(timeout=20)
        took = time.monotonic() - started
    finally:
        stop(process)
    assert process.returncode == 0, out
    assert "killing what did not stop within 1 s" in out
    assert took < 10
    for pid in groups:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


@pytest.mark.parametrize("given", ["", "https://gpu.example.com"])
def test_the_links_in_messages_follow_the_port_unless_the_install_sets_them(checkout, given):
    """``make run PORT=8110``: an e-mail's or webhook's links (the notification worker sends them, the worker's cycle
    words them) point at :8110, not :8000."""
    port = free_port()
    process = start(checkout, str(port), env={"SLIPWAY_PORTAL_URL": given} if given else None)
    try:
        out = read_until(process, "Logs:")
    finally:
        stop(process)
    expected = given or f"http://127.0.0.1:{port}"
    assert f"manage.py seed_demo --url http://127.0.0.1:{port}/ PORT={port} SLIPWAY_PORTAL_URL={expected}\n" in out, out
    for log in ("worker.log", "notify-worker.log"):
        assert f"celery worker SLIPWAY_PORTAL_URL={expected}\n" in (checkout / "var" / "log" / log).read_text(), log


def test_the_settings_link_to_the_port_the_portal_is_served_on():
    """Without run.sh (``PORT=8110 gunicorn …``, ``manage.py`` by hand) the setting's default follows ``PORT`` too."""
    env = {key: value for key, value in os.environ.items() if key not in ("SLIPWAY_PORTAL_URL", "PORT")}
    code = "from django.conf import settings; print(settings.SLIPWAY_PORTAL_URL)"
    read = [subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=settings.BASE_DIR,
                           env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings", **extra}, capture_output=True,
                           text=True, check=True).stdout.strip() for extra in ({"PORT": "8110"}, {})]
    assert read == ["http://localhost:8110", "http://localhost:8000"]


def test_the_demo_clock_is_held_before_the_services_start_and_started_once_the_portal_answers(checkout):
    """Issue 46 F.3: the demo's reclaim is told in minutes from when the portal first answers, not from seeding."""
    process = start(checkout, str(free_port()))
    try:
        out = read_until(process, "Logs:")
    finally:
        stop(process)
    lines = out.splitlines()
    seeded = next(i for i, line in enumerate(lines) if line.startswith("manage.py seed_demo"))
    held = lines.index("manage.py demo_clock hold (the portal is silent)")
    started = lines.index("manage.py demo_clock start (the portal answers)")
    banner = next(i for i, line in enumerate(lines) if "Slipway is running" in line)
    assert seeded < held < started < banner, out
