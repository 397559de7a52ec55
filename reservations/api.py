"""``/api/v1/reservations/``: book, list, read, cancel (``DELETE``), approve and decline; and
``/api/v1/reservations/availability/``, the free reservable units per 30-minute slot (docs/api.md
"Reservations").

Thin: the serializer checks types, one service call of :mod:`reservations.services` does the rest
(access: 404 outside the team, 403 for a viewer or a non-staff approver).
"""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from core.exceptions import conflict_response
from core.filters import one_of
from core.pagination import StandardPagination
from reservations import feed, services
from reservations.models import ReservationState
from reservations.serializers import (
    AvailabilityQuerySerializer,
    BookingPreviewSerializer,
    DeclineSerializer,
    FeedRequestSerializer,
    FeedSerializer,
    ReservationCreateSerializer,
    ReservationSerializer,
    SlotSerializer,
)
from teams.idempotency import idempotent, is_dry_run


class ReservationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Reservations of the caller's teams (staff: every team's), soonest first."""

    serializer_class = ReservationSerializer
    pagination_class = StandardPagination
    lookup_value_regex = "[0-9]+"

    @extend_schema(parameters=[
        OpenApiParameter("team", str, description="A team's slug (404 for a team the caller is not in; staff: any)."),
        OpenApiParameter("state", str, enum=ReservationState.values)])
    def list(self, request, *args, **kwargs):
        one_of(request.query_params, "state", ReservationState.values)
        return super().list(request, *args, **kwargs)

    def get_queryset(self):
        return services.visible_reservations(self.request.user, self.request.query_params.get("team"),
                                             self.request.query_params.get("state"))

    @extend_schema(request=ReservationCreateSerializer, responses={201: ReservationSerializer, 200: BookingPreviewSerializer},
                   parameters=[OpenApiParameter("dry_run", bool, description="Only check and price the booking "
                                                "(the booking form's preview): 200 with what it would be; nothing is written.")])
    @idempotent
    def create(self, request):
        """Book: N units of a flavor on a cluster (or any) for a window, once or recurring; 400 with the limit
        it passes, the first instant that is not free, or the budget figure. With ``?dry_run=1``, the same checks
        and 200 with what booking would give now (``services.quote``), as every create of the API previews."""
        body = ReservationCreateSerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        try:
            booking = body.booking()
            if is_dry_run(request):
                quote = services.quote(request.user, booking)
                return Response(BookingPreviewSerializer(quote, context={"booking": booking}).data)
            reservation = services.book(request.user, booking)
        except services.BookingRefused as refused:
            raise ValidationError(refused.errors) from None
        return Response(ReservationSerializer(reservation).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request, pk=None):
        """Cancel: the windows not started are freed, one under way ends now (its past hours stay charged)."""
        try:
            services.cancel(request.user, services.get_reservation(request.user, pk))
        except services.ReservationConflict as exc:
            return conflict_response(str(exc))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: ReservationSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        """Approve a pending booking (platform staff)."""
        try:
            reservation = services.approve(request.user, services.get_reservation(request.user, pk))
        except services.ReservationConflict as exc:
            return conflict_response(str(exc))
        return Response(ReservationSerializer(reservation).data)

    @extend_schema(request=DeclineSerializer, responses={200: ReservationSerializer})
    @action(detail=True, methods=["post"])
    def decline(self, request, pk=None):
        """Decline a pending booking with the reason (platform staff): its windows are freed."""
        body = DeclineSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            reservation = services.decline(request.user, services.get_reservation(request.user, pk),
                                           body.validated_data["reason"])
        except services.ReservationConflict as exc:
            return conflict_response(str(exc))
        return Response(ReservationSerializer(reservation).data)

    @extend_schema(request=FeedRequestSerializer, responses={201: FeedSerializer})
    @action(detail=False, methods=["post"])
    def feed(self, request):
        """A new secret URL of the team's iCalendar feed of its reservations (members), shown in this answer
        only; the previous URL stops working."""
        body = FeedRequestSerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        token = feed.new_feed(request.user, body.validated_data["team"])
        url = settings.SLIPWAY_PORTAL_URL.rstrip("/") + reverse("reservations:feed", kwargs={"token": token})
        return Response(FeedSerializer({"url": url}).data, status=status.HTTP_201_CREATED)

    @extend_schema(parameters=[AvailabilityQuerySerializer], responses=SlotSerializer(many=True))
    @action(detail=False, methods=["get"], pagination_class=None)
    def availability(self, request):
        """Free reservable units per 30-minute slot of ``[from, to)`` (default: the next 14 days), per cluster."""
        query = AvailabilityQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        rows = services.availability(**query.validated_data)
        return Response(SlotSerializer(rows, many=True).data)
