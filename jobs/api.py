"""REST API of training runs (API.md "Training runs"). Thin: access helper + one service call."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from jobs import services
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.serializers import RunCreateSerializer, RunSerializer
from jobs.validation import parse_run_request
from portal.exceptions import conflict_response
from portal.idempotency import idempotent
from workloads.api import (
    DRY_RUN_PARAMETER,
    ForecastSerializer,
    WorkloadReadActions,
    is_dry_run,
    pk_of,
    queue_context,
    team_of_post,
)


class RunViewSet(WorkloadReadActions, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
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
        return services.get_run_for_user(self.request.user, pk_of(self.kwargs["pk"]))

    @extend_schema(parameters=[
        OpenApiParameter("team", str, description="Team slug"),
        OpenApiParameter("state", str, enum=RunState.values),
        OpenApiParameter("created_by", str, description="Username"),
    ])
    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        context = {**self.get_serializer_context(), **queue_context(page)}
        return self.get_paginated_response(RunSerializer(page, many=True, context=context).data)

    def retrieve(self, request, *args, **kwargs):
        run = self.get_object()
        return Response(self._serialize(run))

    def _serialize(self, run: TrainingRun) -> dict:
        context = {**self.get_serializer_context(), **queue_context([run])}
        return RunSerializer(run, context=context).data

    @extend_schema(request=RunCreateSerializer, responses={201: RunSerializer, 200: ForecastSerializer},
                   parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER), DRY_RUN_PARAMETER])
    @idempotent
    def create(self, request, *args, **kwargs):
        membership, fields = team_of_post(request)
        if is_dry_run(request):
            parse_run_request(fields)  # bad input is a 400 here too, not an "invalid" forecast
            return Response(ForecastSerializer(services.preview_run(membership.team, fields).as_dict()).data)
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
