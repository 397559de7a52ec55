"""Workspaces: a GPU notebook per row, with a home volume that outlives its pauses (docs/workspaces.md).

A workspace is a workload kind (:mod:`workloads`, the words as docs/glossary.md defines them): it is
admitted against its team's quota and budget like a run or an endpoint, billed while its pod runs,
and followed by the reconcile cycle while it holds quota. Beyond what every workload has it is
*paused*: its pod deleted, its quota released, its home volume (a PersistentVolumeClaim of
``home_gb``) kept; resuming admits it again like new work.

Its Jupyter token is Slipway's: made at creation, stored sealed in the workspace's secret env (a value
Slipway keeps for itself, :func:`workloads.secrets.store`'s ``hidden``), handed to its pod through
the Kubernetes Secret and, by the portal's "Open", only to those allowed on it — never shown in a
list, a log or an audit entry.

:class:`WorkspacePolicy` is a team's settings for workspaces, kept beside the team in this app (teams
sits below every kind): the priority its workspaces get by default, and the longest idle window
its members may choose (set by platform staff).
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.urls import reverse

from core.priority import Priority
from teams.models import Role
from workloads.models import Workload, detail_link
from workspaces.constants import (
    ACTIVE_STATES,
    DEFAULT_HOME_GB,
    DEFAULT_IDLE_MINUTES,
    FINAL_STATES,
    HOLDING_STATES,
    REF_PREFIX,
    SIM_GPU_UTIL_ENV,
    PauseCause,
    WorkspaceState,
)


class Workspace(Workload):
    KIND_PREFIX = REF_PREFIX
    FINAL_STATES = FINAL_STATES
    HOLDING_STATES = HOLDING_STATES
    ACTIVE_STATES = ACTIVE_STATES
    STATES = WorkspaceState
    INITIAL_STATE = WorkspaceState.QUEUED

    id = models.BigAutoField(primary_key=True)  # the number its refs and API ids carry
    workload = detail_link()

    # What was submitted (docs/workspaces.md), beyond the shared name, flavor and spot.
    image = models.CharField(max_length=300)
    gpus = models.PositiveIntegerField(default=1, help_text="Units of its flavor (one pod).")
    cpu = models.FloatField(null=True, blank=True, help_text="Cores; empty: the flavor's share.")
    memory_gb = models.FloatField(null=True, blank=True, help_text="GiB; empty: the flavor's share.")
    home_gb = models.PositiveIntegerField(default=DEFAULT_HOME_GB, help_text="Size of the home volume (GiB).")
    idle_minutes = models.PositiveIntegerField(default=DEFAULT_IDLE_MINUTES,
                                               help_text="Paused after this long idle (notebook and GPU).")
    env = models.JSONField(default=dict, blank=True)
    volumes = models.JSONField(default=list, blank=True, help_text='[{"claim", "mount_path", "read_only"}]')
    priority = models.CharField(max_length=10, choices=Priority.choices, default=Priority.HIGH)
    #: The owner lets the team's admins open it too (never other members).
    shared_with_admins = models.BooleanField(default=False)

    pause_cause = models.CharField(max_length=16, choices=PauseCause.choices, blank=True, default=PauseCause.NONE)
    paused_at = models.DateTimeField(null=True, blank=True)
    #: What its Jupyter server said when last asked (:mod:`workspaces.activity`): its last activity,
    #: and when it was asked. None: not asked yet, or it did not answer.
    last_activity_at = models.DateTimeField(null=True, blank=True)
    activity_checked_at = models.DateTimeField(null=True, blank=True)
    kernels_busy = models.PositiveSmallIntegerField(default=0)


    def get_absolute_url(self) -> str:
        return reverse("workspaces:workspace-detail", args=[self.pk])

    @property
    def placement_shape(self) -> tuple[int, int]:
        """One pod of all its units."""
        return self.gpus, self.gpus

    @property
    def running_cost_per_hour(self) -> Decimal:
        """What it costs per hour while it runs — its units at its one price (:func:`billing.ledger.cost_per_hour`,
        :meth:`Workload.unit_price`): what resuming costs, pausing saves and admission commits."""
        return self.cost_per_hour_at(self.gpus)

    @property
    def cost_per_hour(self) -> Decimal:
        """What it costs per hour now, by its state — the one rule (docs/workspaces.md, docs/api.md): while it
        holds its GPUs (admitted, starting, running), :attr:`running_cost_per_hour`; queued, paused or ended,
        nothing (a paused workspace holds no GPU, and its home volume is not billed)."""
        return self.running_cost_per_hour if self.state in HOLDING_STATES else Decimal(0)

    def pod_env(self) -> dict[str, str]:
        """The shared rule's env, and the sandbox told the GPU is idle unless the user says otherwise: a
        notebook's GPU waits between cells, and a simulated pod runs no notebook code on it (a real
        cluster's pods ignore the variable; the Jupyter server's own activity decides there as here)."""
        env = super().pod_env()
        env.setdefault(SIM_GPU_UTIL_ENV, "0")
        return env

    @property
    def is_paused(self) -> bool:
        return self.state == WorkspaceState.PAUSED

    def may_open(self, user, membership) -> bool:
        """Whether ``user`` may open it (its Jupyter server): the owner; the team's admins once the owner
        shares it. ``membership`` is the user's membership of its team (None: outside it)."""
        if membership is None or membership.team_id != self.team_id or not user.is_authenticated:
            return False
        if self.created_by_id == user.pk:
            return True
        return self.shared_with_admins and membership.allows(Role.ADMIN)


def default_max_idle_minutes() -> int:
    """A team's longest idle window until staff set one: the platform's (a callable, so the setting is read
    when a policy is made, not frozen into a migration)."""
    return settings.SLIPWAY_WORKSPACE_MAX_IDLE_MINUTES


class WorkspacePolicy(models.Model):
    """A team's settings for workspaces (platform staff set them in the admin console)."""

    team = models.OneToOneField("portal.Team", on_delete=models.CASCADE, related_name="workspace_policy")
    #: Interactive work waits for no batch of its team: high by default (the within-team priority rules apply).
    default_priority = models.CharField(max_length=10, choices=Priority.choices, default=Priority.HIGH)
    max_idle_minutes = models.PositiveIntegerField(
        default=default_max_idle_minutes,
        help_text="The longest idle window a member may give a workspace before it pauses.")

    class Meta:
        verbose_name = "workspace policy"
        verbose_name_plural = "workspace policies"

    def __str__(self) -> str:
        return f"workspaces of {self.team_id}: {self.default_priority}, idle ≤ {self.max_idle_minutes} min"


class LocalServer(models.Model):
    """A real ``jupyter-server`` process the sandbox runs for a running workspace, on this machine
    (:mod:`workspaces.local`): where it listens. Its token is the workspace's, never stored here."""

    workspace = models.OneToOneField(Workspace, on_delete=models.CASCADE, related_name="local_server")
    pid = models.PositiveIntegerField()
    port = models.PositiveIntegerField()
    started_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.workspace_id} on 127.0.0.1:{self.port} (pid {self.pid})"
