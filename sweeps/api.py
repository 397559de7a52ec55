"""``/api/v1/sweeps/``: create (``?dry_run=1``: the shape and cost range, nothing created), list, read, delete a
finished one, its trials (``GET …/trials/``), continue a pruned one (``POST …/trials/{number}/continue/``) and
stop (``POST …/stop/``) (docs/api.md "Sweeps").

Thin: the body goes to one service call of :mod:`sweeps.services`, which checks access (404 outside the team,
403 for a viewer) and every field.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.exceptions import conflict_response
from core.filters import one_of
from core.pagination import StandardPagination
from sweeps import services
from sweeps.constants import SweepState
from sweeps.serializers import (
    ShapeSerializer,
    SweepCreateSerializer,
    SweepListSerializer,
    SweepSerializer,
    TrialSerializer,
    sweep_answer,
    trial_answer,
)
from teams.idempotency import idempotent, is_dry_run
from teams.models import Role
from workloads.api import DRY_RUN_PARAMETER, team_slug_of_post


class SweepViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Sweeps of the caller's teams, newest first."""

    serializer_class = SweepListSerializer
    pagination_class = StandardPagination
    lookup_value_regex = "[0-9]{1,19}"  # an id (64-bit); int() of 4300 digits and more raises

    @extend_schema(parameters=[
        OpenApiParameter("team", str, description="A team's slug (404 for a team the caller is not in)."),
        OpenApiParameter("state", str, enum=SweepState.values)])
    def list(self, request, *args, **kwargs):
        one_of(request.query_params, "state", SweepState.values)
        return super().list(request, *args, **kwargs)

    def get_queryset(self):
        return services.visible_sweeps(self.request.user, self.request.query_params.get("team"),
                                       self.request.query_params.get("state"))

    def _answer(self, sweep) -> dict:
        return SweepSerializer(sweep_answer(sweep, services.figures(sweep))).data

    @extend_schema(request=SweepCreateSerializer, responses={201: SweepSerializer, 200: ShapeSerializer},
                   parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER), DRY_RUN_PARAMETER])
    @idempotent
    def create(self, request):
        """Create a sweep (docs/sweeps.md "The sweep file"); its first trials launch at once. ``?dry_run=1``: its
        shape (trials, ASHA's rungs) and cost range at today's price, nothing created."""
        slug, fields = team_slug_of_post(request)
        if is_dry_run(request):
            return Response(ShapeSerializer(services.preview(request.user, slug, fields).as_dict()).data)
        sweep = services.create(request.user, slug, fields)
        return Response(self._answer(sweep), status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: SweepSerializer})
    def retrieve(self, request, pk=None):
        """A sweep: its state, its trials by state, its best trial, its spend and what it commits."""
        return Response(self._answer(services.get_sweep_for_user(request.user, pk)))

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request, pk=None):
        """Delete a finished sweep (409 while it is live: stop it first); its trials' work stays the team's."""
        try:
            services.delete(request.user, services.get_sweep_for_user(request.user, pk, Role.MEMBER))
        except services.SweepConflict as exc:
            return conflict_response(str(exc))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=TrialSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def trials(self, request, pk=None):
        """Its trials in order: parameters, state (``pruned`` among them), objective, cost."""
        sweep = services.get_sweep_for_user(request.user, pk)
        figures = services.figures(sweep)
        return Response(TrialSerializer([trial_answer(t, figures) for t in figures.trials], many=True).data)

    @extend_schema(request=None, responses={201: TrialSerializer})
    @action(detail=True, methods=["post"], url_path=r"trials/(?P<number>[0-9]{1,9})/continue", url_name="continue-trial")
    def continue_trial(self, request, pk=None, number=None):
        """Continue a pruned trial from its checkpoint: a new trial with its parameters, whose work goes on from
        where it stopped (docs/sweeps.md "Continue a pruned trial"); 409 with why when it cannot be."""
        sweep = services.get_sweep_for_user(request.user, pk, Role.MEMBER)
        try:
            trial = services.continue_trial(request.user, sweep, int(number))
        except services.SweepConflict as exc:
            return conflict_response(str(exc))
        figures = services.figures(sweep)
        trial = next(t for t in figures.trials if t.pk == trial.pk)
        return Response(TrialSerializer(trial_answer(trial, figures)).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: SweepSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        """Stop it: no trial launches any more; active trials stop through the checkpoint contract (409 when it is
        not running)."""
        try:
            sweep = services.stop(request.user, services.get_sweep_for_user(request.user, pk, Role.MEMBER))
        except services.SweepConflict as exc:
            return conflict_response(str(exc))
        return Response(self._answer(sweep))
