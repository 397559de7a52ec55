"""States, autoscaling vocabulary, scaling decisions and bounds of inference endpoints (docs/api.md)."""

from __future__ import annotations

from django.db import models

from cluster import promql
from inference import specs


class EndpointState(models.TextChoices):
    QUEUED = "queued", "Queued"
    DEPLOYING = "deploying", "Deploying"
    READY = "ready", "Ready"
    SCALED_TO_ZERO = "scaled_to_zero", "Scaled to zero"
    DEGRADED = "degraded", "Degraded"
    DELETING = "deleting", "Deleting"
    DELETED = "deleted", "Deleted"
    FAILED = "failed", "Failed"


#: States an endpoint never leaves.
FINAL_STATES = (EndpointState.DELETED, EndpointState.FAILED)
#: States in which it holds quota and lives on the cluster.
HOLDING_STATES = (EndpointState.DEPLOYING, EndpointState.READY, EndpointState.SCALED_TO_ZERO, EndpointState.DEGRADED)
#: Active: queued or holding quota (docs/glossary.md) — the states a user may still change or delete
#: (``deleting`` is unfinished but no longer active).
ACTIVE_STATES = (EndpointState.QUEUED, *HOLDING_STATES)


# The metric and engine vocabulary and the endpoint defaults are the cluster layer's
# (inference.specs, which the builders read): these choices only name them for Django.


class Metric(models.TextChoices):
    GPU_UTILIZATION = specs.METRIC_GPU_UTILIZATION, specs.METRIC_LABELS[specs.METRIC_GPU_UTILIZATION]
    REQUESTS_PER_SECOND = specs.METRIC_REQUESTS_PER_SECOND, specs.METRIC_LABELS[specs.METRIC_REQUESTS_PER_SECOND]
    QUEUE_LENGTH = specs.METRIC_QUEUE_LENGTH, specs.METRIC_LABELS[specs.METRIC_QUEUE_LENGTH]
    PROMETHEUS = specs.METRIC_PROMETHEUS, specs.METRIC_LABELS[specs.METRIC_PROMETHEUS]
    GATEWAY_IN_FLIGHT = specs.METRIC_GATEWAY_IN_FLIGHT, specs.METRIC_LABELS[specs.METRIC_GATEWAY_IN_FLIGHT]
    GATEWAY_REQUESTS_PER_SECOND = (specs.METRIC_GATEWAY_REQUESTS_PER_SECOND,
                                   specs.METRIC_LABELS[specs.METRIC_GATEWAY_REQUESTS_PER_SECOND])


class Engine(models.TextChoices):
    VLLM = specs.ENGINE_VLLM, specs.ENGINE_LABELS[specs.ENGINE_VLLM]
    TGI = specs.ENGINE_TGI, specs.ENGINE_LABELS[specs.ENGINE_TGI]
    TRITON = specs.ENGINE_TRITON, specs.ENGINE_LABELS[specs.ENGINE_TRITON]


class ScalingDecision(models.TextChoices):
    """What a scaling log row records (docs/api.md ``scaling/``)."""

    ADMITTED = "admitted", "Admitted at its minimum"
    BURST_GRANTED = "burst_granted", "Burst replica granted"
    CAPPED_BY_QUOTA = "capped_by_quota", "Capped by the team quota"
    CAPPED_BY_BUDGET = "capped_by_budget", "Capped by the budget"
    BURST_RECLAIMED = "burst_reclaimed", "Burst reclaimed for queued work"
    BURST_RELEASED = "burst_released", "Burst released (demand fell)"
    SCALED_TO_ZERO = "scaled_to_zero", "Scaled to zero"
    MINIMUM_CHANGED = "minimum_changed", "Minimum or maximum changed"


#: The kind's identity prefix: endpoint 7 is "ep:7" in quotas and the ledger, "ep-7" on the cluster.
REF_PREFIX = "ep"

# Bounds of the submitted fields.
MAX_REPLICAS = 64
MAX_SCALE_DOWN_DELAY_SECONDS = 24 * 3600
MAX_STARTUP_TIMEOUT_SECONDS = 3 * 3600
MAX_QUERY_LENGTH = promql.MAX_QUERY_LENGTH  # the autoscale query: one limit, cluster.promql's


# Audit actions of endpoints, declared with the kind (EndpointKind.audit_actions), as runs' are.
AUDIT_CREATED = "endpoint_created"
AUDIT_CHANGED = "endpoint_changed"
AUDIT_DELETED = "endpoint_deleted"


class RevisionState(models.TextChoices):
    """Where a revision of an endpoint stands (docs/serving.md "Revisions, canary and rollback")."""

    STABLE = "stable", "Stable"          # serves the traffic the candidate does not take
    CANARY = "canary", "Canary"          # the candidate: serves its weight, compared with stable
    ROLLING = "rolling", "Rolling out"   # a replace rollout in flight (one Deployment, rolling update)
    RETIRED = "retired", "Retired"       # an earlier stable one, replaced or promoted over
    ROLLED_BACK = "rolled_back", "Rolled back"  # a candidate taken out, by hand or by the rule


#: Revisions whose candidate objects (``<object_name>-canary``) are to run while they hold replicas: a candidate, and
#: a promoted one until the stable Deployment has rolled out to it.
CANDIDATE_HOLDING_STATES = (RevisionState.CANARY, RevisionState.ROLLING)


#: The event of a candidate rolled back (by the rule or by hand): not a state of the endpoint's own, the
#: "move" its event kind (EndpointKind.events) is declared for; sent by inference.revisions.roll_back.
REVISION_ROLLED_BACK = "revision_rolled_back"


class Rollout(models.TextChoices):
    REPLACE = "replace", "Replace (rolling update)"
    CANARY = "canary", "Canary at a weight"


# Audit actions of API keys (declared with the kind beside the endpoint's).
AUDIT_KEY_CREATED = "api_key_created"
AUDIT_KEY_REVOKED = "api_key_revoked"
AUDIT_KEY_DISABLED = "api_key_disabled"
AUDIT_KEY_ENABLED = "api_key_enabled"
AUDIT_ACTIONS = {AUDIT_CREATED: "Endpoint created", AUDIT_CHANGED: "Endpoint changed", AUDIT_DELETED: "Endpoint deleted",
                 AUDIT_KEY_CREATED: "API key created", AUDIT_KEY_REVOKED: "API key revoked",
                 AUDIT_KEY_DISABLED: "API key disabled", AUDIT_KEY_ENABLED: "API key enabled"}

#: Cold-start stages, in order (docs/serving.md "Cold starts"): each is the instant it was reached.
COLD_START_STAGES = ("admitted", "scheduled", "image_pulled", "container_started", "model_loaded", "ready",
                     "first_byte")
