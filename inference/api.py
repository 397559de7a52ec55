"""REST API of inference endpoints (API.md "Inference endpoints"). Thin: access helper + one service call."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from inference import services
from inference.constants import EndpointState
from inference.models import InferenceEndpoint
from inference.serializers import (
    EndpointCreateSerializer,
    EndpointPatchSerializer,
    EndpointSerializer,
    ScalingEventSerializer,
)
from portal.exceptions import conflict_response
from portal.idempotency import idempotent
from portal.models import Role
from workloads.api import (
    DRY_RUN_PARAMETER,
    ForecastSerializer,
    WorkloadReadActions,
    is_dry_run,
    pk_of,
    queue_context,
    team_of_post,
)


class EndpointViewSet(WorkloadReadActions, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                      viewsets.GenericViewSet):
    serializer_class = EndpointSerializer
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet:
        qs = InferenceEndpoint.objects.for_user(self.request.user).for_list()
        params = self.request.query_params
        if params.get("team"):
            qs = qs.filter(team__slug=params["team"])
        if params.get("state"):
            if params["state"] not in EndpointState.values:
                raise ValidationError({"state": [f"Must be one of: {', '.join(EndpointState.values)}."]})
            qs = qs.filter(state=params["state"])
        return qs

    def get_object(self, role: str = Role.VIEWER) -> InferenceEndpoint:
        return services.get_endpoint_for_user(self.request.user, pk_of(self.kwargs["pk"]), role)

    def _serialize(self, endpoint: InferenceEndpoint) -> dict:
        context = {**self.get_serializer_context(), **queue_context([endpoint])}
        return EndpointSerializer(endpoint, context=context).data

    @extend_schema(parameters=[
        OpenApiParameter("team", str, description="Team slug"),
        OpenApiParameter("state", str, enum=EndpointState.values),
    ])
    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        context = {**self.get_serializer_context(), **queue_context(page)}
        return self.get_paginated_response(EndpointSerializer(page, many=True, context=context).data)

    def retrieve(self, request, *args, **kwargs):
        return Response(self._serialize(self.get_object()))

    @extend_schema(request=EndpointCreateSerializer, responses={201: EndpointSerializer, 200: ForecastSerializer},
                   parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER), DRY_RUN_PARAMETER])
    @idempotent
    def create(self, request, *args, **kwargs):
        membership, fields = team_of_post(request)
        if is_dry_run(request):
            return Response(ForecastSerializer(services.preview_endpoint(membership.team, fields).as_dict()).data)
        endpoint = services.create_endpoint(request.user, membership.team, fields)
        endpoint = services.get_endpoint_for_user(request.user, endpoint.pk)
        return Response(self._serialize(endpoint), status=status.HTTP_201_CREATED)

    @extend_schema(request=EndpointPatchSerializer, responses={200: EndpointSerializer})
    def partial_update(self, request, *args, **kwargs):
        endpoint = self.get_object()
        try:
            endpoint = services.update_endpoint(request.user, endpoint, request.data)
        except services.EndpointConflict as exc:
            return conflict_response(str(exc))
        return Response(self._serialize(services.get_endpoint_for_user(request.user, endpoint.pk)))

    @extend_schema(request=None, responses={202: EndpointSerializer})
    def destroy(self, request, *args, **kwargs):
        endpoint = self.get_object()
        try:
            endpoint = services.delete_endpoint(request.user, endpoint)
        except services.EndpointConflict as exc:
            return conflict_response(str(exc))
        return Response(self._serialize(endpoint), status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses=ScalingEventSerializer(many=True))
    @action(detail=True, methods=["get"])
    def scaling(self, request, pk=None):
        """The scaling log, newest first (paginated like every list)."""
        endpoint = self.get_object()
        page = self.paginate_queryset(endpoint.scaling_events.all())
        return self.get_paginated_response(ScalingEventSerializer(page, many=True).data)
