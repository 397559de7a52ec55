"""Serializers of the workspaces API (docs/workspaces.md "API").

Input is validated by :func:`workspaces.validation.parse_workspace_request` (shared with the portal's
form); :class:`WorkspaceCreateSerializer` documents that input in the OpenAPI schema with the same
bounds. No serializer has a field for the Jupyter token: ``open/`` hands out the way in, to those
allowed only.
"""

from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers

from core.priority import Priority
from workloads.api import (
    BorrowedFields,
    IdleFields,
    PlacementFields,
    QueuedFields,
    StateSetFields,
    for_reservation_input,
)
from workloads.constants import MAX_GPU_MEMORY_GB, MAX_UNITS_PER_NODE, NAME_MAX_LENGTH
from workloads.telemetry.api import GpuNowFields
from workspaces import constants as c
from workspaces.idle import idle_for
from workspaces.models import Workspace


class WorkspaceVolumeSerializer(serializers.Serializer):
    claim = serializers.CharField(help_text="A PersistentVolumeClaim of the team's namespace.")
    mount_path = serializers.CharField()
    read_only = serializers.BooleanField(default=False)


class WorkspaceCreateSerializer(serializers.Serializer):
    """POST /api/v1/workspaces/ (documentation of the accepted fields)."""

    team = serializers.SlugField()
    name = serializers.CharField(max_length=NAME_MAX_LENGTH, help_text="DNS-1035 label, unique among the team's "
                                                                        "workspaces not deleted.")
    flavor = serializers.CharField(help_text="A whole GPU, a MIG slice or a unit of a shared GPU (gpus 1).")
    gpus = serializers.IntegerField(min_value=1, max_value=MAX_UNITS_PER_NODE, default=1,
                                    help_text="Units of the flavor, in one pod.")
    image = serializers.CharField(required=False, help_text="A JupyterLab image (docker-stacks' start-notebook.py); "
                                                            "default: the platform's (SLIPWAY_WORKSPACE_IMAGE).")
    cpu = serializers.FloatField(min_value=0.1, max_value=c.MAX_CPU, required=False, allow_null=True)
    memory_gb = serializers.FloatField(min_value=0.25, max_value=c.MAX_MEMORY_GB, required=False, allow_null=True)
    home_gb = serializers.IntegerField(min_value=c.MIN_HOME_GB, max_value=c.MAX_HOME_GB, default=c.DEFAULT_HOME_GB,
                                       help_text="The home volume: kept while paused, deleted with the workspace.")
    idle_minutes = serializers.IntegerField(
        min_value=c.MIN_IDLE_MINUTES, max_value=c.MAX_IDLE_MINUTES, required=False,
        help_text=f"Paused after this long idle (no notebook activity, GPU under the idle threshold); default "
                  f"{c.DEFAULT_IDLE_MINUTES}, at most the team's maximum (set by platform staff).")
    env = serializers.DictField(child=serializers.CharField(), required=False)
    volumes = WorkspaceVolumeSerializer(many=True, required=False)
    priority = serializers.ChoiceField(choices=Priority.choices, required=False,
                                       help_text="Default: the team's for workspaces (high: interactive work).")
    spot = serializers.BooleanField(default=False)
    shared_with_admins = serializers.BooleanField(default=False, help_text="The team's admins may open it too.")
    cluster_selector = serializers.DictField(child=serializers.CharField(), required=False)
    gpu_memory_gb = serializers.FloatField(min_value=0.1, max_value=MAX_GPU_MEMORY_GB, required=False,
                                           allow_null=True, help_text="Advice only, as for runs.")
    for_reservation = for_reservation_input()


class WorkspaceSerializer(QueuedFields, StateSetFields, IdleFields, GpuNowFields, BorrowedFields, PlacementFields, serializers.ModelSerializer):
    """A workspace as the API shows it. Queue position and start estimate come from the context."""

    team = serializers.CharField(source="team.slug")
    flavor = serializers.CharField(source="flavor.name")
    created_by = serializers.CharField(source="created_by.username")
    object_name = serializers.CharField(help_text="The name of its Kubernetes objects (\"ws-7\").")
    namespace = serializers.CharField()
    cost_to_date = serializers.DecimalField(max_digits=14, decimal_places=4, help_text="Cost so far: billed only "
                                                                                        "while its pod ran.")
    cost_per_hour = serializers.DecimalField(
        max_digits=14, decimal_places=4,
        help_text="What it costs per hour now, by its state: while it holds its GPUs (admitted, starting, running) "
                  "its units at price_per_hour; queued, paused or ended 0 (a paused workspace holds no GPU).")
    running_cost_per_hour = serializers.DecimalField(
        max_digits=14, decimal_places=4,
        help_text="What it costs per hour while it runs: what resuming it costs and pausing it saves.")
    idle_for_seconds = serializers.SerializerMethodField(
        help_text="How long it has been idle by the idle rule (notebook and GPU); null when it is not (or not known).")

    class Meta:
        model = Workspace
        fields = [
            "id", "team", "name", "state", "is_final", "holds_quota", "reason", "reason_code", "pause_cause", "created_by", "created_at", "admitted_at",
            "started_at", "paused_at", "finished_at", "attempt", "cost_to_date", "cost_per_hour", "running_cost_per_hour", "price_per_hour", "currency",
            "idle_for_seconds", "last_activity_at", "idle_minutes", "idle_gpu_hours", "idle_cost", "idle_since",
            "flavor", "gpus", "image", "cpu", "memory_gb", "home_gb", "env", "volumes", "priority", "spot",
            "shared_with_admins", "namespace", "object_name", "queue_position", "estimated_start_at",
            "estimated_start_earliest", "estimated_start_latest", "start_estimate", "borrowed_units", "reservation", "for_reservation", "preemptible", "preemptions", "cluster", "placement_reason", "cluster_selector",
            "gpu_memory_gb", "gpu_utilization", "gpu_memory_used_gb", "gpu_memory_total_gb",
        ]
        read_only_fields = fields

    def get_idle_for_seconds(self, workspace) -> int | None:
        found = idle_for(workspace, timezone.now())
        return int(found.total_seconds()) if found is not None else None


class OpenSerializer(serializers.Serializer):
    url = serializers.CharField(help_text="Its Jupyter server on the workspace's own host (ws-<id>.<workspace host>; on "
                                          "the sandbox ws-<id>.localhost:<proxy port>), with a one-use ticket for this "
                                          "caller, good for 60 seconds, which the host exchanges for its cookie.")


class ShareSerializer(serializers.Serializer):
    shared_with_admins = serializers.BooleanField()
