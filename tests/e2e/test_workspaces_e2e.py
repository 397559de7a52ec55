"""Workspaces end to end: the API → admission → a real Celery worker → the sandbox → a real local Jupyter server.

Created on a MIG slice, the workspace runs and its Jupyter server answers through the address "Open"
hands its owner; a file is written in its home directory; with no activity for its (shortened, one
minute) idle window — no notebook activity, its simulated GPU idle — the worker pauses it: its pod
and server stop, its quota goes back, its owner is told what it saves per hour. Resumed through
admission, it runs again and the file is still there. Another team's member gets 404, a teammate 403
until the owner shares it (with the admins), and ``/workspaces/auth/`` answers 401 without a session.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from decimal import Decimal
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.test import Client

from notifications.models import Event
from quotas.demo import seed_flavors, seed_team_quotas
from quotas.models import Reservation
from tests.e2e.conftest import lend, module_worker, wait_for
from workspaces.models import LocalServer

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


def jupyter(url: str) -> tuple[str, dict]:
    """The server's base address and the token query of an "Open" address (``…/lab?token=…``)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path.removesuffix('lab')}", {"token": parse_qs(parts.query)["token"][0]}


def answering(base: str, token: dict) -> bool:
    try:
        return httpx.get(f"{base}api/status", params=token, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_workspace_runs_pauses_when_idle_and_resumes_with_its_files(worker, api, team, member, outsider, viewer,
                                                                       team_admin, api_client_for):
    created = api.post(URL, {"team": team.slug, "name": "explore", "flavor": "a100-1g.10gb", "idle_minutes": 1,
                             "home_gb": 10, "env": {"SLIPWAY_SIM_LOAD_SECONDS": "1"}}, format="json")
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    until(api, pk, lambda b: b["state"] == "running", "the workspace to run")

    # 1. Its Jupyter server answers through the address handed to its owner (token and all).
    base, token = jupyter(opened(api, pk))
    wait_for(lambda: answering(base, token), timeout=60, what="the Jupyter server to answer")
    status = httpx.get(f"{base}api/status", params=token, timeout=5).json()
    assert {"started", "last_activity", "kernels"} <= set(status)
    assert httpx.get(f"{base}api/status", timeout=5).status_code == 403  # without the token: nobody

    # 2. A file in its home directory.
    written = httpx.put(f"{base}api/contents/results.txt", params=token, timeout=5,
                        json={"type": "file", "format": "text", "content": "epoch 3: 0.91"})
    assert written.status_code == 201

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
    signed_in.force_login(viewer)
    assert signed_in.get(auth).status_code == 403
    signed_in.force_login(outsider)
    assert signed_in.get(auth).status_code == 404

    # 4. No activity for its idle window (and its GPU idle): paused, the quota back, the owner told.
    paused = until(api, pk, lambda b: b["state"] == "paused", "the idle workspace to pause", timeout=150)
    assert paused["pause_cause"] == "idle" and "saves" in paused["reason"]
    assert not Reservation.objects.held().filter(ref=f"ws:{pk}").exists()
    event = Event.objects.get(kind="workspace_paused")
    assert f"saves {Decimal(paused['cost_per_hour']):.2f} USD/h" in event.text
    wait_for(lambda: event.deliveries.filter(target="mia@example.com").exists(), timeout=30,
             what="the owner's notice")
    wait_for(lambda: not answering(base, token), timeout=30, what="the paused workspace's server to stop")
    assert api.get(f"{URL}{pk}/open/").status_code == 409

    # 5. Resumed through admission: running again, and the file is still in its home directory.
    resumed = api.post(f"{URL}{pk}/resume/")
    assert resumed.status_code == 200 and resumed.json()["state"] in ("admitted", "starting", "running")
    until(api, pk, lambda b: b["state"] == "running", "the resumed workspace to run")
    base, token = jupyter(opened(api, pk))
    wait_for(lambda: answering(base, token), timeout=60, what="the resumed Jupyter server to answer")
    kept = httpx.get(f"{base}api/contents/results.txt", params=token, timeout=5)
    assert kept.status_code == 200 and kept.json()["content"] == "epoch 3: 0.91"

    # The token was in no log: the worker's (which asked the server about its activity all along) or the server's.
    assert token["token"] not in worker.logs()
    logs = list(Path(worker.env["SLIPWAY_VAR_DIR"]).glob("workspaces/*/server.log"))
    assert logs and all(token["token"] not in log.read_text() for log in logs)

    # 6. Deleted: its server stops and its home goes with it.
    deleted = api.delete(f"{URL}{pk}/")
    assert deleted.status_code == 202, (deleted.json(), body(api, pk))
    wait_for(lambda: not answering(base, token), timeout=30, what="the deleted workspace's server to stop")
    until(api, pk, lambda b: b["state"] == "deleted", "the workspace to be deleted")
