"""The API's GPU telemetry (docs/api.md "GPU telemetry"): ``GET …/{id}/telemetry/`` and the GPUs-now fields.

``telemetry/`` answers :func:`workloads.telemetry.series.series` — what every kind's page's charts
draw — for ``?since=`` (RFC 3339 or Unix seconds) and ``?step=`` (seconds per
point); a bad one is a 400 naming it. Every kind's viewset has it (:class:`workloads.api.WorkloadReadActions`).
:class:`GpuNowFields` add ``gpu_utilization``, ``gpu_memory_used_gb`` and ``gpu_memory_total_gb`` to
a run or an endpoint from :func:`workloads.telemetry.series.now_figures` (``slipway top`` prints them).
"""

from __future__ import annotations

from datetime import UTC, datetime

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from core.text import whole_number
from workloads.telemetry.series import MAX_POINTS, GpuNow

#: The most seconds a ``step`` may be (a month: one point per month is as coarse as a chart gets).
MAX_STEP = 31 * 86400

PARAMETERS = [
    # A string, not a date-time: Unix seconds are a time too (a chart's next poll sends its last t).
    OpenApiParameter("since", OpenApiTypes.STR,
                     description="Only points from this time: RFC 3339 (2026-11-22T10:00:00Z) or Unix seconds; "
                                 "default: the workload's whole life."),
    OpenApiParameter("step", {"type": "integer", "minimum": 1, "maximum": MAX_STEP},
                     description=f"About one point per this many seconds (at most {MAX_POINTS} points); default: as "
                                 "many as the page's chart is wide."),
]


class TelemetryLineSerializer(serializers.Serializer):
    gpu = serializers.CharField(help_text="the exporter's GPU id: its UUID (a MIG slice: <uuid>/<instance>)")
    t = serializers.ListField(child=serializers.IntegerField(), help_text="Unix seconds of each point")
    v = serializers.ListField(child=serializers.FloatField(allow_null=True),
                              help_text="the value at each t; null: a gap (nothing reported then)")


class TelemetrySeriesSerializer(serializers.Serializer):
    """One list of lines (one per GPU) per chart (:data:`workloads.telemetry.series.CHARTS`)."""

    util_pct = TelemetryLineSerializer(many=True, help_text="Utilization (%), per GPU")
    fb_used_mib = TelemetryLineSerializer(many=True, help_text="Memory used (MiB), per GPU")
    fb_total_mib = TelemetryLineSerializer(many=True, help_text="Memory total (MiB): used + free, per GPU")
    temp_c = TelemetryLineSerializer(many=True, help_text="Temperature (°C), per GPU")
    power_w = TelemetryLineSerializer(many=True, help_text="Power (W), per GPU")


class TelemetrySerializer(serializers.Serializer):
    ref = serializers.CharField(help_text='the workload ("run:42")')
    since = serializers.CharField(allow_null=True, help_text="the since asked for (RFC 3339), null: none")
    until = serializers.CharField(allow_null=True, help_text="the time of the newest point (RFC 3339); null: none yet")
    points = serializers.IntegerField(help_text="each line was downsampled (LTTB) to at most this many points")
    gpus = serializers.ListField(child=serializers.CharField(), help_text="every GPU it had, in the order first seen")
    series = TelemetrySeriesSerializer()


def telemetry_query(request) -> tuple[datetime | None, int | None]:
    """``?since=&step=`` of a telemetry read, or a 400 naming the bad one."""
    params, errors = request.query_params, {}
    since = step = None
    raw = params.get("since")
    if raw is not None:
        since = _time(raw)
        if since is None:
            errors["since"] = ["Must be a time: RFC 3339 (2026-11-22T10:00:00Z) or Unix seconds."]
    raw = params.get("step")
    if raw is not None:
        step = whole_number(raw)
        if step is None or not 1 <= step <= MAX_STEP:
            errors["step"] = [f"Must be a whole number of seconds from 1 to {MAX_STEP}."]
    if errors:
        raise ValidationError(errors)
    return since, step


def _time(raw: str) -> datetime | None:
    """RFC 3339 (a time without an offset is UTC) or Unix seconds; None for anything else."""
    raw = raw.strip()
    seconds = whole_number(raw, 11)
    if seconds is not None:
        return datetime.fromtimestamp(seconds, tz=UTC)
    try:
        at = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    if at.year < 2000 or at.year > 9000:
        return None
    # In UTC: Python takes offsets up to 24 h, PostgreSQL refuses a displacement past 15:59 (a 500).
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).astimezone(UTC)


#: The one reading of a ``since`` (the endpoints' traffic/ reads it too).
parse_time = _time


def _now_of(serializer, workload) -> GpuNow | None:
    return serializer.context.get("gpu_now", {}).get(workload.ref)


class GpuNowFields(serializers.Serializer):
    """Its GPUs now, from its newest telemetry (from :func:`workloads.api.queue_context`); null: not measured."""

    gpu_utilization = serializers.SerializerMethodField(
        help_text="Percent busy, the mean over its GPUs at its newest reading (within 3 minutes); null: not measured.")
    gpu_memory_used_gb = serializers.SerializerMethodField(
        help_text="GPU memory in use on all its GPUs (GiB), at the same reading; null: not measured.")
    gpu_memory_total_gb = serializers.SerializerMethodField(
        help_text="The size of those GPUs' memory (GiB); null: not reported.")

    def get_gpu_utilization(self, workload) -> float | None:
        now = _now_of(self, workload)
        return None if now is None else now.util_pct

    def get_gpu_memory_used_gb(self, workload) -> float | None:
        now = _now_of(self, workload)
        return None if now is None else now.used_gb

    def get_gpu_memory_total_gb(self, workload) -> float | None:
        now = _now_of(self, workload)
        return None if now is None else now.total_gb
