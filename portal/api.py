"""``/api/v1/teams/``: the caller's teams with their role in each."""

from __future__ import annotations

from django.db.models import F
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.models import Team
from portal.serializers import TeamSerializer
from quotas.api import team_usage
from quotas.serializers import TeamUsageSerializer


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

    @extend_schema(responses=TeamUsageSerializer, parameters=[OpenApiParameter("slug", str, OpenApiParameter.PATH)])
    @action(detail=True, methods=["get"])
    def usage(self, request, slug=None):
        """The team's quota per flavor (limit, in use, queued) and its monthly budget."""
        return Response(team_usage(self.get_object()))
