"""A new user's walk to a notebook: a running workspace's Open, in a real browser, lands on JupyterLab.

The sandbox runs a real JupyterLab server for the workspace (workspaces/local.py); the portal's Open
hands the owner its address. Before JupyterLab was in the ``workspaces`` extra, ``/lab`` was Jupyter's
"404 : Not Found" page. Playwright drives Debian's chromium (offline), like the other browser tests.
"""

from __future__ import annotations

import shutil
import tempfile
from decimal import Decimal
from pathlib import Path

import pytest

from quotas.demo import seed_flavors, seed_team_quotas
from teams.models import Role
from tests.browser.support import BROWSER_MARKS, LAPTOP
from tests.e2e.conftest import wait_for
from tests.factories import add_member, make_team, make_user
from tests.workspaces.proxying import run_proxy
from workspaces import local, services
from workspaces.constants import WorkspaceState
from workspaces.models import Workspace

PASSWORD = "pw-Slipway-123"

# PostgreSQL: the workspace proxy is a process of its own that reads the test's database, which a SQLite test
# database is not shared with (tests/workspaces/test_proxy.py is marked so too); CI runs it on PostgreSQL.
pytestmark = [*BROWSER_MARKS, pytest.mark.postgres, pytest.mark.browser_page(viewport=LAPTOP)]


@pytest.fixture
def running_workspace(transactional_db, settings, monkeypatch):
    """Mia's workspace, running on the sandbox with its local JupyterLab server accepting connections."""
    var = Path(tempfile.mkdtemp(prefix="slipway-ws-browser-"))
    var.chmod(0o711)  # other users may walk through it: as root, the server runs as the workspace's own user
    settings.VAR_DIR = var
    monkeypatch.setattr("core.queueing.publish", lambda task, *args, **kwargs: True)
    team = make_team("ml-research", "ML Research")
    user = make_user("mia", password=PASSWORD)
    add_member(team, user, Role.MEMBER)
    seed_flavors()
    seed_team_quotas(team, {"a100-1g.10gb": 1}, Decimal("100000"))
    workspace = services.create_workspace(user, team, {"name": "explore", "flavor": "a100-1g.10gb"})
    Workspace.objects.filter(pk=workspace.pk).update(state=WorkspaceState.RUNNING)
    assert local.ensure(workspace, services.token_of(workspace)) is not None
    wait_for(lambda: local.server_of(workspace), timeout=60, what="the workspace's server to accept connections")
    yield workspace
    local.remove(workspace)
    shutil.rmtree(var, ignore_errors=True)


@pytest.fixture
def proxy(live_server, settings, tmp_path):
    """The sandbox's workspace proxy, as make run starts it: Open leads to the workspace's own host through it."""
    for port in run_proxy(tmp_path, live_server.url):
        settings.SLIPWAY_WORKSPACE_PROXY_PORT = port
        yield port


def test_open_lands_on_jupyterlab(live_server, browser, running_workspace, proxy):
    browser.goto(f"{live_server.url}/login/")
    browser.fill("#id_username", "mia")
    browser.fill("#id_password", PASSWORD)
    browser.click("button[type=submit]")
    browser.wait_for_url(f"{live_server.url}/")

    browser.goto(f"{live_server.url}{running_workspace.get_absolute_url()}")
    with browser.expect_popup() as opening:  # Open starts a tab of its own
        browser.get_by_role("link", name="Open", exact=True).click()
    notebook = opening.value
    notebook.wait_for_selector("#jp-main-dock-panel")  # JupyterLab's shell, drawn by its own scripts
    # On the workspace's own host (never the portal's: its cookies stay there), through the proxy.
    assert notebook.url.startswith(f"http://{running_workspace.object_name}.localhost:{proxy}/")
    assert notebook.url.split("?")[0].endswith(f"/notebooks/{running_workspace.object_name}/lab")
    assert "JupyterLab" in notebook.title() and "404" not in notebook.title()
    notebook.wait_for_selector(".jp-Launcher")  # its launcher: a notebook is one click away
