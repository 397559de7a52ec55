"""REST API of training runs (docs/api.md "Training runs"). Thin: access helper + one service call.

List, retrieve, create (and its dry run) and the reading actions are every kind's (:class:`workloads.api.WorkloadViewSet`).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import authentication, exceptions, status, throttling
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from core.exceptions import conflict_response
from core.text import whole_number
from jobs import checkpoints, metrics, services
from jobs.constants import RunState
from jobs.metric_lines import NAME
from jobs.models import TrainingRun
from jobs.serializers import (
    CheckpointReportSerializer,
    CheckpointSerializer,
    MetricsRecordedSerializer,
    MetricsReportSerializer,
    MetricsSerializer,
    RunCreateSerializer,
    RunSerializer,
)
from teams.authentication import BearerTokenAuthentication
from teams.idempotency import idempotent
from teams.models import Role
from teams.permissions import get_membership, may_correct_checkpoint
from workloads.api import PreviewSerializer, WorkloadViewSet, create_schema, list_parameters, pk_of


@dataclass(frozen=True)
class RunCredential:
    """``request.auth`` of a request made with a run token: which run's pods made it, with which token
    (its SHA-256, as stored: what the token's request rate is counted by)."""

    run_id: int
    token_hash: str


class RunTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer slr_…``: a run token (:mod:`jobs.checkpoints`), on ``checkpoints/`` and
    ``metrics/`` only (and there only for its own run).

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
        return AnonymousUser(), RunCredential(run.pk, run.run_token_hash)

    def authenticate_header(self, request) -> str:
        return self.keyword


class RunTokenRate(throttling.BaseThrottle):
    """A run token's requests: at most ``SLIPWAY_RUN_TOKEN_RATE`` a minute over ``metrics/`` and
    ``checkpoints/`` (:func:`jobs.metrics.token_wait`); past it, 429 with ``Retry-After``. People are not
    counted here: their requests are few and their own (security review 5 #7)."""

    def allow_request(self, request, view) -> bool:
        self.seconds = metrics.token_wait(request.auth.token_hash) if isinstance(request.auth, RunCredential) else 0
        return self.seconds == 0

    def wait(self) -> int:
        return self.seconds


class RunTokenScheme(OpenApiAuthenticationExtension):
    target_class = "jobs.api.RunTokenAuthentication"
    name = "runToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "A run's SLIPWAY_RUN_TOKEN: reports that run's checkpoints and metrics, nothing else."}


@extend_schema_view(list=extend_schema(parameters=list_parameters(RunState.values)),
                    create=create_schema(RunCreateSerializer, RunSerializer, PreviewSerializer))
class RunViewSet(WorkloadViewSet):
    """Training runs of the caller's teams (docs/api.md "Training runs"): submit, read, cancel."""

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

    def throttled(self, request, wait):
        """Only a run token is throttled here (:class:`RunTokenRate`): say which rate it passed."""
        raise exceptions.Throttled(wait, detail=(
            f"This run token made more than {settings.SLIPWAY_RUN_TOKEN_RATE} requests this minute "
            f"(SLIPWAY_RUN_TOKEN_RATE): wait {wait} s, and report in fewer, larger batches."))

    @extend_schema(request=CheckpointReportSerializer, responses={201: CheckpointSerializer})
    @action(detail=True, methods=["post"], permission_classes=[AllowAny], throttle_classes=[RunTokenRate],
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

    def kind_context(self, workloads) -> dict:
        """Each run's progress and ETA (one query for the page; none for runs that never started, such as one
        just submitted: without pods nothing reported)."""
        started = [run for run in workloads if run.started_at is not None]
        return {"progress": metrics.progress_answers(started) if started else {}}

    @extend_schema(methods=["GET"], request=None, responses={200: MetricsSerializer}, parameters=[
        OpenApiParameter("name", str, many=True, description="Only these metrics (repeat it); default: all."),
        OpenApiParameter("since_step", int, description="Only steps after this one (a follower's next read)."),
        OpenApiParameter("limit", int, description=f"At most this many points of each name (1-{metrics.MAX_READ}, "
                                                   f"default {metrics.DEFAULT_READ}), the first after since_step.")])
    @extend_schema(methods=["POST"], request=MetricsReportSerializer, responses={200: MetricsRecordedSerializer})
    @action(detail=True, methods=["get", "post"], permission_classes=[AllowAny], throttle_classes=[RunTokenRate],
            authentication_classes=[RunTokenAuthentication, BearerTokenAuthentication,
                                    authentication.SessionAuthentication])
    def metrics(self, request, pk=None):
        """POST: the run reports metric points and progress with its run token (its own run only).
        GET: the team reads them (viewers too), never the run token."""
        if request.method == "POST":
            if not isinstance(request.auth, RunCredential):
                if not request.user.is_authenticated:
                    raise exceptions.NotAuthenticated()
                self.get_object()  # 404 for outsiders before anything else is said
                raise exceptions.PermissionDenied("A run reports its own metrics with its SLIPWAY_RUN_TOKEN; "
                                                  "people read them (GET).")
            if request.auth.run_id != pk_of(pk):
                raise exceptions.AuthenticationFailed("This run token is for another run.")
            run = services.get_run_by_id(request.auth.run_id)
            try:
                count = metrics.report_metrics(run, request.data)
            except metrics.MetricsConflict as exc:
                return conflict_response(str(exc))
            answer = metrics.progress_answers([run]).get(run.pk)
            return Response({"points": count, "progress": answer})
        if isinstance(request.auth, RunCredential):
            raise exceptions.PermissionDenied("A run token reports metrics; it reads nothing.")
        if not request.user.is_authenticated:
            raise exceptions.NotAuthenticated()
        run = self.get_object()
        query = metrics_query(request)
        wanted = query["names"] or None
        found = metrics.series([run.pk], wanted, query["since_step"], query["limit"]).get(run.pk, {})
        return Response({"names": metrics.names(run), "series": {name: [[s, v] for s, v in points]
                                                                  for name, points in found.items()},
                         "progress": metrics.progress_answers([run]).get(run.pk)})


def metrics_query(request) -> dict:
    """``?name=&since_step=&limit=`` of a metrics read, or a 400 naming the bad one."""
    params, errors = request.query_params, {}
    names = params.getlist("name")
    if len(names) > metrics.MAX_NAMES or any(not NAME.fullmatch(name) for name in names):
        errors["name"] = [f"Metric names (at most {metrics.MAX_NAMES}): a letter or _, then letters, digits, _ or -."]
    raw = params.get("since_step")
    since = whole_number(raw) if raw is not None else None
    if raw is not None and since is None:
        errors["since_step"] = ["Must be a whole number from 0."]
    limit = whole_number(params.get("limit", str(metrics.DEFAULT_READ)))
    if limit is None or not 1 <= limit <= metrics.MAX_READ:
        errors["limit"] = [f"Must be a whole number from 1 to {metrics.MAX_READ}."]
    if errors:
        raise exceptions.ValidationError(errors)
    return {"names": names, "since_step": since, "limit": limit}
