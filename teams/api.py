"""``/api/v1/teams/``: the caller's teams with their role in each (``quotas.api`` adds ``usage``);
``/api/v1/auth/device/`` and ``/api/v1/auth/token/``: ``slipway login`` in a browser (:mod:`teams.device`)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.db.models import F
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, viewsets
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from teams import device
from teams.models import Team
from teams.serializers import (
    DeviceAuthorizationRequestSerializer,
    DeviceAuthorizationSerializer,
    DeviceGrantErrorSerializer,
    DeviceTokenRequestSerializer,
    DeviceTokenSerializer,
    TeamSerializer,
)
from teams.services import client_ip


class TeamViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = TeamSerializer
    lookup_field = "slug"

    def get_queryset(self):
        # The membership join the filter makes also yields the caller's role per team.
        return (
            Team.objects.for_user(self.request.user)
            .annotate(caller_role=F("memberships__role"))
            .order_by("slug")
        )


# -- `slipway login` in a browser: RFC 8628's two endpoints (teams.device) -----------------------


def _grant_error(exc: device.DeviceGrantError) -> Response:
    """RFC 8628's ``{"error", "error_description"}``, with the API's ``errors`` shape beside it."""
    return Response({"error": exc.error, "error_description": exc.description,
                     "errors": {"detail": [exc.description]}}, status=exc.status)


class DeviceGrantView(APIView):
    """No credentials (the command line has none yet). JSON bodies, as everywhere in the API (an OAuth
    client that sends RFC 8628's form body gets the API's 415)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    def field(self, name: str) -> str:
        """Field ``name`` of the JSON object sent ("" when absent); ``invalid_request`` for anything but a string."""
        data = self.request.data
        if not isinstance(data, dict):
            raise device.DeviceGrantError("invalid_request", "Expected a JSON object.")
        value = data.get(name, "")
        if not isinstance(value, str):
            raise device.DeviceGrantError("invalid_request", f"{name} must be a string.")
        return value


class DeviceAuthorizationView(DeviceGrantView):
    """``POST /api/v1/auth/device/``: start a browser sign-in for the command line."""

    @extend_schema(request=DeviceAuthorizationRequestSerializer, auth=[],
                   responses={200: DeviceAuthorizationSerializer, 400: DeviceGrantErrorSerializer,
                              429: DeviceGrantErrorSerializer})
    def post(self, request):
        try:
            started = device.start(self.field("client_name"), ip=client_ip(request))
        except device.DeviceGrantError as exc:
            return _grant_error(exc)
        page = request.build_absolute_uri(reverse("device-login"))
        return Response({
            "device_code": started.device_code, "user_code": started.user_code,
            "verification_uri": page, "verification_uri_complete": f"{page}?{urlencode({'code': started.user_code})}",
            "expires_in": settings.SLIPWAY_DEVICE_LOGIN_TTL_SECONDS, "interval": started.login.interval,
        })


class DeviceTokenView(DeviceGrantView):
    """``POST /api/v1/auth/token/``: the command line's poll; the API token once the person approved."""

    @extend_schema(request=DeviceTokenRequestSerializer, auth=[],
                   responses={200: DeviceTokenSerializer, 400: DeviceGrantErrorSerializer})
    def post(self, request):
        try:
            token, raw = device.redeem(self.field("grant_type"), self.field("device_code"), ip=client_ip(request))
        except device.DeviceGrantError as exc:
            return _grant_error(exc)
        expires_in = int((token.expires_at - timezone.now()).total_seconds()) if token.expires_at else None
        # RFC 6749 §5.1: a response carrying a token is not to be cached.
        return Response({"access_token": raw, "token_type": "Bearer", "expires_in": expires_in},
                        headers={"Cache-Control": "no-store", "Pragma": "no-cache"})
