"""``/api/v1/teams/``: the caller's teams with their role in each."""

from __future__ import annotations

from django.db.models import F
from rest_framework import mixins, viewsets

from portal.models import Team
from portal.serializers import TeamSerializer


class TeamViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = TeamSerializer
    lookup_field = "slug"

    def get_queryset(self):
        # Filtering through the membership join also yields the caller's role per team.
        return (
            Team.objects.filter(memberships__user=self.request.user)
            .annotate(caller_role=F("memberships__role"))
            .order_by("slug")
        )
