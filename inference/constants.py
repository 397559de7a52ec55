"""States, autoscaling vocabulary, scaling decisions and bounds of inference endpoints (API.md)."""

from __future__ import annotations

from django.db import models

from cluster import promql


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
#: States a user may still change or delete.
LIVE_STATES = (EndpointState.QUEUED, *HOLDING_STATES)


class Metric(models.TextChoices):
    GPU_UTILIZATION = "gpu_utilization", "GPU utilization"
    REQUESTS_PER_SECOND = "requests_per_second", "Requests per second"
    QUEUE_LENGTH = "queue_length", "Queue length"
    PROMETHEUS = "prometheus", "Prometheus query"


#: Metrics that exist while no replica runs, so they can wake an endpoint from zero.
REQUEST_DRIVEN_METRICS = (Metric.REQUESTS_PER_SECOND, Metric.QUEUE_LENGTH, Metric.PROMETHEUS)


class Engine(models.TextChoices):
    VLLM = "vllm", "vLLM"
    TGI = "tgi", "Text Generation Inference"
    TRITON = "triton", "Triton"


class ScalingDecision(models.TextChoices):
    """What a scaling log row records (API.md ``scaling/``)."""

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
DEFAULT_PORT = 8080
DEFAULT_SCALE_DOWN_DELAY_SECONDS = 300
MAX_SCALE_DOWN_DELAY_SECONDS = 24 * 3600
DEFAULT_STARTUP_TIMEOUT_SECONDS = 600
MAX_STARTUP_TIMEOUT_SECONDS = 3 * 3600
DEFAULT_READINESS_PATH = "/health/ready"
MAX_QUERY_LENGTH = promql.MAX_QUERY_LENGTH  # the autoscale query: one limit, cluster.promql's
