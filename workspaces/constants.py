"""States, causes, bounds and words of workspaces (docs/workspaces.md, docs/glossary.md "workspace")."""

from __future__ import annotations

from django.db import models


class WorkspaceState(models.TextChoices):
    QUEUED = "queued", "Queued"
    ADMITTED = "admitted", "Admitted"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    DELETING = "deleting", "Deleting"
    DELETED = "deleted", "Deleted"
    FAILED = "failed", "Failed"


#: States a workspace never leaves.
FINAL_STATES = (WorkspaceState.DELETED, WorkspaceState.FAILED)
#: Admitted and not paused or ended: it holds its hold (and is billed while its pod runs).
HOLDING_STATES = (WorkspaceState.ADMITTED, WorkspaceState.STARTING, WorkspaceState.RUNNING)
#: Queued or holding quota (docs/glossary.md "active"). A paused workspace is neither: it holds no
#: quota and waits for no units, only for its owner; it is *unfinished* (its name stays taken).
ACTIVE_STATES = (WorkspaceState.QUEUED, *HOLDING_STATES)
#: What its owner may pause (its pods are deleted, its quota released) and what may be resumed.
PAUSABLE_STATES = HOLDING_STATES
RESUMABLE_STATES = (WorkspaceState.PAUSED,)
#: Its Jupyter server may run (a rotated token must reach it: workspaces.tasks.restart_server).
SERVING_STATES = (WorkspaceState.STARTING, WorkspaceState.RUNNING)
#: Nothing of it can be opened any more: the gate answers as for a workspace that does not exist (404).
CLOSED_STATES = (WorkspaceState.DELETING, *FINAL_STATES)
#: What may be deleted: anything not deleting or final.
DELETABLE_STATES = (WorkspaceState.QUEUED, *HOLDING_STATES, WorkspaceState.PAUSED)


class PauseCause(models.TextChoices):
    """Why a workspace is paused: the code, beside the reason's words (code branches on this, never on words)."""

    NONE = "", "Not paused"
    MANUAL = "manual", "Paused by a user"
    IDLE = "idle", "Paused when idle"
    PREEMPTED = "preempted", "Paused by a preemption"
    BUDGET = "budget", "Paused by the budget policy"
    FAILED = "failed", "Paused: it could not start again"


#: The kind's identity prefix: workspace 7 is "ws:7" in quotas and the ledger, "ws-7" on the cluster.
REF_PREFIX = "ws"

#: Where the home volume is mounted in the pod, and the Jupyter server's port and base URL prefix.
HOME_PATH = "/home/jovyan"
JUPYTER_PORT = 8888
#: The sandbox's knob for a pod's simulated GPU utilization (sandbox.simulation).
SIM_GPU_UTIL_ENV = "SLIPWAY_SIM_GPU_UTIL"
#: Bounds of the submitted fields.
MAX_HOME_GB = 2048
MIN_HOME_GB = 1
DEFAULT_HOME_GB = 20
MAX_CPU = 256
MAX_MEMORY_GB = 2048
MAX_IDLE_MINUTES = 7 * 24 * 60
MIN_IDLE_MINUTES = 1
#: The idle window a workspace gets when its request names none, and a team's maximum when staff set none.
DEFAULT_IDLE_MINUTES = 60

# Audit actions of workspaces, declared with the kind (WorkspaceKind.audit_actions, AUDIT_ACTIONS).
AUDIT_CREATED = "workspace_created"
AUDIT_PAUSED = "workspace_paused"
AUDIT_RESUMED = "workspace_resumed"
AUDIT_DELETED = "workspace_deleted"
AUDIT_OPENED = "workspace_opened"
AUDIT_SHARED = "workspace_shared"
AUDIT_ACTIONS = {AUDIT_CREATED: "Workspace created", AUDIT_PAUSED: "Workspace paused", AUDIT_RESUMED: "Workspace resumed",
                 AUDIT_DELETED: "Workspace deleted", AUDIT_OPENED: "Workspace opened",
                 AUDIT_SHARED: "Workspace shared or unshared"}


class Words:
    """Plain-words templates of a workspace's ``reason``."""

    PAUSED_BY = "paused by {user}; its home volume ({home_gb} GB) is kept"
    PAUSED_IDLE = ("paused: idle for {minutes} min (no notebook activity, GPU under {threshold:g}%); "
                   "saves {saved} {currency}/h while paused; its home volume ({home_gb} GB) is kept")
    PAUSED_PREEMPTED = "{preempted}; paused, its home volume ({home_gb} GB) kept — resume it when you need it"
    PAUSED_BUDGET = ("paused: the team's monthly budget is spent (its policy stops running work); "
                     "its home volume ({home_gb} GB) is kept")
    PAUSED_FAILED = "paused: it could not start again ({detail}); its home volume ({home_gb} GB) is kept"
    DELETED_BY = "deleted by {user}, with its home volume ({home_gb} GB)"
