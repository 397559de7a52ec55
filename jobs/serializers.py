"""Serializers of the runs API (docs/api.md "Training runs").

Input is validated by :func:`jobs.validation.parse_run_request` (shared with the portal's
form); :class:`RunCreateSerializer` exists to document that input in the OpenAPI schema.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from cluster.training import DEFAULT_FRAMEWORK, FRAMEWORKS
from core.priority import Priority
from jobs import constants as c
from jobs.models import TrainingRun
from workloads.api import (
    BorrowedFields,
    IdleFields,
    PlacementFields,
    PriceField,
    QueuedFields,
    SecretEnvField,
    StateSetFields,
    deprecated_names,
    for_reservation_input,
    secret_env_input,
)
from workloads.constants import MAX_GPU_MEMORY_GB, MAX_UNITS_PER_NODE, NAME_MAX_LENGTH
from workloads.telemetry.api import GpuNowFields


class VolumeSerializer(serializers.Serializer):
    claim = serializers.CharField(help_text="A PersistentVolumeClaim in the team's namespace.")
    mount_path = serializers.CharField()
    read_only = serializers.BooleanField(default=False)


class CheckpointContractSerializer(serializers.Serializer):
    grace_seconds = serializers.IntegerField(min_value=1, max_value=c.MAX_CHECKPOINT_GRACE_SECONDS,
                                             default=c.DEFAULT_CHECKPOINT_GRACE_SECONDS,
                                             help_text="SIGTERM, then this long to save before SIGKILL.")
    volume = serializers.CharField(required=False, allow_null=True,
                                   help_text="A PersistentVolumeClaim of the team; null: Slipway provides one per run.")


class CheckpointReportSerializer(serializers.Serializer):
    """POST /api/v1/runs/{id}/checkpoints/ (documentation of the accepted fields)."""

    step = serializers.IntegerField(min_value=0)
    path = serializers.CharField(max_length=c.MAX_CHECKPOINT_PATH,
                                 help_text="Where the checkpoint is: the next attempt's SLIPWAY_RESUME_FROM. Under "
                                           "/slipway/checkpoints (a relative path is taken from there), at most "
                                           f"{c.MAX_CHECKPOINT_PATH} characters once there.")


class CheckpointSerializer(serializers.Serializer):
    """A run's last reported checkpoint."""

    at = serializers.DateTimeField()
    step = serializers.IntegerField()
    path = serializers.CharField()


class ProgressSerializer(serializers.Serializer):
    """A run's progress as it last reported it (or as its trainer did), and its ETA (docs/metrics.md)."""

    source = serializers.ChoiceField(
        choices=["run", "trainer"],
        help_text="Whose figures these are: the run's own reports, or its TrainJob's trainerStatus (Trainer v2), "
                  "which answers when the run reports nothing fresh (docs/training.md \"Progress\").")
    step = serializers.IntegerField(allow_null=True, help_text="null when the trainer's status answers (it says a "
                                                               "percentage, no steps).")
    total = serializers.IntegerField(allow_null=True)
    percent = serializers.FloatField()
    rate_per_second = serializers.FloatField(allow_null=True, help_text="Steps per second (null: not measured yet).")
    updated_at = serializers.DateTimeField(help_text="When it (or its trainer) last reported.")
    eta = serializers.DateTimeField(allow_null=True, help_text="When it should finish at that rate (null: unknown); "
                                                               "once done, when it reported its last step.")
    eta_seconds = serializers.IntegerField(allow_null=True, help_text="Seconds from now to the ETA (0 when late).")
    done = serializers.BooleanField(help_text="It reported its last step.")
    stale = serializers.BooleanField(help_text="No report for 15 minutes: the ETA is not to be trusted.")
    last_attempt = serializers.BooleanField(
        help_text="The figures are its last attempt's: it is queued again after a preemption (or its new attempt has "
                  "not reported yet); rate_per_second, eta and eta_seconds are null, done and stale false.")
    trainer_metrics = serializers.DictField(
        child=serializers.CharField(), help_text="The trainer's latest metrics (trainerStatus.metrics: name → value as "
                                                 "the trainer wrote it); empty when it gave none.")


class ProgressReportSerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=0)
    total = serializers.IntegerField(min_value=1, help_text="At least step.")


class MetricPointSerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=0)
    name = serializers.RegexField(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$", help_text="Katib's metric names: loss, Validation-accuracy.")
    value = serializers.FloatField(help_text="A finite number.")


class MetricsReportSerializer(serializers.Serializer):
    """POST /api/v1/runs/{id}/metrics/ (documentation of the accepted fields)."""

    points = MetricPointSerializer(many=True, required=False, help_text="At most 1000 a call.")
    progress = ProgressReportSerializer(required=False)


class MetricsRecordedSerializer(serializers.Serializer):
    points = serializers.IntegerField(help_text="Points recorded (new, or replacing the value of the same step).")
    progress = ProgressSerializer(allow_null=True)


class MetricsSerializer(serializers.Serializer):
    """GET /api/v1/runs/{id}/metrics/: the run's series and progress."""

    names = serializers.ListField(child=serializers.CharField(), help_text="Every metric name of the run.")
    series = serializers.DictField(child=serializers.ListField(child=serializers.ListField(child=serializers.FloatField())),
                                   help_text="{name: [[step, value], …]} in step order.")
    progress = ProgressSerializer(allow_null=True)


class RunCreateSerializer(serializers.Serializer):
    """POST /api/v1/runs/ (documentation of the accepted fields)."""

    team = serializers.SlugField()
    name = serializers.CharField(max_length=NAME_MAX_LENGTH, help_text="DNS-1123 label, unique among the team's active runs.")
    image = serializers.CharField(help_text="Container image reference.")
    command = serializers.ListField(child=serializers.CharField(), min_length=1,
                                    help_text="argv form, never a shell string; at least the program.")
    args = serializers.ListField(child=serializers.CharField(), required=False)
    env = serializers.DictField(child=serializers.CharField(), required=False)
    secret_env = secret_env_input()
    flavor = serializers.CharField()
    gpus_per_worker = serializers.IntegerField(
        min_value=1, max_value=MAX_UNITS_PER_NODE, default=1,
        help_text="Units of the flavor per worker: whole GPUs, or MIG slices or shared-GPU replicas for such a flavor.")
    workers = serializers.IntegerField(min_value=1, max_value=c.MAX_WORKERS, default=1,
                                       help_text="1 ⇒ Job; more ⇒ distributed training: a TrainJob on a Trainer v2 "
                                                 "cluster, a PyTorchJob (1 Master + workers−1 Worker) on a v1 one.")
    framework = serializers.ChoiceField(
        choices=FRAMEWORKS, default=DEFAULT_FRAMEWORK,
        help_text="What its distributed training runs (docs/training.md): pytorch on any cluster with a training "
                  "API; the others where a Trainer v2 cluster has a runtime for them (GET /clusters/ frameworks).")
    cpu = serializers.FloatField(min_value=0.001, max_value=c.MAX_CPU, required=False)
    memory_gb = serializers.FloatField(min_value=0.001, max_value=c.MAX_MEMORY_GB, required=False)
    shm_gb = serializers.FloatField(min_value=0.001, max_value=c.MAX_SHM_GB, required=False,
                                    help_text="At most memory_gb.")
    max_retries = serializers.IntegerField(min_value=0, max_value=c.MAX_RETRIES, default=2)
    max_runtime_minutes = serializers.IntegerField(min_value=1, max_value=c.MAX_RUNTIME_MINUTES, required=False,
                                                   help_text="Counts every attempt: each attempt's "
                                                             "activeDeadlineSeconds is what the earlier ones left.")
    priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.NORMAL)
    spot = serializers.BooleanField(default=False)
    volumes = VolumeSerializer(many=True, required=False)
    checkpoint = CheckpointContractSerializer(required=False, allow_null=True,
                                              help_text="Opts into the checkpoint contract (null: none).")
    cluster_selector = serializers.DictField(child=serializers.CharField(), required=False,
                                             help_text="Labels a cluster must carry to be chosen; empty: any cluster.")
    gpu_memory_gb = serializers.FloatField(
        min_value=0.1, max_value=MAX_GPU_MEMORY_GB, required=False, allow_null=True,
        help_text="Optional: the GPU memory each pod needs (GB). Advice only: the dry run warns when the flavor's "
                  "memory per unit is less; the sandbox simulates that much use.")
    for_reservation = for_reservation_input()


@deprecated_names("2026-11", cluster_name="object_name", kind="resource_kind")
class RunSerializer(QueuedFields, StateSetFields, IdleFields, GpuNowFields, SecretEnvField, BorrowedFields, PlacementFields, serializers.ModelSerializer):
    """A run as the API shows it. Queue position and start estimate come from the context."""

    team = serializers.CharField(source="team.slug")
    flavor = serializers.CharField(source="flavor.name")
    created_by = serializers.CharField(source="created_by.username")
    resource_kind = serializers.CharField(help_text="The resource kind of its main object: Job (one worker); for "
                                                    "several, TrainJob or PyTorchJob as its attempt was applied "
                                                    "(before that, as its cluster's training API says).")
    object_name = serializers.CharField(help_text="The name of its Kubernetes objects (\"run-42\").")
    namespace = serializers.CharField()
    estimated_cost_per_hour = PriceField(units="total_units")
    estimated_total_cost = serializers.DecimalField(max_digits=14, decimal_places=4, allow_null=True,
                                                    help_text="At most this, with max_runtime_minutes; else null.")
    cost_to_date = serializers.DecimalField(max_digits=14, decimal_places=4)
    checkpoint = CheckpointContractSerializer(allow_null=True, read_only=True)
    last_checkpoint = CheckpointSerializer(allow_null=True, read_only=True)
    progress = serializers.SerializerMethodField(help_text="Its progress and ETA (docs/metrics.md); null: none reported.")

    class Meta:
        model = TrainingRun
        fields = [
            "id", "team", "name", "state", "is_final", "holds_quota", "reason", "reason_code", "created_by", "created_at", "admitted_at", "started_at",
            "finished_at", "resource_kind", "kind", "object_name", "cluster_name", "namespace", "queue_position", "estimated_start_at",
            "estimated_start_earliest", "estimated_start_latest", "start_estimate", "borrowed_units", "reservation", "for_reservation", "preemptible", "preemptions", "last_preempted_at",
            "cost_to_date", "estimated_cost_per_hour", "estimated_total_cost", "idle_gpu_hours", "idle_cost",
            "idle_since", "image", "command", "args", "env", "secret_env", "flavor", "gpus_per_worker", "workers",
            "framework", "cpu", "memory_gb", "shm_gb", "max_retries", "max_runtime_minutes", "priority", "spot", "volumes",
            "checkpoint", "last_checkpoint", "attempt", "earlier_run_seconds", "cluster", "placement_reason", "cluster_selector",
            "price_per_hour", "currency", "gpu_memory_gb", "progress", "gpu_utilization", "gpu_memory_used_gb",
            "gpu_memory_total_gb",
        ]
        read_only_fields = fields

    @extend_schema_field(ProgressSerializer(allow_null=True))
    def get_progress(self, run) -> dict | None:
        return self.context.get("progress", {}).get(run.pk)
