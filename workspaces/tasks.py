"""Celery tasks of workspaces. Each takes a primary key and is safe to run twice.

A pause deletes the workspace's pods here, after its commit (its home volume stays); a delete
removes what the sandbox kept on this machine for it (its local server and home directory). The
shared delete task (:func:`workloads.tasks.delete_workload`) removes its cluster objects.
"""

from __future__ import annotations

from celery import shared_task
from django.db import transaction

import fleet.services as fleet
from workloads.registry import kind_for
from workloads.tasks import RETRY
from workspaces import local
from workspaces.constants import REF_PREFIX, WorkspaceState
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
