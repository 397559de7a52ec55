"""REST API of training runs (API.md "Training runs"). Thin: access helper + one service call."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.response import Response

from core.exceptions import conflict_response
from jobs import services
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.serializers import RunCreateSerializer, RunSerializer
from jobs.validation import parse_run_request
from teams.idempotency import idempotent, is_dry_run
from teams.models import Role
from teams.permissions import require_team
from workloads.api import (
    DRY_RUN_PARAMETER,
    ForecastSerializer,
    WorkloadViewSet,
    list_parameters,
    pk_of,
    team_slug_of_post,
)


@extend_schema_view(list=extend_schema(parameters=list_parameters(RunState.values)))
class RunViewSet(WorkloadViewSet):
    model = TrainingRun
    serializer_class = RunSerializer

    def get_object(self) -> TrainingRun:
        return services.get_run_for_user(self.request.user, pk_of(self.kwargs["pk"]), staff_reads=self.staff_reads())

    @extend_schema(request=RunCreateSerializer, responses={201: RunSerializer, 200: ForecastSerializer},
                   parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER), DRY_RUN_PARAMETER])
    @idempotent
    def create(self, request, *args, **kwargs):
        slug, fields = team_slug_of_post(request)
        if is_dry_run(request):
            team = require_team(request.user, slug, Role.MEMBER).team
            parse_run_request(fields)  # bad input is a 400 here too, not an "invalid" forecast
            return Response(ForecastSerializer(services.preview_run(team, fields).as_dict()).data)
        # The service checks access and returns the run as written (team, flavor, author and
        # admission outcome included): no read-back.
        run = services.submit_run(request.user, slug, fields)
        return Response(self.serialize(run), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={202: RunSerializer})
    @action(detail=True, methods=["post"])
    @idempotent
    def cancel(self, request, pk=None):
        run = self.get_object()
        try:
            run = services.cancel_run(request.user, run)
        except services.RunConflict as exc:
            return conflict_response(str(exc))
        return Response(self.serialize(run), status=status.HTTP_202_ACCEPTED)
