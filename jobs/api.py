"""REST API of training runs (API.md "Training runs"). Thin: access helper + one service call.

List, retrieve, create (and its dry run) and the reading actions are every kind's (:class:`workloads.api.WorkloadViewSet`).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.response import Response

from core.exceptions import conflict_response
from jobs import services
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.serializers import RunCreateSerializer, RunSerializer
from teams.idempotency import idempotent
from workloads.api import ForecastSerializer, WorkloadViewSet, create_schema, list_parameters


@extend_schema_view(list=extend_schema(parameters=list_parameters(RunState.values)),
                    create=create_schema(RunCreateSerializer, RunSerializer, ForecastSerializer))
class RunViewSet(WorkloadViewSet):
    """Training runs of the caller's teams (API.md "Training runs"): submit, read, cancel."""

    model = TrainingRun
    serializer_class = RunSerializer

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
