"""The sandbox's Jupyter servers: a real ``jupyter-server`` process per running workspace on a sandbox cluster.

A simulated cluster runs no container, so a notebook would be nothing to open. For a workspace
placed on a sandbox cluster (``SLIPWAY_WORKSPACE_LOCAL_SERVERS``, on by default), once the
cluster says its pod is ready, the kind starts a real Jupyter server on this machine
(:func:`ensure`): bound to 127.0.0.1 on a random free port, serving the workspace's home directory
(``<SLIPWAY_VAR_DIR>/workspaces/<object name>/home``, the stand-in for its home volume: kept across
pauses, removed with the workspace), under the same base URL as its Ingress on a real cluster,
and guarded by the workspace's own token. The token reaches the process in its environment
(``JUPYTER_TOKEN``), never its command line (which ``ps`` lists), and Jupyter does not print a token
it was given; the server's log stays in the workspace's directory.

Where it listens is a row (:class:`workspaces.models.LocalServer`), so the web process hands out
the address the worker's process started. A pause or a delete stops it (:func:`stop`, by its
recorded process id); a server that died is started again by the next cycle. It runs in the
worker's process group, so stopping Slipway (Ctrl-C on ``make run``) stops it too. The package is the
optional extra ``slipway[workspaces]`` (``make run`` installs it); without it no server starts and
the workspace's page says so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

from workspaces.manifests import TOKEN_ENV, base_url, workspace_host
from workspaces.models import LocalServer

logger = logging.getLogger(__name__)

#: How long a stopping server gets after SIGTERM before it is killed.
STOP_SECONDS = 5.0


def available() -> bool:
    """Whether this machine can run Jupyter servers (the ``workspaces`` extra is installed)."""
    return settings.SLIPWAY_WORKSPACE_LOCAL_SERVERS and importlib.util.find_spec("jupyter_server") is not None


def directory(workspace) -> Path:
    """Where the workspace keeps its local files: ``home/`` and the server's log."""
    return Path(settings.VAR_DIR) / "workspaces" / workspace.object_name


def home(workspace) -> Path:
    return directory(workspace) / "home"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs and is a Jupyter server (a recycled id of another program is not)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"jupyter_server" in cmdline and not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


def server_of(workspace) -> LocalServer | None:
    """Its local server when one runs (a row whose process is gone is no server)."""
    server = LocalServer.objects.filter(workspace_id=workspace.pk).first()
    return server if server is not None and _alive(server.pid) else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ensure(workspace, token: str) -> LocalServer | None:
    """Its running local server, started now when there is none (None when this machine cannot run one)."""
    if not available():
        return None
    server = server_of(workspace)
    if server is not None:
        return server
    LocalServer.objects.filter(workspace_id=workspace.pk).delete()  # a dead one's row
    home(workspace).mkdir(parents=True, exist_ok=True)
    port = _free_port()
    jupyter_dir = directory(workspace) / "jupyter"
    env = {**os.environ, TOKEN_ENV: token, "HOME": str(home(workspace)), "JUPYTER_CONFIG_DIR": str(jupyter_dir / "config"),
           "JUPYTER_DATA_DIR": str(jupyter_dir / "data"), "JUPYTER_RUNTIME_DIR": str(jupyter_dir / "runtime")}
    with open(directory(workspace) / "server.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
             "--ServerApp.port_retries=0", f"--ServerApp.base_url={base_url(workspace.object_name)}",
             f"--ServerApp.root_dir={home(workspace)}", "--ServerApp.open_browser=False",
             "--ServerApp.allow_remote_access=False",
             # Browsers reach it through the workspace proxy at its own host, ws-7.localhost (workspaces.proxy),
             # which the proxy passes on: Jupyter checks the Host (and a websocket's Origin) against it.
             f"--ServerApp.local_hostnames={['localhost', workspace_host(workspace.object_name, 'localhost')]!r}",
             # As root (a container, CI) Jupyter refuses to start without being told it may.
             *(["--ServerApp.allow_root=True"] if os.geteuid() == 0 else [])],
            # In the worker's process group, not a session of its own: it outlives the task that started it,
            # and whatever stops the worker (Ctrl-C on make run, a kill) stops it too — nothing is left behind.
            cwd=home(workspace), env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        return LocalServer.objects.create(workspace_id=workspace.pk, pid=process.pid, port=port,
                                          started_at=timezone.now())
    except IntegrityError:  # another cycle started one at the same moment: keep theirs
        _terminate(process.pid)
        return LocalServer.objects.filter(workspace_id=workspace.pk).first()


def _terminate(pid: int) -> None:
    """SIGTERM the server (it shuts its kernels down), then SIGKILL it if it is still there after :data:`STOP_SECONDS`."""
    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + STOP_SECONDS
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it when this process started it


def stop(workspace) -> None:
    """Stop its local server (a pause: the home directory stays)."""
    for server in LocalServer.objects.filter(workspace_id=workspace.pk):
        if _alive(server.pid):
            _terminate(server.pid)
        server.delete()


def remove(workspace) -> None:
    """Stop its local server and remove its local files (the workspace was deleted, with its home volume)."""
    stop(workspace)
    shutil.rmtree(directory(workspace), ignore_errors=True)
