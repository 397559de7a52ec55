"""Workspaces end to end: the API → admission → a real Celery worker → the sandbox → a real local Jupyter server.

Created on a MIG slice, the workspace runs and its Jupyter server answers through the address "Open"
hands its owner — its own host, ``ws-<id>.localhost``, served by the workspace proxy (a real process),
which exchanges the address's one-use ticket for the workspace's cookie; a file is written in its home directory; with no activity for its (shortened, one
minute) idle window — no notebook activity, its simulated GPU idle — the worker pauses it: its pod
and server stop, its quota goes back, its owner is told what it saves per hour. Resumed through
admission, it runs again and the file is still there. Another team's member gets 404, a teammate 403
until the owner shares it (with the admins), and ``/workspaces/auth/`` answers 401 to the portal's session. The
token rotates on resume: the old one opens nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from django.test import Client

from billing.models import QuotaHold
from core.formatting import format_rate
from notifications.models import Event
from quotas.demo import seed_flavors, seed_team_quotas
from tests.e2e.conftest import lend, module_worker, wait_for
from tests.workspaces.proxying import browser_on, run_proxy, signed_in_through
from workspaces.models import LocalServer, Workspace
from workspaces.services import token_of

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(420)]
URL = "/api/v1/workspaces/"


@pytest.fixture(scope="module")
def workspaces_worker(django_db_setup, tmp_path_factory):
    # The Jupyter server is asked about its activity every cycle (production: every minute). Its var directory is
    # one other users may walk through (pytest's are 0700): as root, a workspace's server runs as a user of its own.
    var = Path(tempfile.mkdtemp(prefix="slipway-ws-e2e-"))
    var.chmod(0o711)
    yield from module_worker(tmp_path_factory, SLIPWAY_WORKSPACE_ACTIVITY_SECONDS="0.5", SLIPWAY_VAR_DIR=str(var))
    shutil.rmtree(var, ignore_errors=True)


@pytest.fixture
def worker(transactional_db, workspaces_worker):
    yield from lend(workspaces_worker)
    # The servers the worker started for this test's workspaces (by the process ids it recorded), were
    # any left: they run in the worker's process group, which a killed worker takes with it.
    for pid in LocalServer.objects.values_list("pid", flat=True):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def proxy(transactional_db, settings, tmp_path):
    """The workspace proxy, as make run starts it; the portal's Open sends browsers to its port."""
    for port in run_proxy(tmp_path, "http://127.0.0.1:8999"):
        settings.SLIPWAY_WORKSPACE_PROXY_PORT = port
        yield port


@pytest.fixture
def api(team, member, api_client_for):
    seed_flavors()
    seed_team_quotas(team, {"a100-1g.10gb": 1}, Decimal("100000"))
    member.email = "mia@example.com"
    member.save()
    return api_client_for(member)


def body(api, pk: int) -> dict:
    return api.get(f"{URL}{pk}/").json()


def until(api, pk: int, check, what: str, timeout: float = 90) -> dict:
    return wait_for(lambda: (lambda found: found if check(found) else None)(body(api, pk)), timeout=timeout,
                    interval=0.3, what=what)


def opened(api, pk: int) -> str:
    """The address "Open" hands the owner, once the worker started the workspace's server."""
    return wait_for(lambda: (lambda r: r.json()["url"] if r.status_code == 200 else None)(
        api.get(f"{URL}{pk}/open/")), timeout=60, interval=0.3, what="the workspace's server to be open")


def jupyter(url: str) -> tuple[httpx.Client, str]:
    """Through the proxy with the Open address's ticket: a browser holding the workspace's cookie, and the base path."""
    return signed_in_through(url)


def answering(browser: httpx.Client, base: str) -> bool:
    try:
        return browser.get(f"{base}api/status", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def direct(workspace_pk: int, token: str, path: str = "api/status") -> int:
    """The local server asked directly (as any process of this machine may), with ``token``: its status code."""
    server = LocalServer.objects.filter(workspace_id=workspace_pk).first()
    if server is None:
        return 0
    try:
        return httpx.get(f"http://127.0.0.1:{server.port}/notebooks/ws-{workspace_pk}/{path}",
                         headers={"Authorization": f"token {token}"}, timeout=2).status_code
    except httpx.HTTPError:
        return 0


def test_a_workspace_runs_pauses_when_idle_and_resumes_with_its_files(worker, proxy, api, team, member, outsider,
                                                                       viewer, team_admin, api_client_for):
    created = api.post(URL, {"team": team.slug, "name": "explore", "flavor": "a100-1g.10gb", "idle_minutes": 1,
                             "home_gb": 10, "env": {"SLIPWAY_SIM_LOAD_SECONDS": "1"}}, format="json")
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    until(api, pk, lambda b: b["state"] == "running", "the workspace to run")

    # 1. Its Jupyter server answers through the address handed to its owner: its own host, a ticket, no token.
    address = opened(api, pk)
    assert urlsplit(address).hostname == f"ws-{pk}.localhost" and "token=" not in address
    browser, base = jupyter(address)
    wait_for(lambda: answering(browser, base), timeout=60, what="the Jupyter server to answer")
    status = browser.get(f"{base}api/status").json()
    assert {"started", "last_activity", "kernels"} <= set(status)
    assert browser_on(address).get(f"{base}api/status").status_code == 302  # without the cookie: to the portal's Open

    # 2. A file in its home directory.
    written = browser.put(f"{base}api/contents/results.txt",
                          json={"type": "file", "format": "text", "content": "epoch 3: 0.91"})
    assert written.status_code == 201
    first_token = token_of(Workspace.objects.get(pk=pk))

    # 3. Who may: another team's member 404, a teammate 403 (an admin too, until the owner shares it).
    assert api_client_for(outsider).get(f"{URL}{pk}/open/").status_code == 404
    assert api_client_for(viewer).get(f"{URL}{pk}/open/").status_code == 403
    admin = api_client_for(team_admin)
    assert admin.get(f"{URL}{pk}/open/").status_code == 403
    assert api.post(f"{URL}{pk}/share/", {"shared_with_admins": True}, format="json").status_code == 200
    assert admin.get(f"{URL}{pk}/open/").status_code == 200
    auth = f"/workspaces/auth/?workspace={pk}"
    assert Client().get(auth).status_code == 401
    signed_in = Client()
    signed_in.force_login(member)
    assert signed_in.get(auth).status_code == 401  # the portal's session opens no workspace

    # 4. No activity for its idle window (and its GPU idle): paused, the quota back, the owner told.
    paused = until(api, pk, lambda b: b["state"] == "paused", "the idle workspace to pause", timeout=150)
    assert paused["pause_cause"] == "idle" and "saves" in paused["reason"]
    assert not QuotaHold.objects.held().filter(ref=f"ws:{pk}").exists()
    event = Event.objects.get(event_kind="workspace_paused")
    # Paused, it costs nothing per hour; what pausing saves is what it cost running, in the one rounding.
    assert Decimal(paused["cost_per_hour"]) == 0
    assert f"saves {format_rate(Decimal(paused['running_cost_per_hour']), 'USD')}/h" in event.text
    wait_for(lambda: event.deliveries.filter(target="mia@example.com").exists(), timeout=30,
             what="the owner's notice")
    wait_for(lambda: direct(pk, first_token) == 0, timeout=30, what="the paused workspace's server to stop")
    assert browser.get(f"{base}api/status").status_code == 409  # the proxy: it does not run
    assert api.get(f"{URL}{pk}/open/").status_code == 409

    # 5. Resumed through admission: running again, and the file is still in its home directory.
    resumed = api.post(f"{URL}{pk}/resume/")
    assert resumed.status_code == 200 and resumed.json()["state"] in ("admitted", "starting", "running")
    until(api, pk, lambda b: b["state"] == "running", "the resumed workspace to run")
    # The cookie of before the pause opens nothing: the token rotated on resume, and the cookie named the old one.
    wait_for(lambda: browser.get(f"{base}api/status").status_code == 302, timeout=60,
             what="the old cookie to send the browser to the portal's Open")
    browser, base = jupyter(opened(api, pk))
    wait_for(lambda: answering(browser, base), timeout=60, what="the resumed Jupyter server to answer")
    kept = browser.get(f"{base}api/contents/results.txt")
    assert kept.status_code == 200 and kept.json()["content"] == "epoch 3: 0.91"
    token = token_of(Workspace.objects.get(pk=pk))
    assert token != first_token and direct(pk, first_token) == 403 and direct(pk, token) == 200

    # The tokens were in no log: the worker's (which asked the server about its activity all along) or the server's.
    logs = list(Path(worker.env["SLIPWAY_VAR_DIR"]).glob("workspaces/*/server.log"))
    assert logs
    for secret in (first_token, token):
        assert secret not in worker.logs()
        assert all(secret not in log.read_text() for log in logs)

    # 6. Deleted: its server stops and its home goes with it.
    deleted = api.delete(f"{URL}{pk}/")
    assert deleted.status_code == 202, (deleted.json(), body(api, pk))
    wait_for(lambda: direct(pk, token) == 0, timeout=30, what="the deleted workspace's server to stop")
    until(api, pk, lambda b: b["state"] == "deleted", "the workspace to be deleted")
