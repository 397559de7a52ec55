"""REST API of training runs (API.md "Training runs"). Thin: access helper + one service call.

List, retrieve, create (and its dry run) and the reading actions are every kind's (:class:`workloads.api.WorkloadViewSet`).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import authentication, exceptions, status
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from core.exceptions import conflict_response
from jobs import checkpoints, services
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.serializers import CheckpointReportSerializer, CheckpointSerializer, RunCreateSerializer, RunSerializer
from teams.authentication import BearerTokenAuthentication
from teams.idempotency import idempotent
from teams.models import Role
from teams.permissions import get_membership, may_correct_checkpoint
from workloads.api import PreviewSerializer, WorkloadViewSet, create_schema, list_parameters, pk_of


@dataclass(frozen=True)
class RunCredential:
    """``request.auth`` of a request made with a run token: which run's pods made it."""

    run_id: int


class RunTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer slr_…``: a run token (:mod:`jobs.checkpoints`), on ``checkpoints/`` only.

    Anywhere else the token reaches :class:`teams.authentication.BearerTokenAuthentication`,
    which knows no such personal token: 401. The user is anonymous: the token stands for a
    run's pods, not for a person, and grants nothing a permission class would see.
    """

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if len(header) != 2 or header[0].lower() != self.keyword.lower().encode():
            return None
        raw = header[1].decode("ascii", errors="replace")
        if not checkpoints.is_run_token(raw):
            return None  # a personal token: the next class's
        run = checkpoints.run_for_token(raw)
        if run is None:
            raise exceptions.AuthenticationFailed("Invalid run token, or its run has ended.")
        return AnonymousUser(), RunCredential(run.pk)

    def authenticate_header(self, request) -> str:
        return self.keyword


class RunTokenScheme(OpenApiAuthenticationExtension):
    target_class = "jobs.api.RunTokenAuthentication"
    name = "runToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "A run's SLIPWAY_RUN_TOKEN: reports that run's checkpoints, nothing else."}


@extend_schema_view(list=extend_schema(parameters=list_parameters(RunState.values)),
                    create=create_schema(RunCreateSerializer, RunSerializer, PreviewSerializer))
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

    @extend_schema(request=CheckpointReportSerializer, responses={201: CheckpointSerializer})
    @action(detail=True, methods=["post"], permission_classes=[AllowAny],
            authentication_classes=[RunTokenAuthentication, BearerTokenAuthentication,
                                    authentication.SessionAuthentication])
    def checkpoints(self, request, pk=None):
        """Report a checkpoint of the run (the checkpoint contract): with its run token, or by hand as its owner or a team admin."""
        if isinstance(request.auth, RunCredential):
            if request.auth.run_id != pk_of(pk):
                raise exceptions.AuthenticationFailed("This run token is for another run.")
            run = services.get_run_by_id(request.auth.run_id)
        elif request.user.is_authenticated:
            run = self.get_object(Role.MEMBER)
            # By hand only as a correction, by its owner or a team admin: its pods report with the run token.
            if not may_correct_checkpoint(request.user, run, get_membership(request.user, run.team)):
                raise exceptions.PermissionDenied(
                    "Only the run's owner or an admin of its team may report its checkpoints by hand; "
                    "the run itself reports with its SLIPWAY_RUN_TOKEN.")
        else:
            raise exceptions.NotAuthenticated()
        try:
            run = services.report_checkpoint(run, request.data)
        except services.RunConflict as exc:
            return conflict_response(str(exc))
        # The checkpoint as recorded, nothing more: a run token reads nothing else of its run.
        return Response(CheckpointSerializer(run.last_checkpoint).data, status=status.HTTP_201_CREATED)
