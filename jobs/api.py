"""REST API of training runs (API.md "Training runs"). Thin: access helper + one service call."""

from __future__ import annotations

import yaml
from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from jobs import services
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.serializers import EventSerializer, LogsSerializer, RunCreateSerializer, RunSerializer
from portal.exceptions import conflict_response
from portal.idempotency import idempotent
from portal.models import Role
from portal.permissions import require_team
from quotas import admission
from workloads import services as workloads


def queue_positions_for(runs) -> dict[str, int]:
    """Queue positions of the queued runs among ``runs`` (one query per team with a queue)."""
    teams = {run.team_id: run.team for run in runs if run.state == RunState.QUEUED}
    positions: dict[str, int] = {}
    for team in teams.values():
        positions.update(admission.queue_positions(team))
    return positions


def _tail(request) -> int:
    raw = request.query_params.get("tail", "200")
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= 5000:  # "²".isdigit() is True
        raise ValidationError({"tail": ["Must be a whole number between 1 and 5000."]})
    return int(raw)


class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = RunSerializer

    def get_queryset(self) -> QuerySet:
        qs = TrainingRun.objects.for_user(self.request.user).for_list()
        params = self.request.query_params
        if params.get("team"):
            qs = qs.filter(team__slug=params["team"])
        if params.get("state"):
            if params["state"] not in RunState.values:
                raise ValidationError({"state": [f"Must be one of: {', '.join(RunState.values)}."]})
            qs = qs.filter(state=params["state"])
        if params.get("created_by"):
            qs = qs.filter(created_by__username=params["created_by"])
        return qs

    def get_object(self) -> TrainingRun:
        pk = self.kwargs["pk"]
        if not (str(pk).isascii() and str(pk).isdigit()):  # "²".isdigit() is True, int("²") fails
            from django.http import Http404

            raise Http404
        return services.get_run_for_user(self.request.user, int(pk))

    @extend_schema(parameters=[
        OpenApiParameter("team", str, description="Team slug"),
        OpenApiParameter("state", str, enum=RunState.values),
        OpenApiParameter("created_by", str, description="Username"),
    ])
    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        context = {**self.get_serializer_context(), "queue_positions": queue_positions_for(page)}
        return self.get_paginated_response(RunSerializer(page, many=True, context=context).data)

    def retrieve(self, request, *args, **kwargs):
        run = self.get_object()
        return Response(self._serialize(run))

    def _serialize(self, run: TrainingRun) -> dict:
        context = {**self.get_serializer_context(), "queue_positions": queue_positions_for([run])}
        return RunSerializer(run, context=context).data

    @extend_schema(request=RunCreateSerializer, responses={201: RunSerializer},
                   parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER)])
    @idempotent
    def create(self, request, *args, **kwargs):
        data = request.data if isinstance(request.data, dict) else None
        if data is None:
            raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
        slug = data.get("team")
        if not slug or not isinstance(slug, str):
            raise ValidationError({"team": ["This field is required."]})
        if "\x00" in slug:  # PostgreSQL text cannot hold it: never let it reach the lookup
            raise ValidationError({"team": ["Must not contain NUL characters."]})
        membership = require_team(request.user, slug, Role.MEMBER)
        fields = {k: v for k, v in data.items() if k != "team"}
        run = services.submit_run(request.user, membership.team, fields)
        run = services.get_run_for_user(request.user, run.pk)
        return Response(self._serialize(run), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={202: RunSerializer})
    @action(detail=True, methods=["post"])
    @idempotent
    def cancel(self, request, pk=None):
        run = self.get_object()
        try:
            run = services.cancel_run(request.user, run)
        except services.RunConflict as exc:
            return conflict_response(str(exc))
        return Response(self._serialize(run), status=status.HTTP_202_ACCEPTED)

    @extend_schema(parameters=[OpenApiParameter("tail", int)], responses=LogsSerializer)
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        run = self.get_object()
        return Response({"lines": workloads.logs(run, _tail(request))})

    @extend_schema(responses=EventSerializer(many=True))
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        run = self.get_object()
        return Response([EventSerializer(e).data for e in workloads.events(run)])

    @extend_schema(parameters=[OpenApiParameter("format", str, enum=["json", "yaml"])],
                   responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"])
    def manifest(self, request, pk=None):
        run = self.get_object()
        objects = workloads.manifests(run)
        fmt = request.query_params.get("format", "json")
        if fmt == "yaml":
            body = yaml.safe_dump_all(objects, sort_keys=False)
            return HttpResponse(body, content_type="application/yaml; charset=utf-8")
        if fmt != "json":
            raise ValidationError({"format": ["Must be json or yaml."]})
        return Response(objects)
