"""Waiting for a workspace's local Jupyter server in tests: how long it may take, and saying why it never answered."""

from __future__ import annotations

import httpx

from tests.e2e.conftest import wait_for
from workspaces import local

#: How long a server may take to answer: it imports Jupyter and JupyterLab (12 s of wall time alone while the suite
#: loads both cores of a slow boot, 2026-11-29, where the former 60 s ran out once). A bound for a hang, not a promise.
START_SECONDS = 240


def answering(url: str, token: str) -> bool:
    """Whether the server under ``url`` (its base URL, ending in ``/``) answers its status with ``token``."""
    try:
        return httpx.get(f"{url}api/status", headers={"Authorization": f"token {token}"}, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_up(workspace, url: str, token: str) -> str:
    """Wait for the workspace's server to answer at ``url``; fail at once, with its log, if its process exited."""
    def ready() -> bool:
        if answering(url, token):
            return True
        if local.running(workspace) is None:
            log = local.directory(workspace) / "server.log"
            raise AssertionError(f"the Jupyter server exited: {log.read_text()[-3000:] if log.exists() else 'no log'}")
        return False
    wait_for(ready, timeout=START_SECONDS, what="the local Jupyter server")
    return url
