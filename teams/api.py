"""``/api/v1/teams/``: the caller's teams with their role in each (``quotas.api`` adds ``usage``)."""

from __future__ import annotations

from django.db.models import F
from rest_framework import mixins, viewsets

from teams.models import Team
from teams.serializers import TeamSerializer


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
