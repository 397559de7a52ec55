"""Celery tasks of workspaces. Each takes a primary key and is safe to run twice.

A pause deletes the workspace's pods here, after its commit (its home volume stays); a delete
removes what the sandbox kept on this machine for it (its local server and home directory); a
rotated token reaches its running server (:func:`restart_server`). The
shared delete task (:func:`workloads.tasks.delete_workload`) removes its cluster objects.
"""

from __future__ import annotations

from celery import shared_task
from django.db import transaction

import fleet.services as fleet
from workloads import secrets
from workloads.registry import kind_for
from workloads.tasks import RETRY
from workspaces import access, local
from workspaces.constants import REF_PREFIX, SERVING_STATES, WorkspaceState
from workspaces.models import Workspace


@shared_task(**RETRY)
def stop_pods(pk: int) -> int:
    """Delete a paused workspace's objects but its home volume (``attempt_resources``), and stop its local server."""
    # The row stays locked while its pods and server stop: a resume (a conditional update of the row)
    # waits for it, so this never deletes the objects or the server of the attempt a resume starts.
    with transaction.atomic():
        workspace = (Workspace.objects.select_for_update().select_related("team")
                     .filter(pk=pk, state=WorkspaceState.PAUSED).first())
        if workspace is None:
            return 0  # resumed (or deleted) meanwhile: its objects are the next attempt's, or the delete's
        deleted = fleet.backend_at(workspace.cluster_id).delete(workspace.address,
                                                               kind_for(REF_PREFIX).attempt_resources)
        local.stop(workspace)
    return deleted


@shared_task(ignore_result=True)
def remove_local(pk: int) -> None:
    """A deleted workspace's local server stopped and its local home directory removed."""
    workspace = Workspace.objects.filter(pk=pk).first()
    if workspace is not None:
        local.remove(workspace)


@shared_task(**RETRY)
def restart_server(pk: int) -> str:
    """A rotated Jupyter token reaches the workspace's running server: the old one no longer opens it.

    On a real cluster its Secret is written again and its Deployment applied with the pod template's new
    secret-env digest, so the Deployment replaces the pod (``Recreate``), which reads the new token; on the
    sandbox its local server is stopped and started again with it. Nothing while it does not serve (a paused
    one starts with the new token when resumed).
    """
    workspace = (Workspace.objects.select_related("team", "flavor", "created_by")
                 .filter(pk=pk, state__in=SERVING_STATES, cluster__isnull=False).first())
    if workspace is None:
        return "skipped"
    backend = fleet.backend_at(workspace.cluster_id)
    kind = kind_for(REF_PREFIX)
    secret = secrets.env_secret(workspace)
    if secret is not None:
        backend.apply_secret(secret)
    backend.apply(kind.manifests(workspace), kind.resources)
    if local.running(workspace) is None:  # its process, listening yet or not: one still starting has the old token
        return "applied"
    local.stop(workspace)
    token = access.credentials(workspace)[0]
    return "restarted" if token and local.ensure(workspace, token) is not None else "stopped"
