"""``GET /api/v1/endpoints/{id}/cold-starts/``: an endpoint's last cold-start timelines and its figures per stage
(docs/api.md, docs/serving.md "Cold starts"). A mixin of :class:`inference.api.EndpointViewSet`, whose
``get_object`` scopes it to the caller's teams (another team's endpoint: 404).
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from core.text import whole_number
from inference import coldstarts
from inference.constants import COLD_START_STAGES

#: Timelines a request gets when it names no ``limit``; the most it may ask is every one kept.
DEFAULT_LIMIT = 20

PARAMETERS = [OpenApiParameter("limit", {"type": "integer", "minimum": 1, "maximum": coldstarts.KEEP},
                               description=f"How many of the newest timelines (default {DEFAULT_LIMIT}).")]


class StageFiguresSerializer(serializers.Serializer):
    stage = serializers.CharField(help_text="a stage, or to_ready / to_first_byte for the whole way there")
    p50_seconds = serializers.FloatField(allow_null=True, help_text="the median, null without a sample")
    p95_seconds = serializers.FloatField(allow_null=True, help_text="the 95th percentile (nearest rank)")
    samples = serializers.IntegerField(help_text="timelines that measured it")


class ColdStartSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    pod = serializers.CharField(help_text="the replica's pod")
    revision = serializers.IntegerField(help_text="the endpoint revision it serves")
    from_zero = serializers.BooleanField(help_text="it woke the endpoint from zero replicas")
    complete = serializers.BooleanField(help_text="every stage reached: ready, or from zero its first byte")
    stages = serializers.DictField(child=serializers.DateTimeField(),
                                   help_text=f"the instant each stage was reached, of {', '.join(COLD_START_STAGES)}")
    durations = serializers.DictField(child=serializers.FloatField(),
                                      help_text="seconds each stage took: its instant minus the previous stage's")
    unattributed_seconds = serializers.FloatField(help_text="time that led to a stage whose predecessors were not "
                                                            "seen: no stage explains it")
    elapsed_seconds = serializers.FloatField(help_text="from admitted to the last stage reached")
    attributed_share = serializers.FloatField(help_text="the part of the elapsed seconds named stages explain (0-1)")


class ColdStartsSerializer(serializers.Serializer):
    kept = serializers.IntegerField(help_text=f"timelines kept for the endpoint (the newest {coldstarts.KEEP})")
    complete = serializers.IntegerField(help_text="of them, complete")
    timelines = ColdStartSerializer(many=True, help_text="the newest first")
    stages = StageFiguresSerializer(many=True, help_text="per stage, over every timeline kept")
    to_ready = StageFiguresSerializer(help_text="admitted → ready")
    to_first_byte = StageFiguresSerializer(help_text="admitted → first byte (timelines from zero)")


def _limit(request) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return DEFAULT_LIMIT
    limit = whole_number(raw)
    if limit is not None and 1 <= limit <= coldstarts.KEEP:
        return limit
    raise ValidationError({"limit": [f"Must be a whole number from 1 to {coldstarts.KEEP}."]})


def _figures(figures: coldstarts.StageFigures) -> dict:
    return {"stage": figures.stage, "p50_seconds": figures.p50, "p95_seconds": figures.p95,
            "samples": figures.samples}


def _timeline(found: coldstarts.Timeline) -> dict:
    row, attribution = found.row, found.attribution
    return {"id": row.pk, "pod": row.pod, "revision": row.revision, "from_zero": row.from_zero,
            "complete": row.complete, "stages": {stage: at.isoformat() for stage, at in found.instants.items()},
            "durations": {stage: round(seconds, 3) for stage, seconds in attribution.durations.items()},
            "unattributed_seconds": round(attribution.unattributed, 3),
            "elapsed_seconds": round(attribution.elapsed, 3),
            "attributed_share": round(attribution.attributed_share, 4)}


def cold_starts_answer(endpoint, limit: int) -> dict:
    """The answer's body (pure reading: two queries)."""
    past = coldstarts.history(endpoint)
    return {"kept": endpoint.cold_starts.count(), "complete": past.complete,
            "timelines": [_timeline(found) for found in coldstarts.timelines(endpoint, limit)],
            "stages": [_figures(figures) for figures in past.stages],
            "to_ready": _figures(past.to_ready), "to_first_byte": _figures(past.to_first_byte)}


class ColdStartsMixin:
    """The ``cold-starts/`` action of the endpoints' viewset."""

    @extend_schema(parameters=PARAMETERS, responses=ColdStartsSerializer)
    @action(detail=True, methods=["get"], url_path="cold-starts", url_name="cold-starts")
    def cold_starts(self, request, pk=None):
        """Its newest cold-start timelines (every new replica's stages, their durations and the share of the
        elapsed time they explain) and the p50/p95 of each stage over every timeline kept."""
        endpoint = self.get_object()
        return Response(cold_starts_answer(endpoint, _limit(request)))
