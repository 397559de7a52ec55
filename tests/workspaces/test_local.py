"""The sandbox's Jupyter servers: a real JupyterLab server on 127.0.0.1, a random port, the workspace's token,
its home directory; the token in no command line and no log; stopped by its recorded process id. A notebook
is a shell on this machine: no terminal, nothing of Slipway's environment in the server or its kernels, its
own user when Slipway runs as root; no address handed out before it listens; no zombie left by a stop."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import httpx
import pytest
import websocket
from django.conf import settings as django_settings
from django.urls import reverse

from tests.e2e.conftest import wait_for
from tests.workspaces.jupyter import START_SECONDS, answering, wait_up
from workloads.registry import kind_for
from workloads.tasks import apply_workload
from workspaces import access, idle, local, services
from workspaces.constants import WorkspaceState
from workspaces.models import LocalServer, Workspace
from workspaces.tasks import restart_server

pytestmark = pytest.mark.django_db
#: What the portal's environment holds and no notebook may read (the names; their values are checked too).
PORTAL_SECRETS = {"DATABASE_URL": "postgres://slipway:db-password-marker@127.0.0.1/slipway",
                  "REDIS_URL": "redis://:redis-password-marker@127.0.0.1:6379/0",
                  "SECRET_KEY": "secret-key-marker", "SLIPWAY_SECRET_KEYS": "sealing-key-marker",
                  "SLIPWAY_OIDC_CLIENT_SECRET": "oidc-marker", "DJANGO_SECRET_MARKER": "django-marker"}


@pytest.fixture
def var_dir(settings):
    """A var directory other users may walk through (pytest's own tmp_path is closed to them: 0700)."""
    path = Path(tempfile.mkdtemp(prefix="slipway-ws-test-"))
    path.chmod(0o711)
    settings.VAR_DIR = path
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server(create, var_dir):
    workspace = create()
    token = services.token_of(workspace)
    started = local.ensure(workspace, token)
    yield workspace, token, started
    local.remove(workspace)


def address(workspace, started) -> str:
    return f"http://127.0.0.1:{started.port}/notebooks/{workspace.object_name}/"


def up(server) -> str:
    workspace, token, started = server
    return wait_up(workspace, address(workspace, started), token)


def run_in_kernel(url: str, token: str, code: str) -> str:
    """Start a kernel through the server's API and run ``code`` in it over the kernel's websocket: what it printed."""
    headers = {"Authorization": f"token {token}"}
    kernel = httpx.post(f"{url}api/kernels", headers=headers, json={"name": "python3"}, timeout=30)
    assert kernel.status_code == 201, kernel.text
    channels = f"{url.replace('http://', 'ws://')}api/kernels/{kernel.json()['id']}/channels?session_id={uuid.uuid4()}"
    connection = websocket.create_connection(channels, header=[f"Authorization: token {token}"], timeout=60)
    try:
        msg_id = uuid.uuid4().hex
        connection.send(json.dumps({
            "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex, "msg_type": "execute_request",
                       "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False}}))
        printed, errors = [], []
        while True:
            message = json.loads(connection.recv())
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = message["msg_type"]
            if kind == "stream":
                printed.append(message["content"]["text"])
            elif kind == "error":
                errors.append("\n".join(message["content"]["traceback"]))
            elif kind == "status" and message["content"]["execution_state"] == "idle":
                break
        assert not errors, errors
        return "".join(printed)
    finally:
        connection.close()


def test_it_runs_a_real_jupyter_server_guarded_by_the_workspace_token(server):
    workspace, token, started = server
    url = up(server)
    assert started is not None and local.server_of(workspace).port == started.port
    # Its activity, as the idle rule reads it: no kernel busy.
    activity = idle.read_activity(url, token)
    assert activity is not None and activity.kernels_busy == 0
    assert idle.read_activity(url, token) == activity  # asking is no activity: it never keeps a workspace awake
    # Without the token (or with another) it lets no one in.
    assert httpx.get(f"{url}api/status", timeout=5).status_code == 403
    assert httpx.get(f"{url}api/status", headers={"Authorization": "token nope"}, timeout=5).status_code == 403
    # Its files are the workspace's home directory (the home volume's stand-in).
    created = httpx.put(f"{url}api/contents/hello.txt", headers={"Authorization": f"token {token}"},
                        json={"type": "file", "format": "text", "content": "kept"}, timeout=5)
    assert created.status_code == 201
    assert (local.home(workspace) / "hello.txt").read_text() == "kept"
    # Started again, it is the same one (one per workspace).
    assert local.ensure(workspace, token).pid == started.pid


def test_the_token_is_in_no_command_line_and_no_log(server):
    workspace, token, started = server
    up(server)
    assert token.encode() not in Path(f"/proc/{started.pid}/cmdline").read_bytes()
    log = (local.directory(workspace) / "server.log").read_text()
    assert "Jupyter Server" in log and token not in log


def test_a_stop_ends_the_process_and_keeps_the_home_directory(server):
    workspace, _token, started = server
    local.home(workspace).joinpath("notes.md").write_text("# mine")
    local.stop(workspace)
    assert local.server_of(workspace) is None
    cmdline = Path(f"/proc/{started.pid}/cmdline")  # gone, or a zombie's (empty) until its parent reaps it
    assert not cmdline.exists() or cmdline.read_bytes() == b""
    assert local.home(workspace).joinpath("notes.md").read_text() == "# mine"
    local.remove(workspace)
    assert not local.directory(workspace).exists()


def portal_variables(environment: dict[str, str]) -> list[str]:
    """The variables of ``environment`` that are the portal's: by name, or holding one of its values."""
    return sorted(name for name, value in environment.items()
                  if name in PORTAL_SECRETS or name.startswith(("SLIPWAY_", "DJANGO_"))
                  or any(secret in value for secret in PORTAL_SECRETS.values()))


@pytest.fixture
def portal_environment(monkeypatch):
    """The worker's environment holding the portal's settings and secrets, as it does in production."""
    for name, value in PORTAL_SECRETS.items():
        monkeypatch.setenv(name, value)


def test_no_terminal_can_be_opened(server):
    _workspace, token, _started = server
    url = up(server)
    headers = {"Authorization": f"token {token}"}
    assert httpx.post(f"{url}api/terminals", headers=headers, timeout=5).status_code == 404
    assert httpx.get(f"{url}api/terminals", headers=headers, timeout=5).status_code == 404
    assert httpx.get(f"{url}terminals/1", headers=headers, timeout=5).status_code == 404
    assert httpx.get(f"{url}api/status", headers=headers, timeout=5).status_code == 200  # the server itself answers


def test_nothing_of_the_portals_environment_reaches_the_server_or_its_kernels(portal_environment, server):
    workspace, token, started = server
    url = up(server)
    server_environment = dict(line.split("=", 1) for line in
                              Path(f"/proc/{started.pid}/environ").read_bytes().decode().split("\0") if line)
    assert portal_variables(server_environment) == []
    assert set(server_environment) <= {*local.INHERITED_ENV, "PATH", "HOME", "USER", "LOGNAME", "JUPYTER_TOKEN",
                                       "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "PYTHONPATH",
                                       "JUPYTER_PATH", "JUPYTERLAB_DIR", "JUPYTER_CONFIG_PATH"}

    # A notebook's kernel: its environment, its user, and what it can read of the worker's (this process's).
    printed = run_in_kernel(url, token, f"""
import json, os
try:
    with open("/proc/{os.getpid()}/environ", "rb") as worker:
        worker_environment = worker.read().decode(errors="replace")
except OSError as exc:
    worker_environment = type(exc).__name__
print(json.dumps({{"environ": dict(os.environ), "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
                  "worker": worker_environment}}))
""")
    seen = json.loads(printed)
    assert portal_variables(seen["environ"]) == [] and seen["environ"]["HOME"] == str(local.home(workspace))
    if local.identity(workspace)[0] is not None:  # Slipway as root: the workspace's own user, which may not read
        uid = own_uid(workspace)                   # the worker's environment
        assert (seen["uid"], seen["gid"], seen["groups"]) == (uid, uid, [])
        assert seen["worker"] == "PermissionError"
    else:  # not root (or a host that does not allow it): Slipway's own user (docs/workspaces.md)
        assert seen["uid"] == os.geteuid()


def own_uid(workspace) -> int:
    return django_settings.SLIPWAY_WORKSPACE_LOCAL_UID_BASE + workspace.pk


def test_a_stop_ends_every_process_of_the_workspaces_user(server):
    workspace, token, _started = server
    if local.identity(workspace)[0] is None:
        pytest.skip("no user of its own here: Slipway does not run as root, or the host does not allow it")
    url = up(server)
    left = int(run_in_kernel(url, token, """
import subprocess
print(subprocess.Popen(["sleep", "600"], start_new_session=True).pid)
"""))
    assert Path(f"/proc/{left}/status").read_text().count(str(own_uid(workspace))) >= 1
    local.stop(workspace)
    wait_for(lambda: not running(left), timeout=15, what="the notebook's background process to end")


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        return not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")
    except OSError:
        return False


def test_it_serves_jupyterlab_where_open_points(server):
    _workspace, token, _started = server
    url = up(server)
    lab = httpx.get(f"{url}lab", headers={"Authorization": f"token {token}"}, timeout=30)
    assert lab.status_code == 200 and "<title>JupyterLab</title>" in lab.text


def test_a_server_stopped_by_another_process_leaves_no_zombie(server):
    """The worker's process that stops a server is often not the one that started it (Celery's pool)."""
    _workspace, _token, started = server
    up(server)
    assert os.getpgid(started.pid) == os.getpgid(0)  # in the worker's group: stopping Slipway stops it too
    stopper = multiprocessing.get_context("fork").Process(target=local._terminate, args=(started.pid,))
    stopper.start()
    stopper.join(timeout=30)
    assert stopper.exitcode == 0
    wait_for(lambda: not Path(f"/proc/{started.pid}").exists(), timeout=15, what="the stopped server to be reaped")


def listening_on(port: int) -> socket.socket:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen()
    return listener


def test_open_answers_409_until_the_server_accepts_connections(create, api, client, member, var_dir):
    """After a resume the server's process runs a moment before it listens: no address is handed out before."""
    workspace = create()
    Workspace.objects.filter(pk=workspace.pk).update(state=WorkspaceState.RUNNING)
    # A process that is a Jupyter server by its command line, on a port where nothing listens yet.
    starting = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()", "jupyter_server"])
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        LocalServer.objects.create(workspace_id=workspace.pk, pid=starting.pid, port=port,
                                   started_at=workspace.created_at)
        url = f"/api/v1/workspaces/{workspace.pk}/open/"
        refused = api.get(url)
        assert refused.status_code == 409
        assert "not running yet" in refused.json()["errors"]["detail"][0]
        client.force_login(member)  # the portal's Open: back to the workspace's page, saying why
        page = client.get(reverse("workspaces:workspace-open", args=[workspace.pk]), follow=True)
        assert page.redirect_chain[0][0] == workspace.get_absolute_url() and "not running yet" in page.content.decode()
        with listening_on(port):
            opened = api.get(url)
            # Once it listens: the workspace's own host (through the sandbox's workspace proxy), with a ticket.
            host = f"http://{workspace.object_name}.localhost:{django_settings.SLIPWAY_WORKSPACE_PROXY_PORT}/"
            assert opened.status_code == 200 and opened.json()["url"].startswith(host)
            assert client.get(reverse("workspaces:workspace-open", args=[workspace.pk]))["Location"].startswith(host)
    finally:
        starting.kill()
        starting.wait()


def uid_of(pid: int) -> int:
    """The real uid of process ``pid``."""
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:"))
    return int(line.split()[1])


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can change users")
def test_where_no_user_of_its_own_can_be_taken_it_runs_as_slipways_and_says_so(create, settings, tmp_path, caplog,
                                                                              portal_environment):
    workspace = create()
    token = services.token_of(workspace)
    # A var directory other users cannot walk through (pytest's: its base folder is 0700).
    settings.VAR_DIR = tmp_path
    with caplog.at_level(logging.WARNING, logger="workspaces.local"):
        started = local.ensure(workspace, token)
    try:
        assert "runs as Slipway's own user" in caplog.text and "closed to other users" in caplog.text
        wait_up(workspace, address(workspace, started), token)
        assert uid_of(started.pid) == os.geteuid()
        environ = Path(f"/proc/{started.pid}/environ").read_bytes().decode()
        assert not any(marker in environ for marker in PORTAL_SECRETS.values())  # still the allow-listed environment
    finally:
        local.remove(workspace)
    # An id this machine's user namespace does not have.
    settings.SLIPWAY_WORKSPACE_LOCAL_UID_BASE = 2**32 - 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="workspaces.local"):
        assert local.identity(workspace)[0] is None
    assert "does not exist in this user namespace" in caplog.text
def test_a_rotated_token_takes_effect_on_the_running_server(server, published, django_capture_on_commit_callbacks):
    """Issue 46 B2: after unsharing, the old token still opened the server. Rotated, the server is started again
    with the new token (the reconcile cycle's rule: its pod template changed), and the old one opens nothing."""
    workspace, old, started = server
    apply_workload("ws", workspace.pk)  # on the sandbox cluster, as the apply task puts it
    Workspace.objects.filter(pk=workspace.pk).update(state=WorkspaceState.RUNNING)
    url = f"http://127.0.0.1:{started.port}/notebooks/{workspace.object_name}/"
    wait_up(workspace, url, old)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.rotate_token(workspace)
    assert ("workspaces.tasks.restart_server", (workspace.pk,)) in published
    assert restart_server(workspace.pk) == "restarted"
    new = services.token_of(workspace)
    restarted = wait_for(lambda: local.server_of(workspace), timeout=START_SECONDS, what="the restarted server to listen")
    assert new != old and restarted.pid != started.pid
    url = f"http://127.0.0.1:{restarted.port}/notebooks/{workspace.object_name}/"
    wait_up(workspace, url, new)
    assert not answering(url, old)
    # On the cluster, the Deployment's pod template names the new token's digest: its pod is replaced too.
    deployment = next(o for o in kind_for("ws").manifests(workspace) if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["metadata"]["annotations"]["slipway.dev/secret-env-digest"] == (
        access.credentials(workspace)[1])
