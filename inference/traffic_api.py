"""The API's endpoint traffic (docs/api.md "Endpoint traffic"): ``GET /endpoints/{id}/traffic/``.

It answers :func:`inference.traffic.series` — what the endpoint page's Traffic card draws — for
``?since=`` (RFC 3339 or Unix seconds, read as GPU telemetry's is), ``?step=`` (seconds per point, a
multiple of 10) and ``?revision=``; a bad one, or a pair that makes more than
:data:`inference.traffic.MAX_POINTS` points, is a 400 naming it.
"""

from __future__ import annotations

from datetime import datetime

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from core.text import whole_number
from inference.traffic import DEFAULT_STEP, FIGURES, MAX_POINTS, RAW_STEP
from workloads.telemetry.api import MAX_STEP, parse_time

#: The highest revision number a query may name (a PositiveIntegerField's bound).
MAX_REVISION = 2_147_483_647

PARAMETERS = [
    OpenApiParameter("since", OpenApiTypes.STR,
                     description="Points from this time: RFC 3339 (2026-11-22T10:00:00Z) or Unix seconds; default: "
                                 "an hour ago."),
    OpenApiParameter("step", {"type": "integer", "minimum": RAW_STEP, "maximum": MAX_STEP, "multipleOf": RAW_STEP},
                     description=f"Seconds per point, a multiple of {RAW_STEP} (default {DEFAULT_STEP}); over rows "
                                 f"folded into minutes, at least a minute. At most {MAX_POINTS} points from since."),
    OpenApiParameter("revision", {"type": "integer", "minimum": 1, "maximum": MAX_REVISION},
                     description="Only this revision's requests (default: all, and each revision apart)."),
]

_HELP = {
    "requests_per_second": "requests answered a second over the point",
    "error_rate": "5xx answers over requests (0–1); null: no request",
    "latency_p50_ms": "whole-request latency, median (ms); null: no request",
    "latency_p95_ms": "whole-request latency, 95th percentile (ms)",
    "latency_p99_ms": "whole-request latency, 99th percentile (ms)",
    "ttft_p50_ms": "time to first token of streamed answers, median (ms); null: no stream",
    "ttft_p95_ms": "time to first token of streamed answers, 95th percentile (ms)",
    "tokens_per_second": "output tokens a second over the point",
    "in_flight": "the most requests in flight at once during the point",
}


def _figure_fields() -> dict:
    fields = {}
    for name in FIGURES:
        child = serializers.IntegerField() if name == "in_flight" else serializers.FloatField(allow_null=True)
        fields[name] = serializers.ListField(child=child, help_text=_HELP[name] + ", one per t")
    return fields


TrafficFiguresSerializer = type("TrafficFiguresSerializer", (serializers.Serializer,), _figure_fields())
TrafficRevisionSerializer = type("TrafficRevisionSerializer", (TrafficFiguresSerializer,), {
    "revision": serializers.IntegerField(help_text="the revision's number"),
})


class TrafficSerializer(serializers.Serializer):
    ref = serializers.CharField(help_text='the endpoint ("ep:7")')
    since = serializers.CharField(help_text="the first point's start (RFC 3339)")
    until = serializers.CharField(help_text="now, the last point's end (RFC 3339)")
    step = serializers.IntegerField(help_text="seconds per point asked for")
    revision = serializers.IntegerField(allow_null=True, help_text="the revision asked for; null: all")
    t = serializers.ListField(child=serializers.IntegerField(), help_text="each point's start (Unix seconds)")
    seconds = serializers.ListField(child=serializers.IntegerField(),
                                    help_text="what each point spans: step, at least a minute over folded rows")
    total = TrafficFiguresSerializer(help_text="the endpoint's figures (its revisions together)")
    revisions = TrafficRevisionSerializer(many=True, help_text="each revision with requests in the span, apart")


def traffic_query(request) -> tuple[datetime | None, int, int | None]:
    """``?since=&step=&revision=`` of a traffic read, or a 400 naming the bad ones."""
    params, errors = request.query_params, {}
    since = revision = None
    step = DEFAULT_STEP
    raw = params.get("since")
    if raw is not None:
        since = parse_time(raw)
        if since is None:
            errors["since"] = ["Must be a time: RFC 3339 (2026-11-22T10:00:00Z) or Unix seconds."]
    raw = params.get("step")
    if raw is not None:
        number = whole_number(raw)
        if number is not None and RAW_STEP <= number <= MAX_STEP and number % RAW_STEP == 0:
            step = number
        else:
            errors["step"] = [f"Must be a whole number of seconds from {RAW_STEP} to {MAX_STEP}, a multiple of "
                              f"{RAW_STEP}."]
    raw = params.get("revision")
    if raw is not None:
        revision = whole_number(raw)
        if revision is None or not 1 <= revision <= MAX_REVISION:
            errors["revision"] = ["Must be a revision number: a whole number from 1."]
    if errors:
        raise ValidationError(errors)
    return since, step, revision
