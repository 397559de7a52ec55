"""Serializers of the endpoints API (docs/api.md "Inference endpoints").

Input is validated by :func:`inference.validation.parse_endpoint_request` (shared with the
portal's form); :class:`EndpointCreateSerializer` and :class:`EndpointPatchSerializer` document
that input in the OpenAPI schema with the same bounds.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inference import constants as c
from inference import specs
from inference.models import EndpointRevision, InferenceEndpoint, ReplicaSample, ScalingEvent
from inference.validation import MAX_AUTO_PROMOTE_WINDOWS, MAX_CANARY_WEIGHT
from workloads.api import (
    BorrowedFields,
    IdleFields,
    PlacementFields,
    PreviewSerializer,
    QueuedFields,
    SecretEnvField,
    StateSetFields,
    deprecated_names,
    for_reservation_input,
    secret_env_input,
)
from workloads.constants import MAX_GPU_MEMORY_GB, MAX_UNITS_PER_NODE, NAME_MAX_LENGTH
from workloads.telemetry.api import GpuNowFields


class AutoscaleSerializer(serializers.Serializer):
    metric = serializers.ChoiceField(choices=c.Metric.choices, default=specs.DEFAULT_METRIC)
    target = serializers.FloatField(min_value=0.001, required=False)
    engine = serializers.ChoiceField(choices=c.Engine.choices, required=False, help_text="queue_length only.")
    query = serializers.CharField(
        max_length=c.MAX_QUERY_LENGTH, required=False,
        help_text="PromQL, prometheus only. Every selector is confined to the team's namespace (namespace=\"…\" "
                  "is added where absent; another namespace, regex or negation on it, {__name__=~…}, ranges over "
                  "10m are refused); the stored query is the rewritten one.")


class RolloutFields(serializers.Serializer):
    """A new revision's serving fields (any of them; the others stay the endpoint's)."""

    image = serializers.CharField(required=False, help_text="A new image is a new revision.")
    command = serializers.ListField(child=serializers.CharField(), required=False, help_text="argv form.")
    args = serializers.ListField(child=serializers.CharField(), required=False)
    env = serializers.DictField(child=serializers.CharField(), required=False)
    weight = serializers.IntegerField(min_value=1, max_value=MAX_CANARY_WEIGHT, required=False,
                                      help_text="canary only (required then): the percent of requests it serves.")
    auto_promote_windows = serializers.IntegerField(
        min_value=0, max_value=MAX_AUTO_PROMOTE_WINDOWS, required=False,
        help_text="canary only: promote it after this many consecutive good 30 s windows (0: by hand).")


class RolloutSerializer(RolloutFields):
    """POST /api/v1/endpoints/{id}/rollout/ (documentation of the accepted fields)."""

    strategy = serializers.ChoiceField(choices=c.Rollout.choices, default=c.Rollout.REPLACE,
                                       help_text="replace: the Deployment rolls; canary: beside it at `weight`.")


class EndpointPatchSerializer(RolloutFields):
    """PATCH /api/v1/endpoints/{id}/ (documentation of the accepted fields)."""

    image = serializers.CharField(required=False, help_text="A new image is a new revision (rolled out by rollout).")
    rollout = serializers.ChoiceField(choices=c.Rollout.choices, default=c.Rollout.REPLACE, required=False,
                                      help_text="How a change of image, command, args or env rolls out.")
    secret_env = secret_env_input(" A PATCH replaces the whole set (names and values; {} removes them all), "
                                  "stored encrypted, and rolls the replicas.")
    min_replicas = serializers.IntegerField(min_value=0, max_value=c.MAX_REPLICAS, required=False,
                                            help_text="Guaranteed: a higher minimum must fit the quota now.")
    max_replicas = serializers.IntegerField(min_value=1, max_value=c.MAX_REPLICAS, required=False)
    autoscale = AutoscaleSerializer(required=False)
    scale_down_delay_seconds = serializers.IntegerField(min_value=0, max_value=c.MAX_SCALE_DOWN_DELAY_SECONDS,
                                                        required=False)


class EndpointCreateSerializer(EndpointPatchSerializer):
    """POST /api/v1/endpoints/ (documentation of the accepted fields)."""

    secret_env = secret_env_input()
    # A new endpoint is its revision 1: nothing to roll out.
    rollout = weight = auto_promote_windows = None

    team = serializers.SlugField()
    name = serializers.CharField(max_length=NAME_MAX_LENGTH, help_text="DNS-1035 label, unique among live endpoints.")
    image = serializers.CharField(help_text="Container image reference.")
    command = serializers.ListField(child=serializers.CharField(), required=False, help_text="argv form.")
    args = serializers.ListField(child=serializers.CharField(), required=False)
    port = serializers.IntegerField(min_value=1, max_value=65535, default=specs.DEFAULT_PORT)
    flavor = serializers.CharField(help_text="Any flavor: a whole GPU, a MIG slice or a unit of a shared GPU "
                                             "(time-sliced or MPS: gpus_per_replica 1).")
    gpus_per_replica = serializers.IntegerField(
        min_value=1, max_value=MAX_UNITS_PER_NODE, default=1,
        help_text="Units of the flavor per replica: whole GPUs, or MIG slices or shared-GPU replicas for such a flavor.")
    min_replicas = serializers.IntegerField(min_value=0, max_value=c.MAX_REPLICAS, default=1)
    readiness_path = serializers.CharField(max_length=200, default=specs.DEFAULT_READINESS_PATH)
    startup_timeout_seconds = serializers.IntegerField(min_value=10, max_value=c.MAX_STARTUP_TIMEOUT_SECONDS,
                                                       default=specs.DEFAULT_STARTUP_TIMEOUT_SECONDS)
    spot = serializers.BooleanField(default=False)
    cluster_selector = serializers.DictField(child=serializers.CharField(), required=False,
                                             help_text="Labels a cluster must carry to be chosen; empty: any cluster.")
    gpu_memory_gb = serializers.FloatField(
        min_value=0.1, max_value=MAX_GPU_MEMORY_GB, required=False, allow_null=True,
        help_text="Optional: the GPU memory each pod needs (GB). Advice only: the dry run warns when the flavor's "
                  "memory per unit is less; the sandbox simulates that much use.")
    for_reservation = for_reservation_input()


@deprecated_names("2026-11", cluster_name="object_name", estimated_cost_per_hour="cost_per_hour_now")
class EndpointSerializer(QueuedFields, StateSetFields, IdleFields, GpuNowFields, SecretEnvField, BorrowedFields, PlacementFields, serializers.ModelSerializer):
    """An endpoint as the API shows it. Queue position and start estimate come from the context."""

    team = serializers.CharField(source="team.slug")
    flavor = serializers.CharField(source="flavor.name")
    created_by = serializers.CharField(source="created_by.username")
    url = serializers.CharField(help_text="Its external URL, through the gateway: {SLIPWAY_GATEWAY_URL}/{team}/{name}; "
                                          "call it with Authorization: Bearer <key> (docs/serving.md).")
    internal_url = serializers.CharField(help_text="The in-cluster address of its Service (the gateway's upstream).")
    object_name = serializers.CharField(help_text="The name of its Kubernetes objects (\"ep-7\").")
    namespace = serializers.CharField()
    cost_to_date = serializers.DecimalField(max_digits=14, decimal_places=4)
    # The admitted maximum by the one rule (InferenceEndpoint.ceiling), as the page shows it.
    replica_ceiling = serializers.IntegerField(source="ceiling", read_only=True)
    cost_per_hour_now = serializers.DecimalField(
        max_digits=14, decimal_places=4,
        help_text="What it costs per hour now: its units running now (ready and loading replicas) at its unit-hour price.")
    cost_per_hour_range = serializers.ListField(child=serializers.DecimalField(max_digits=14, decimal_places=4))

    class Meta:
        model = InferenceEndpoint
        fields = [
            "id", "team", "name", "state", "is_final", "holds_quota", "reason", "reason_code", "created_by", "created_at", "admitted_at", "started_at",
            "finished_at", "replicas", "desired_replicas", "replica_ceiling", "url", "internal_url", "cost_to_date",
            "cost_per_hour_now", "estimated_cost_per_hour", "cost_per_hour_range", "namespace", "object_name", "cluster_name", "queue_position",
            "estimated_start_at", "estimated_start_earliest", "estimated_start_latest", "start_estimate", "borrowed_units", "reservation", "for_reservation", "preemptible", "preemptions", "last_preempted_at", "idle_gpu_hours", "idle_cost", "idle_since",
            "image", "command", "args", "env", "secret_env", "port", "flavor", "gpus_per_replica", "min_replicas",
            "max_replicas", "autoscale", "scale_down_delay_seconds", "readiness_path", "startup_timeout_seconds",
            "spot", "cluster", "placement_reason", "cluster_selector", "price_per_hour", "currency", "gpu_memory_gb",
            "gpu_utilization", "gpu_memory_used_gb", "gpu_memory_total_gb",
        ]
        read_only_fields = fields


class ScalingEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = ScalingEvent
        fields = ["at", "replicas", "desired_replicas", "replica_ceiling", "metric_value", "decision", "reason"]
        read_only_fields = fields


class ReplicaSampleSerializer(serializers.ModelSerializer):
    class Meta:
        model = ReplicaSample
        fields = ["at", "ready", "desired", "ceiling"]
        read_only_fields = fields


class RevisionTrafficSerializer(serializers.Serializer):
    requests = serializers.IntegerField()
    errors_5xx = serializers.IntegerField()
    error_rate = serializers.FloatField(allow_null=True, help_text="5xx answers over requests.")
    p95_ms = serializers.FloatField(allow_null=True, help_text="p95 latency of whole requests (ms).")


class RevisionSerializer(serializers.ModelSerializer):
    """One revision of an endpoint, with its traffic over the last 5 minutes (``traffic``, from the context)."""

    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    image = serializers.SerializerMethodField()
    summary = serializers.SerializerMethodField(help_text="The spec in one line: image, command and args, env names.")
    traffic = serializers.SerializerMethodField()

    class Meta:
        model = EndpointRevision
        fields = ["number", "state", "rollout", "weight", "replicas", "reason", "image", "summary", "spec",
                  "auto_promote_windows", "good_windows", "bad_windows", "verdict", "created_at", "created_by",
                  "ended_at", "traffic"]
        read_only_fields = fields

    def get_image(self, rev) -> str:
        return rev.spec.get("image", "")

    def get_summary(self, rev) -> str:
        return revision_summary(rev.spec)

    @extend_schema_field(RevisionTrafficSerializer)
    def get_traffic(self, rev) -> dict:
        return (self.context.get("traffic") or {}).get(rev.number) or {
            "requests": 0, "errors_5xx": 0, "error_rate": None, "p95_ms": None}


def revision_summary(spec: dict) -> str:
    """A revision's spec in one line (the page, the API and the CLI's table)."""
    words = [spec.get("image", "")]
    argv = [*(spec.get("command") or []), *(spec.get("args") or [])]
    if argv:
        words.append(" ".join(argv))
    if spec.get("env"):
        words.append("env " + ", ".join(sorted(spec["env"])))
    return " · ".join(w for w in words if w)


class EndpointPreviewSerializer(PreviewSerializer):
    """An endpoint's dry run: the preview of its minimum, plus its cost at the maximum and the burst possible now."""

    cost_per_hour_at_max = serializers.DecimalField(max_digits=14, decimal_places=4)
    burst_replicas_now = serializers.IntegerField(help_text="Replicas burst would be granted up to now.")
    burst = serializers.CharField(help_text="The same in words, with what holds it back.")
