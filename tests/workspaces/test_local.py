"""The sandbox's Jupyter servers: a real ``jupyter-server`` on 127.0.0.1, a random port, the workspace's token,
its home directory; the token in no command line and no log; stopped by its recorded process id."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import wait_for
from workloads.registry import kind_for
from workloads.tasks import apply_workload
from workspaces import access, idle, local, services
from workspaces.constants import WorkspaceState
from workspaces.models import Workspace
from workspaces.tasks import restart_server

pytestmark = pytest.mark.django_db


@pytest.fixture
def server(create, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    workspace = create()
    token = services.token_of(workspace)
    started = local.ensure(workspace, token)
    yield workspace, token, started
    local.remove(workspace)


def answering(url: str, token: str) -> bool:
    try:
        return httpx.get(f"{url}api/status", headers={"Authorization": f"token {token}"}, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_it_runs_a_real_jupyter_server_guarded_by_the_workspace_token(server):
    workspace, token, started = server
    assert started is not None and local.server_of(workspace).port == started.port
    url = f"http://127.0.0.1:{started.port}/notebooks/{workspace.object_name}/"
    wait_for(lambda: answering(url, token), timeout=60, what="the local Jupyter server")
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
    url = f"http://127.0.0.1:{started.port}/notebooks/{workspace.object_name}/"
    wait_for(lambda: answering(url, token), timeout=60, what="the local Jupyter server")
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


def test_a_rotated_token_takes_effect_on_the_running_server(server, published, django_capture_on_commit_callbacks):
    """Issue 46 B2: after unsharing, the old token still opened the server. Rotated, the server is started again
    with the new token (the reconcile cycle's rule: its pod template changed), and the old one opens nothing."""
    workspace, old, started = server
    apply_workload("ws", workspace.pk)  # on the sandbox cluster, as the apply task puts it
    Workspace.objects.filter(pk=workspace.pk).update(state=WorkspaceState.RUNNING)
    url = f"http://127.0.0.1:{started.port}/notebooks/{workspace.object_name}/"
    wait_for(lambda: answering(url, old), timeout=60, what="the local Jupyter server")
    with django_capture_on_commit_callbacks(execute=True):
        assert services.rotate_token(workspace)
    assert ("workspaces.tasks.restart_server", (workspace.pk,)) in published
    assert restart_server(workspace.pk) == "restarted"
    new = services.token_of(workspace)
    restarted = local.server_of(workspace)
    assert new != old and restarted.pid != started.pid
    url = f"http://127.0.0.1:{restarted.port}/notebooks/{workspace.object_name}/"
    wait_for(lambda: answering(url, new), timeout=60, what="the restarted Jupyter server")
    assert not answering(url, old)
    # On the cluster, the Deployment's pod template names the new token's digest: its pod is replaced too.
    deployment = next(o for o in kind_for("ws").manifests(workspace) if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["metadata"]["annotations"]["slipway.dev/secret-env-digest"] == (
        access.credentials(workspace)[1])
