"""When a workspace is idle, and pausing it then (docs/workspaces.md "The idle rule").

A workspace is idle when both say so, without a break, for its ``idle_minutes``:

* its **Jupyter server**: the REST API's ``/api/status`` ``last_activity`` (the last request or
  kernel message) is that old, and ``/api/kernels`` shows no kernel ``busy`` (a cell running for
  an hour is work, however quiet);
* its **GPU**: measured under ``SLIPWAY_IDLE_UTIL_PCT`` since then (``Workload.idle_since``, which
  the reconcile cycle keeps from the cluster's utilization: :mod:`workloads.idle`).

Unknown is not idle: a server that does not answer, or GPUs that are not measured, never pause a
workspace. The rule itself is the pure :func:`idle_since`; :func:`follow` reads the server (at most
every ``SLIPWAY_WORKSPACE_ACTIVITY_SECONDS``) after each observation of a running workspace and
pauses it once the rule says so, telling its owner what pausing saves per hour.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from django.conf import settings

import fleet.services as fleet
from cluster.deployments import DeploymentPhase
from cluster.status import WorkloadStatus, parse_time
from workspaces import local
from workspaces.constants import PauseCause, WorkspaceState
from workspaces.manifests import SERVICE_PORT, base_url
from workspaces.services import pause, token_of

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Activity:
    """What a Jupyter server says of itself: its last activity, and how many kernels are busy now."""

    last_activity: datetime
    kernels_busy: int


def idle_since(activity: Activity | None, gpu_idle_since: datetime | None) -> datetime | None:
    """Since when the workspace has been idle by both measures, or None when it is not (or not known)."""
    if activity is None or activity.kernels_busy or gpu_idle_since is None:
        return None
    return max(activity.last_activity, gpu_idle_since)


def due(activity: Activity | None, gpu_idle_since: datetime | None, minutes: int, now: datetime) -> bool:
    """Whether the workspace has been idle for ``minutes``: the one rule of pausing when idle."""
    since = idle_since(activity, gpu_idle_since)
    return since is not None and now - since >= timedelta(minutes=minutes)


def idle_for(workspace, now: datetime) -> timedelta | None:
    """How long ``workspace`` has been idle by both measures, as last read (None: not idle, or not known):
    what its page, its list row and the API's ``idle_for_seconds`` show."""
    stored = Activity(workspace.last_activity_at, workspace.kernels_busy) if workspace.last_activity_at else None
    since = idle_since(stored, workspace.idle_since)
    return now - since if since is not None else None


def server_address(workspace) -> str | None:
    """Where Slipway reaches the workspace's Jupyter server (its base URL), None when nowhere yet.

    On a sandbox cluster its local server (started here when the pod is ready); on a real cluster
    its Service, which the workspace's NetworkPolicy lets Slipway's namespace reach.
    """
    path = base_url(workspace.object_name)
    if fleet.backend_at(workspace.cluster_id).name == "sandbox":
        token = token_of(workspace)
        server = local.ensure(workspace, token) if token else None
        return f"http://127.0.0.1:{server.port}{path}" if server is not None else None
    return f"http://{workspace.object_name}.{workspace.namespace}.svc.cluster.local:{SERVICE_PORT}{path}"


def read_activity(address: str, token: str) -> Activity | None:
    """``/api/status`` and ``/api/kernels`` of the server at ``address``; None when it does not answer sensibly."""
    headers = {"Authorization": f"token {token}"}
    try:
        with httpx.Client(timeout=settings.SLIPWAY_WORKSPACE_ACTIVITY_TIMEOUT, headers=headers) as client:
            status = client.get(f"{address}api/status")
            # Asking is no activity: /api/status never counts, /api/kernels not with no_track_activity.
            kernels = client.get(f"{address}api/kernels", params={"no_track_activity": "1"})
        status.raise_for_status()
        kernels.raise_for_status()
        last = parse_time(status.json().get("last_activity"))
        busy = sum(1 for kernel in kernels.json() if kernel.get("execution_state") == "busy")
    except (httpx.HTTPError, ValueError, AttributeError, TypeError) as exc:
        logger.info("workspace server at %s did not answer: %s", address.split("?")[0], exc.__class__.__name__)
        return None
    return Activity(last, busy) if last is not None else None


def follow(workspace, status: WorkloadStatus, now: datetime) -> bool:
    """After an observation of a workspace holding quota: read its server, pause it once idle. True when paused."""
    if status.state != DeploymentPhase.READY or workspace.state != WorkspaceState.RUNNING:
        return False
    stored = Activity(workspace.last_activity_at, workspace.kernels_busy) if workspace.last_activity_at else None
    checked = workspace.activity_checked_at
    if checked is None or now - checked >= timedelta(seconds=settings.SLIPWAY_WORKSPACE_ACTIVITY_SECONDS):
        address, token = server_address(workspace), token_of(workspace)
        stored = read_activity(address, token) if address and token else None
        type(workspace).objects.filter(pk=workspace.pk, state=WorkspaceState.RUNNING).update(
            activity_checked_at=now, last_activity_at=stored.last_activity if stored else None,
            kernels_busy=stored.kernels_busy if stored else 0)
    if not due(stored, workspace.idle_since, workspace.idle_minutes, now):
        return False
    return pause(workspace, PauseCause.IDLE, now)
