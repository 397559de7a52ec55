"""Workspaces as a workload kind: what the shared machinery needs to know about them.

Registered from :class:`workspaces.apps.WorkspacesConfig` ``ready()``. The reconcile cycle follows a
workspace while it holds quota (admitted, starting, running); a paused one holds nothing and waits
for its owner. After each observation of a running workspace the kind reads its Jupyter server's
activity and pauses it once idle (:mod:`workspaces.idle`).
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

import core.backend
from cluster.backends.base import ObservedWorkload, ResourceKind
from cluster.deployments import DeploymentPhase, deployment_status
from cluster.specs import VolumeSpec
from cluster.status import WorkloadStatus
from quotas.decide import ResourceRequest
from teams.models import Role
from workloads import secrets
from workloads.registry import (
    Announces,
    Api,
    DashboardPanel,
    Demo,
    KindEvent,
    Lifecycle,
    NavItem,
    Pages,
    Reactions,
    WorkloadKind,
)
from workspaces import idle, services
from workspaces.constants import AUDIT_ACTIONS, HOLDING_STATES, HOME_PATH, JUPYTER_PORT, PauseCause, WorkspaceState
from workspaces.demo import seed_demo_workspaces
from workspaces.manifests import AccessConfig, WorkspaceSpec, build_workspace
from workspaces.models import Workspace

# One replica: "degraded" (some of several ready) and "scaled to zero" do not happen; were they
# reported, the pod is not serving, which is starting.
_PHASE_TO_STATE = {
    DeploymentPhase.DEPLOYING: WorkspaceState.STARTING,
    DeploymentPhase.READY: WorkspaceState.RUNNING,
    DeploymentPhase.DEGRADED: WorkspaceState.STARTING,
    DeploymentPhase.SCALED_TO_ZERO: WorkspaceState.STARTING,
    DeploymentPhase.FAILED: WorkspaceState.FAILED,
}


def access_config() -> AccessConfig:
    """The real-cluster access settings (``SLIPWAY_WORKSPACE_*``) as the builders take them."""
    return AccessConfig(
        host=settings.SLIPWAY_WORKSPACE_HOST, ingress_class=settings.SLIPWAY_WORKSPACE_INGRESS_CLASS,
        auth_url=settings.SLIPWAY_WORKSPACE_AUTH_URL, portal_url=settings.SLIPWAY_PORTAL_URL.rstrip("/"),
        ingress_namespace=settings.SLIPWAY_WORKSPACE_INGRESS_NAMESPACE,
        portal_namespace=settings.SLIPWAY_WORKSPACE_PORTAL_NAMESPACE,
        storage_class=settings.SLIPWAY_WORKSPACE_STORAGE_CLASS or None,
    )


def workspace_spec(workspace: Workspace) -> WorkspaceSpec:
    """The cluster layer's description of ``workspace`` (pure data for the builders)."""
    return WorkspaceSpec(
        object_name=workspace.object_name, pk=workspace.pk, team=workspace.team.slug,
        namespace=workspace.namespace, name=workspace.name, image=workspace.image,
        flavor=workspace.flavor.to_spec(), gpus=workspace.gpus, cpu=workspace.cpu, memory_gb=workspace.memory_gb,
        home_gb=workspace.home_gb, home_path=HOME_PATH, port=JUPYTER_PORT,
        env=tuple(sorted(workspace.pod_env().items())),
        volumes=tuple(VolumeSpec(v["claim"], v["mount_path"], bool(v.get("read_only"))) for v in workspace.volumes),
        spot=workspace.spot, secret_env_digest=secrets.reference(workspace)[1],
    )


class WorkspaceKind(WorkloadKind, Reactions, Pages, Demo, Api, Announces):
    model = Workspace
    noun = "workspace"
    lifecycle = Lifecycle(
        queued=WorkspaceState.QUEUED,
        admitted=WorkspaceState.ADMITTED,
        applied=WorkspaceState.STARTING,
        failed=WorkspaceState.FAILED,
        ended=WorkspaceState.DELETING,
        applyable=(WorkspaceState.ADMITTED,),
        removed=(WorkspaceState.DELETING, WorkspaceState.DELETED),
        gone=WorkspaceState.DELETED,
    )
    # Deleted in this order: the Ingress first (no request reaches a pod about to go), the NetworkPolicy
    # last of what runs. The home claim outlives pauses (kept across attempts: a pause is the end of
    # one) and is observed so that the cycle deletes it once the workspace ends for good.
    resources = (ResourceKind("networking.k8s.io", "v1", "Ingress", "ingresses", deleted=True),
                 ResourceKind("", "v1", "Service", "services", deleted=True),
                 ResourceKind("apps", "v1", "Deployment", "deployments", observed=True, deleted=True),
                 ResourceKind("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", deleted=True),
                 ResourceKind("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", observed=True,
                              deleted=True, kept_across_attempts=True))
    observed_fields = ("gpus", "idle_minutes", "home_gb", "last_activity_at", "activity_checked_at", "kernels_busy")
    # No runtime limit: a workspace commits its units until the month's end, as an endpoint's minimum.
    committed_units = ("gpus",)
    end_verb, ended_word, conflict_error = "Delete", "deleted", services.WorkspaceConflict
    nav = NavItem("Workspaces", "workspaces:workspace-list", 30)
    audit_actions = AUDIT_ACTIONS
    # The owner is told, subscribed or not: their workspace stopped under them (and why: the reason).
    events = (KindEvent(WorkspaceState.PAUSED, "workspace_paused", "Workspace paused (idle, preempted, budget)",
                        "paused", repeated=True, continued=True, to_owner=True),)
    dashboard = DashboardPanel("workspaces/_dashboard_stat.html", new=("New workspace", "workspaces:workspace-new"))
    state_template = "workspaces/_state.html"

    def get_for_user(self, user, pk, role: str = Role.VIEWER, staff_reads: bool = False) -> Workspace:
        return services.get_workspace_for_user(user, pk, role, staff_reads)

    def end(self, user, workspace: Workspace) -> Workspace:
        return services.delete_workspace(user, workspace)

    def submit(self, user, team, fields: dict) -> Workspace:
        return services.create_workspace(user, team, fields)

    def preview(self, team, fields: dict):
        return services.preview_workspace(team, fields)

    def seed_demo(self, slugs):
        created = seed_demo_workspaces(slugs)
        return [f"Created {len(created)} demo workspaces: one runs (open it from Workspaces), one is paused."] if created else []

    def resource_request(self, workspace: Workspace) -> ResourceRequest:
        units, per_node = workspace.placement_shape  # the one shape rule: placement and the price read it too
        return ResourceRequest(flavor=workspace.flavor.name, units=units, units_per_node=per_node,
                               priority=workspace.priority, spot=workspace.spot,
                               description=f"workspace {workspace.name}", cost_per_hour=workspace.running_cost_per_hour,
                               for_reservation=workspace.for_reservation)

    def manifests(self, workspace: Workspace) -> list[dict]:
        return build_workspace(workspace_spec(workspace), core.backend.cluster_config(), access_config())

    def status(self, observed: ObservedWorkload, workspace: Workspace, now: datetime) -> WorkloadStatus | None:
        return deployment_status(observed, now, settings.SLIPWAY_IMAGE_PULL_TIMEOUT_SECONDS)

    def state_for(self, status: WorkloadStatus, workspace: Workspace) -> str:
        state = _PHASE_TO_STATE.get(status.state, workspace.state)
        if state == WorkspaceState.FAILED and workspace.attempt > 1:
            # It ran before and has a home volume worth keeping: not failed (which would delete it)
            # but paused once this observation is written (after_observation), its reason saying why.
            return WorkspaceState.STARTING
        return state

    def after_observation(self, workspace: Workspace, status: WorkloadStatus, now: datetime) -> bool:
        """Pause a resumed workspace that cannot start again; read a running one's Jupyter activity and pause
        it once idle for its window (:mod:`workspaces.idle`). True when it gave its quota back."""
        if status.state == DeploymentPhase.FAILED and workspace.attempt > 1:
            return services.pause(workspace, PauseCause.FAILED, now, detail=status.reason)
        if workspace.state not in HOLDING_STATES:
            return False
        return idle.follow(workspace, status, now)

    def after_preemption(self, workspace: Workspace, now: datetime) -> bool:
        """Paused, not queued again: its home volume stays, its owner resumes it (the preemption's words say why)."""
        detail = services.last_preemption_words(workspace)
        return services.pause(workspace, PauseCause.PREEMPTED, now, detail=detail, preempted=True)

    def on_budget_spent(self, workspace: Workspace, now: datetime) -> bool:
        """Pause it (its home volume kept): the budget policy says stop what costs."""
        return services.pause(workspace, PauseCause.BUDGET, now)
