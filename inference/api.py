"""REST API of inference endpoints (docs/api.md "Inference endpoints"). Thin: access helper + one service call.

List, retrieve, create (and its dry run) and the reading actions are every kind's (:class:`workloads.api.WorkloadViewSet`).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from core.exceptions import conflict_response
from inference import revisions, services, traffic, traffic_api
from inference.coldstarts_api import ColdStartsMixin
from inference.constants import EndpointState, RevisionState
from inference.models import InferenceEndpoint
from inference.serializers import (
    EndpointCreateSerializer,
    EndpointPatchSerializer,
    EndpointPreviewSerializer,
    EndpointSerializer,
    ReplicaSampleSerializer,
    RevisionSerializer,
    RolloutSerializer,
    ScalingEventSerializer,
)
from workloads.api import WorkloadViewSet, create_schema, list_parameters


@extend_schema_view(list=extend_schema(parameters=list_parameters(EndpointState.values)),
                    create=create_schema(EndpointCreateSerializer, EndpointSerializer, EndpointPreviewSerializer))
class EndpointViewSet(ColdStartsMixin, WorkloadViewSet):
    """Inference endpoints of the caller's teams (docs/api.md "Inference endpoints"): create, read, change, delete."""

    model = InferenceEndpoint
    serializer_class = EndpointSerializer
    preview_serializer = EndpointPreviewSerializer
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    @extend_schema(request=EndpointPatchSerializer, responses={200: EndpointSerializer})
    def partial_update(self, request, *args, **kwargs):
        endpoint = self.get_object()
        try:
            endpoint = services.update_endpoint(request.user, endpoint, request.data)
        except services.EndpointConflict as exc:
            return conflict_response(str(exc))
        return Response(self.serialize(services.get_endpoint_for_user(request.user, endpoint.pk)))

    @extend_schema(request=None, responses={202: EndpointSerializer})
    def destroy(self, request, *args, **kwargs):
        endpoint = self.get_object()
        try:
            endpoint = services.delete_endpoint(request.user, endpoint)
        except services.EndpointConflict as exc:
            return conflict_response(str(exc))
        return Response(self.serialize(endpoint), status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses=ScalingEventSerializer(many=True))
    @action(detail=True, methods=["get"])
    def scaling(self, request, pk=None):
        """The scaling log — Slipway's decisions about the ceiling — newest first (paginated like every list)."""
        endpoint = self.get_object()
        page = self.paginate_queryset(endpoint.scaling_events.all())
        return self.get_paginated_response(ScalingEventSerializer(page, many=True).data)

    @extend_schema(responses=ReplicaSampleSerializer(many=True))
    @action(detail=True, methods=["get"])
    def replicas(self, request, pk=None):
        """The replica counts observed, one row per change, newest first (what the page's chart draws)."""
        endpoint = self.get_object()
        page = self.paginate_queryset(endpoint.replica_samples.all())
        return self.get_paginated_response(ReplicaSampleSerializer(page, many=True).data)

    @extend_schema(parameters=traffic_api.PARAMETERS, responses=traffic_api.TrafficSerializer)
    @action(detail=True, methods=["get"], pagination_class=None)
    def traffic(self, request, pk=None):
        """Its traffic as the gateways measured it (docs/serving.md "Traffic metrics"): requests a second, error
        rate, latency and time-to-first-token percentiles, tokens a second and requests in flight, a point per
        ``step`` seconds from ``since``, for the endpoint and each revision."""
        endpoint = self.get_object()
        since, step, revision = traffic_api.traffic_query(request)
        try:
            return Response(traffic.series(endpoint, since, step, revision))
        except traffic.TooManyPoints as exc:
            raise ValidationError({"step": [str(exc)]}) from None
    # -- revisions (docs/serving.md "Revisions, canary and rollback") ------------------------------------------
    def _revision(self, rev, status_code=status.HTTP_200_OK) -> Response:
        traffic = revisions.traffic_figures(rev.endpoint)
        return Response(RevisionSerializer(rev, context={"traffic": traffic}).data, status=status_code)

    @extend_schema(responses=RevisionSerializer(many=True))
    @action(detail=True, methods=["get"])
    def revisions(self, request, pk=None):
        """Its revisions, newest first: state, weight, spec, verdict and traffic over the last 5 minutes."""
        endpoint = self.get_object()
        page = self.paginate_queryset(endpoint.revisions.select_related("created_by", "endpoint").order_by("-number"))
        context = {"traffic": revisions.traffic_figures(endpoint)}
        return self.get_paginated_response(RevisionSerializer(page, many=True, context=context).data)

    @extend_schema(request=RolloutSerializer, responses={201: RevisionSerializer})
    @action(detail=True, methods=["post"])
    def rollout(self, request, pk=None):
        """A new revision of image, command, args or env: replace (rolling update) or canary at a weight."""
        endpoint = self.get_object()
        try:
            rev = services.rollout_endpoint(request.user, endpoint, request.data)
        except services.EndpointConflict as exc:
            return conflict_response(str(exc))
        return self._revision(rev, status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: RevisionSerializer})
    @action(detail=True, methods=["post"])
    def promote(self, request, pk=None):
        """Promote the canary: the stable Deployment takes its spec (409 when there is no canary)."""
        endpoint = self.get_object()
        try:
            services.promote_endpoint(request.user, endpoint)
        except services.EndpointConflict as exc:
            return conflict_response(str(exc))
        return self._revision(endpoint.revisions.select_related("endpoint").order_by("-number").first())

    @extend_schema(request=None, responses={200: RevisionSerializer})
    @action(detail=True, methods=["post"])
    def rollback(self, request, pk=None):
        """Roll the canary back: weight 0, its replicas stopped (409 when there is no canary)."""
        endpoint = self.get_object()
        try:
            services.rollback_endpoint(request.user, endpoint)
        except services.EndpointConflict as exc:
            return conflict_response(str(exc))
        rev = endpoint.revisions.select_related("endpoint").filter(state=RevisionState.ROLLED_BACK).order_by("-ended_at").first()
        return self._revision(rev)
