"""Inference endpoints as a workload kind: what the shared machinery needs to know about them.

Registered from :class:`inference.apps.InferenceConfig` ``ready()``.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from django.conf import settings
from django.urls import reverse

import core.backend
from cluster.backends.base import ObservedWorkload, ResourceKind
from cluster.deployments import DeploymentPhase
from cluster.startup import replica_starts
from cluster.status import WorkloadStatus
from inference import coldstarts, key_costs, revisions, scaling, services
from inference.constants import AUDIT_ACTIONS, HOLDING_STATES, REVISION_ROLLED_BACK, EndpointState, ScalingDecision
from inference.demo import seed_demo_endpoints
from inference.manifests import build_endpoint
from inference.models import InferenceEndpoint
from inference.specs import DEFAULT_GPU_UTILIZATION_TARGET, DEFAULT_METRIC, EndpointSpec
from inference.status import endpoint_status
from quotas.decide import ResourceRequest
from teams.models import Role
from workloads import secrets
from workloads.registry import (
    Announces,
    Api,
    Bursts,
    DashboardPanel,
    Demo,
    KindEvent,
    Lifecycle,
    NavItem,
    Pages,
    Reactions,
    StaffAction,
    StaffActions,
    TeamPanel,
    WorkloadKind,
)

_PHASE_TO_STATE = {
    DeploymentPhase.DEPLOYING: EndpointState.DEPLOYING,
    DeploymentPhase.READY: EndpointState.READY,
    DeploymentPhase.SCALED_TO_ZERO: EndpointState.SCALED_TO_ZERO,
    DeploymentPhase.DEGRADED: EndpointState.DEGRADED,
    DeploymentPhase.FAILED: EndpointState.FAILED,
}


def endpoint_spec(endpoint: InferenceEndpoint, max_surge: int) -> EndpointSpec:
    """The cluster layer's description of ``endpoint`` (pure data for the manifest builders)."""
    autoscale = endpoint.autoscale or {}
    secret_names, secret_digest = secrets.reference(endpoint)
    return EndpointSpec(
        object_name=endpoint.object_name,
        team=endpoint.team.slug,
        namespace=endpoint.namespace,
        name=endpoint.name,
        image=endpoint.image,
        flavor=endpoint.flavor.to_spec(),
        command=tuple(endpoint.command),
        args=tuple(endpoint.args),
        env=tuple(sorted(endpoint.pod_env().items())),
        secret_env=secret_names,
        secret_env_digest=secret_digest,
        port=endpoint.port,
        gpus_per_replica=endpoint.gpus_per_replica,
        min_replicas=endpoint.min_replicas,
        max_replicas=endpoint.max_replicas,
        replica_ceiling=endpoint.ceiling,
        metric=autoscale.get("metric", DEFAULT_METRIC),
        target=float(autoscale.get("target", DEFAULT_GPU_UTILIZATION_TARGET)),
        engine=autoscale.get("engine"),
        query=autoscale.get("query"),
        scale_down_delay_seconds=endpoint.scale_down_delay_seconds,
        readiness_path=endpoint.readiness_path,
        startup_timeout_seconds=endpoint.startup_timeout_seconds,
        spot=endpoint.spot,
        max_surge=max_surge,
        revision=revisions.deployment_revision(endpoint),
        canary=revisions.canary_spec(endpoint),
    )


#: Staff give an endpoint's burst back at once (the admin console's staff list).
SCALE_TO_MINIMUM = StaffAction(
    "scale-to-minimum", "Scale to minimum",
    offered=lambda endpoint: endpoint.replica_ceiling > endpoint.base_replicas,
    consequence=lambda endpoint: (f"Its replicas above its minimum ({endpoint.min_replicas}) stop serving now and "
                                  f"their units go back to {endpoint.team.name}'s quota; it may scale up again later."),
    act=services.scale_to_minimum, done="scaled to its minimum", idle="holds no burst replicas")


class EndpointKind(WorkloadKind, Reactions, Bursts, Pages, StaffActions, Demo, Api, Announces):
    model = InferenceEndpoint
    noun = "endpoint"
    audit_actions = AUDIT_ACTIONS
    lifecycle = Lifecycle(
        queued=EndpointState.QUEUED,
        admitted=EndpointState.DEPLOYING,
        applied=EndpointState.DEPLOYING,
        failed=EndpointState.FAILED,
        ended=EndpointState.DELETING,
        applyable=HOLDING_STATES,
        removed=(EndpointState.DELETING, EndpointState.DELETED),
        gone=EndpointState.DELETED,
    )
    # The ScaledObject goes first, so KEDA stops scaling a Deployment about to be deleted. The
    # Service is not observed (no state reads it). The TriggerAuthentication its triggers use is
    # the team's (cluster.manifests.team), applied with the namespace: not the endpoint's to delete.
    resources = (ResourceKind("keda.sh", "v1alpha1", "ScaledObject", "scaledobjects", observed=True, deleted=True),
                 ResourceKind("apps", "v1", "Deployment", "deployments", observed=True, deleted=True),
                 ResourceKind("", "v1", "Service", "services", deleted=True))
    observed_fields = ("gpus_per_replica", "min_replicas", "max_replicas", "replicas", "desired_replicas",
                       "replica_ceiling", "demand_below_ceiling_since", "scale_down_delay_seconds",
                       "startup_timeout_seconds")
    # Its guaranteed minimum, until the month's end: an endpoint runs until deleted.
    committed_units = ("min_replicas", "gpus_per_replica")
    end_verb, ended_word, conflict_error = "Delete", "deleted", services.EndpointConflict
    nav = NavItem("Endpoints", "inference:endpoint-list", 20)
    # An endpoint may be degraded again: each time is its own event.
    # A candidate rolled back (inference.revisions.roll_back) is an event too, though no state of the
    # endpoint's: its owner is told whether subscribed or not (their rollout was undone under them).
    events = (KindEvent(EndpointState.DEGRADED, "endpoint_degraded", "Endpoint degraded", "is degraded",
                        repeated=True),
              KindEvent(REVISION_ROLLED_BACK, "endpoint_canary_rolled_back", "Endpoint canary rolled back",
                        "rolled its canary back", repeated=True, to_owner=True))
    dashboard = DashboardPanel("inference/_dashboard_stat.html")
    # API keys: the team's keys page (linked from the team page) and their cost on the Usage page.
    team_pages = (NavItem("API keys", "inference:team-keys", 20),)
    usage_panel = TeamPanel("inference/_usage_keys.html", key_costs.usage_panel)
    state_template = "inference/endpoint_list.html#row"
    staff_actions = (SCALE_TO_MINIMUM,)

    def get_for_user(self, user, pk, role: str = Role.VIEWER, staff_reads: bool = False) -> InferenceEndpoint:
        return services.get_endpoint_for_user(user, pk, role, staff_reads)

    def end_url(self, endpoint: InferenceEndpoint) -> str:
        return reverse("inference:endpoint-delete", args=[endpoint.pk])

    def at_minimum(self, endpoint: InferenceEndpoint) -> bool:
        # Running no more replicas than its minimum (burst replicas idle are waste like any).
        return endpoint.min_replicas >= 1 and endpoint.open_units <= endpoint.min_replicas * endpoint.gpus_per_replica

    def minimum_url(self, endpoint: InferenceEndpoint) -> str:
        return reverse("inference:endpoint-edit", args=[endpoint.pk])

    def end(self, user, endpoint: InferenceEndpoint) -> InferenceEndpoint:
        return services.delete_endpoint(user, endpoint)

    def submit(self, user, team, fields: dict) -> InferenceEndpoint:
        return services.create_endpoint(user, team, fields)

    def preview(self, team, fields: dict) -> services.EndpointPreview:
        return services.preview_endpoint(team, fields)

    def seed_demo(self, slugs):
        created = seed_demo_endpoints(slugs)
        return [f"Created {len(created)} demo inference endpoints; they scale with a demo load."] if created else []

    def resource_request(self, endpoint: InferenceEndpoint) -> ResourceRequest:
        # The guaranteed part only; burst is granted later by admission.resize (inference.scaling).
        # No known end: its minimum commits what it costs until the month's end (decide's rule).
        # The minimum never borrows from a cohort (it must not be preemptible); burst may.
        units, per_node = endpoint.placement_shape  # the one shape rule: placement and the price read it too
        return ResourceRequest(flavor=endpoint.flavor.name, units=units, units_per_node=per_node, spot=endpoint.spot,
                               description=f"endpoint {endpoint.name}",
                               cost_per_hour=endpoint.cost_per_hour_range[0], may_borrow=False,
                               for_reservation=endpoint.for_reservation)

    def manifests(self, endpoint: InferenceEndpoint) -> list[dict]:
        # A rolling update surges one replica only when the team has a replica's units to spare.
        surge = 1 if scaling.spare_units(endpoint) >= endpoint.gpus_per_replica else 0
        return build_endpoint(endpoint_spec(endpoint, surge), core.backend.cluster_config())

    def status(self, observed: ObservedWorkload, endpoint: InferenceEndpoint, now: datetime) -> WorkloadStatus | None:
        status = endpoint_status(observed, now, settings.SLIPWAY_IMAGE_PULL_TIMEOUT_SECONDS)
        if status is None:
            return None
        # The replicas still starting, and their stages: the cold-start timelines (after_observation).
        return dataclasses.replace(status, replica_starts=replica_starts(observed, now))

    def state_for(self, status: WorkloadStatus, endpoint: InferenceEndpoint) -> str:
        return _PHASE_TO_STATE.get(status.state, endpoint.state)

    def column_changes(self, endpoint: InferenceEndpoint, status: WorkloadStatus) -> dict:
        changes = {}
        if status.replicas != endpoint.replicas:
            changes["replicas"] = status.replicas
        if status.desired_replicas != endpoint.desired_replicas:
            changes["desired_replicas"] = status.desired_replicas
        return changes

    def observed_reason(self, endpoint: InferenceEndpoint, status: WorkloadStatus, new_state: str) -> str:
        # Beyond the cluster's words: a capped burst's reason, while the observation says it still is.
        reason = super().observed_reason(endpoint, status, new_state)
        if not reason and scaling.still_capped(endpoint, status):
            return endpoint.reason
        return reason

    def billed_units(self, endpoint: InferenceEndpoint, status: WorkloadStatus) -> int:
        # Never more than the granted ceiling and the candidate's granted replicas (both Deployments' pods
        # are counted): replicas the cluster still runs above it (a lowered maximum, reclaimed burst, a
        # rollout's surge, a rolled-back candidate being deleted) are Slipway's lag, not the team's.
        return min(status.running_units, revisions.held_units(endpoint))

    def on_budget_spent(self, endpoint: InferenceEndpoint, now: datetime) -> bool:
        """Burst goes back at once: the endpoint falls back to its guaranteed minimum."""
        return scaling.set_ceiling(endpoint, endpoint.base_replicas, ScalingDecision.CAPPED_BY_BUDGET, None, now,
                                   "the team's monthly budget is spent (its policy stops burst)")

    #: Its minimum never borrows (ResourceRequest.may_borrow): what reclaim takes back is burst.

    def shrink_burst(self, endpoint: InferenceEndpoint, units: int, reason: str, now: datetime) -> None:
        """Lower the ceiling by enough replicas to give back ``units`` (never below the minimum)."""
        ceiling = endpoint.ceiling
        replicas = -(-units // endpoint.gpus_per_replica)  # whole replicas covering the units
        scaling.set_ceiling(endpoint, max(endpoint.base_replicas, ceiling - replicas),
                            ScalingDecision.BURST_RECLAIMED, None, now, reason)

    def after_observation(self, endpoint: InferenceEndpoint, status: WorkloadStatus, now: datetime) -> bool:
        before = (endpoint.replicas, endpoint.desired_replicas, endpoint.replica_ceiling)
        # Before scaling moves anything: its timelines read the endpoint as the cycle found it (at zero?).
        coldstarts.record(endpoint, status.replica_starts, now)
        gave_back = scaling.follow(endpoint, status, now)
        scaling.note_counts(endpoint, before, status, now)
        revisions.follow(endpoint, status.revision, status.rolled_out, status.canary_ready, now)
        return gave_back
