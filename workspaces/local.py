"""The sandbox's Jupyter servers: a real JupyterLab server process per running workspace on a sandbox cluster.

A simulated cluster runs no container, so a notebook would be nothing to open. For a workspace
placed on a sandbox cluster (``SLIPWAY_WORKSPACE_LOCAL_SERVERS``, on by default), once the
cluster says its pod is ready, the kind starts a real Jupyter server with JupyterLab on this machine
(:func:`ensure`): bound to 127.0.0.1 on a random free port, serving the workspace's home directory
(``<SLIPWAY_VAR_DIR>/workspaces/<object name>/home``, the stand-in for its home volume: kept across
pauses, removed with the workspace), under the same base URL as its Ingress on a real cluster,
and guarded by the workspace's own token. The token reaches the process in its environment
(``JUPYTER_TOKEN``), never its command line (which ``ps`` lists), and Jupyter does not print a token
it was given; the server's log stays in the workspace's directory.

A notebook is a shell on this machine, so the server is cut off from Slipway as far as the host lets:

- **its environment** is built from an allow-list (:func:`environment`), never copied from the
  worker's: no ``DATABASE_URL``, ``SECRET_KEY``, sealing key, ``REDIS_URL`` or other setting of
  Slipway reaches it, nor its kernels (a kernel inherits the server's environment);
- **its user**: when Slipway runs as root, the server runs as a user of its own workspace
  (uid and gid ``SLIPWAY_WORKSPACE_LOCAL_UID_BASE`` + the workspace's id, no supplementary group),
  which owns its home and Jupyter directories and nothing else, so it can neither read another
  process's ``/proc/<pid>/environ`` nor another workspace's files. Where the host does not allow
  that user (a user namespace that does not map the id, a var directory or a Python other users
  cannot reach) and when Slipway does not run as root, the server runs as Slipway's own user and
  the worker's log says why (docs/workspaces.md says what follows);
- **no terminals**: ``jupyter_server_terminals`` is off (a terminal is a shell a click away).

This is a single-machine stand-in for a workspace's pod, not an isolation boundary (docs/workspaces.md).

Where it listens is a row (:class:`workspaces.models.LocalServer`), so the web process hands out
the address the worker's process started; it is handed out only once the server accepts connections
(:func:`server_of`). A pause or a delete stops it (:func:`stop`, by its recorded process id, and with
it every process its own user left); a server that died is started again by the next cycle. The process
that started a server reaps it when it exits (:func:`_reap`), whichever process stopped it, so no
zombie stays behind. It runs in the worker's process group, so stopping Slipway (Ctrl-C on
``make run``, which stops the worker's whole group) stops it too. The packages are the optional extra
``slipway[workspaces]`` (``make run`` installs it); without them no server starts and the workspace's page says so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

from core import processes
from workspaces.manifests import TOKEN_ENV, base_url, workspace_host
from workspaces.models import LocalServer

logger = logging.getLogger(__name__)

#: How long a stopping server gets after SIGTERM before it is killed.
STOP_SECONDS = 5.0
#: How long :func:`server_of` waits for the server's port to accept a connection.
CONNECT_SECONDS = 0.5
#: The only variables of the worker's environment a server (and so its kernels) gets: none is secret.
INHERITED_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
#: The programs a notebook finds: Slipway's virtualenv (its Python, pip, jupyter) and the system's.
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
#: The name a notebook's user goes by (``USER``, ``LOGNAME``): the docker-stacks images' user.
NOTEBOOK_USER = "jovyan"


class CannotIsolate(Exception):
    """The server cannot run as a user of its own here: it runs as Slipway's own user (:func:`identity`)."""


def available() -> bool:
    """Whether this machine can run Jupyter servers (the ``workspaces`` extra is installed)."""
    return settings.SLIPWAY_WORKSPACE_LOCAL_SERVERS and importlib.util.find_spec("jupyter_server") is not None


def directory(workspace) -> Path:
    """Where the workspace keeps its local files: ``home/``, ``jupyter/`` (its user's) and the server's log (Slipway's)."""
    return Path(settings.VAR_DIR) / "workspaces" / workspace.object_name


def home(workspace) -> Path:
    return directory(workspace) / "home"


def _jupyter_dir(workspace) -> Path:
    return directory(workspace) / "jupyter"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs and is a Jupyter server (a recycled id of another program is not)."""
    return processes.alive(pid, b"jupyter_server")


def running(workspace) -> LocalServer | None:
    """Its local server's row when its process runs (a row whose process is gone is no server)."""
    server = LocalServer.objects.filter(workspace_id=workspace.pk).first()
    return server if server is not None and _alive(server.pid) else None


def _accepting(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=CONNECT_SECONDS):
            return True
    except OSError:
        return False


def server_of(workspace) -> LocalServer | None:
    """Its local server when one runs and accepts connections: a server just started (after a resume)
    is no address to hand out until it listens, or the browser's first request is refused."""
    server = running(workspace)
    return server if server is not None and _accepting(server.port) else None


def environment(workspace, token: str, python: str = sys.executable) -> dict[str, str]:
    """The whole environment of its server and kernels: built from an allow-list, nothing else of the worker's."""
    jupyter_dir = _jupyter_dir(workspace)
    return {
        **{name: os.environ[name] for name in INHERITED_ENV if name in os.environ},
        "PATH": f"{Path(python).parent}:{SYSTEM_PATH}",
        "HOME": str(home(workspace)), "USER": NOTEBOOK_USER, "LOGNAME": NOTEBOOK_USER,
        "JUPYTER_CONFIG_DIR": str(jupyter_dir / "config"), "JUPYTER_DATA_DIR": str(jupyter_dir / "data"),
        "JUPYTER_RUNTIME_DIR": str(jupyter_dir / "runtime"), TOKEN_ENV: token,
    }


def _mapped(ids_file: str, wanted: int) -> bool:
    """Whether id ``wanted`` exists in this process's user namespace (``/proc/self/uid_map`` or ``gid_map``)."""
    with contextlib.suppress(OSError):
        for line in Path(ids_file).read_text().splitlines():
            inside, _outside, count = (int(field) for field in line.split())
            if inside <= wanted < inside + count:
                return True
    return False


def account(workspace) -> int | None:
    """The uid (and gid) its server runs as: its own when Slipway runs as root, None (Slipway's user) otherwise.

    Raises :class:`CannotIsolate` when Slipway runs as root but that user cannot be taken here."""
    if os.geteuid() != 0:
        return None
    uid = settings.SLIPWAY_WORKSPACE_LOCAL_UID_BASE + workspace.pk
    if not (_mapped("/proc/self/uid_map", uid) and _mapped("/proc/self/gid_map", uid)):
        raise CannotIsolate(f"uid {uid} does not exist in this user namespace (SLIPWAY_WORKSPACE_LOCAL_UID_BASE "
                            "names the first of the workspaces' ids)")
    if not _reachable(Path(settings.VAR_DIR)):
        raise CannotIsolate(f"{settings.VAR_DIR} or a folder above it is closed to other users (no o+x), so the "
                            "workspace's own user cannot reach its home: open it, or choose another SLIPWAY_VAR_DIR")
    return uid


def _reachable(path: Path) -> bool:
    """Whether any user may walk down to ``path`` (every folder on the way has o+x) and into it, or read it."""
    path = path.resolve()
    mode = path.stat().st_mode
    return (all(folder.stat().st_mode & stat.S_IXOTH for folder in path.parents)
            and bool(mode & (stat.S_IXOTH if stat.S_ISDIR(mode) else stat.S_IROTH)))


def interpreter(uid: int | None) -> tuple[str, dict[str, str]]:
    """The Python its server (and so its kernels: ipykernel's kernel runs the server's) runs on, and what it needs
    in its environment.

    Slipway's own (its virtualenv's) when the workspace's user may run it. A Python under a folder closed to
    other users (pyenv's under /root, say) is not: then the system's Python of the same version, given the
    virtualenv's packages (``PYTHONPATH``) and Jupyter's files in it (its configuration, which enables
    JupyterLab, kernel specs, JupyterLab's assets), or :class:`CannotIsolate` when there is none."""
    if uid is None or _reachable(Path(sys.executable)):
        return sys.executable, {}
    packages = sysconfig.get_paths()["purelib"]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(version, path=SYSTEM_PATH)
    if system is None or not (_reachable(Path(system)) and _reachable(Path(packages))):
        raise CannotIsolate(f"{sys.executable} is closed to other users and this machine has no {version} they may "
                            "run with Slipway's packages")
    shared = Path(sys.prefix) / "share" / "jupyter"
    return system, {"PYTHONPATH": packages, "JUPYTER_PATH": str(shared), "JUPYTERLAB_DIR": str(shared / "lab"),
                    "JUPYTER_CONFIG_PATH": str(Path(sys.prefix) / "etc" / "jupyter")}


def _own(path: Path, uid: int) -> None:
    """``path`` and everything in it owned by ``uid`` (a home left by a server that ran as root); links not followed."""
    path.mkdir(parents=True, exist_ok=True)
    if path.stat().st_uid != uid:
        for root, folders, files in os.walk(path):
            for name in (*folders, *files):
                os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)
        os.chown(path, uid, uid)
    path.chmod(0o700)


def _prepare(workspace, uid: int | None) -> None:
    """Its directory (Slipway's: the log stays where its user cannot replace it) with its home and Jupyter directories."""
    directory(workspace).mkdir(parents=True, exist_ok=True)
    for folder in (home(workspace), _jupyter_dir(workspace)):
        if uid is None:
            folder.mkdir(exist_ok=True)
        else:
            _own(folder, uid)
    if uid is not None:
        directory(workspace).chmod(0o711)


def _reap(process: subprocess.Popen) -> None:
    """Wait for the server in a thread of the process that started it: whoever stops it, it leaves no zombie."""
    threading.Thread(target=process.wait, name=f"reap-jupyter-{process.pid}", daemon=True).start()


def identity(workspace) -> tuple[int | None, str, dict[str, str]]:
    """Who its server runs as (a uid, or None: Slipway's own user), on which Python, with what in its environment.

    Its own user when Slipway runs as root and the host allows it (:func:`account`, :func:`interpreter`);
    where it does not, Slipway's own user, and the worker's log says so and why (the environment stays the
    allow-listed one and terminals stay off, but a notebook can then read what Slipway's user can)."""
    try:
        uid = account(workspace)
        return (uid, *interpreter(uid))
    except CannotIsolate as exc:
        logger.warning("workspace %s: its local Jupyter server runs as Slipway's own user, not one of its own: %s",
                       workspace.object_name, exc)
        return None, sys.executable, {}


def _command(workspace, python: str, port: int, as_root: bool) -> list[str]:
    return [python, "-m", "jupyter_server", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0", f"--ServerApp.base_url={base_url(workspace.object_name)}",
            f"--ServerApp.root_dir={home(workspace)}", "--ServerApp.open_browser=False",
            "--ServerApp.allow_remote_access=False",
            # Browsers reach it through the workspace proxy at its own host, ws-7.localhost (workspaces.proxy),
            # which the proxy passes on: Jupyter checks the Host (and a websocket's Origin) against it.
            f"--ServerApp.local_hostnames={['localhost', workspace_host(workspace.object_name, 'localhost')]!r}",
            # No terminals: neither the setting nor the extension that serves them.
            "--ServerApp.terminals_enabled=False", "--ServerApp.jpserver_extensions=jupyter_server_terminals=False",
            # As root (where no user of its own can be taken) Jupyter refuses to start without being told it may.
            *(["--ServerApp.allow_root=True"] if as_root else [])]


def ensure(workspace, token: str) -> LocalServer | None:
    """Its running local server, started now when there is none (None when this machine cannot run one)."""
    if not available():
        return None
    server = running(workspace)
    if server is not None:
        return server
    LocalServer.objects.filter(workspace_id=workspace.pk).delete()  # a dead one's row
    uid, python, python_env = identity(workspace)
    try:
        _prepare(workspace, uid)
    except OSError as exc:
        logger.error("workspace %s: no local Jupyter server: %s", workspace.object_name, exc)
        return None
    port = processes.free_port()
    user = {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
    try:
        with open(directory(workspace) / "server.log", "ab") as log:
            process = subprocess.Popen(
                _command(workspace, python, port, as_root=uid is None and os.geteuid() == 0),
                # In the worker's process group, not a session of its own: it outlives the task that started it,
                # and whatever stops the worker's group (Ctrl-C on make run, a kill) stops it too.
                cwd=home(workspace), env={**environment(workspace, token, python), **python_env},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, **user)
    except (OSError, subprocess.SubprocessError) as exc:  # e.g. a container that may not change users
        logger.error("workspace %s: no local Jupyter server: %s", workspace.object_name, exc)
        return None
    _reap(process)
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


def _end_user_processes(workspace) -> None:
    """Kill whatever its own user still runs (a kernel of a killed server, a process a notebook left in the background)."""
    if not directory(workspace).exists():
        return  # it never had a server here (a workspace on a real cluster)
    try:
        uid = account(workspace)
        python = interpreter(uid)[0]
    except CannotIsolate:
        return  # its server ran as Slipway's own user: there is no user of its own whose processes to end
    if uid is None:
        return
    try:
        # kill(-1) from a process of that user reaches every process of that user, and nothing else.
        subprocess.run([python, "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"],
                       user=uid, group=uid, extra_groups=[], env={}, check=False, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("workspace %s: its user's processes not ended: %s", workspace.object_name, exc)


def stop(workspace) -> None:
    """Stop its local server (a pause: the home directory stays)."""
    for server in LocalServer.objects.filter(workspace_id=workspace.pk):
        if _alive(server.pid):
            _terminate(server.pid)
        server.delete()
    _end_user_processes(workspace)


def remove(workspace) -> None:
    """Stop its local server and remove its local files (the workspace was deleted, with its home volume)."""
    stop(workspace)
    shutil.rmtree(directory(workspace), ignore_errors=True)
