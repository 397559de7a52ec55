"""Serializers of the portal package's API."""

from rest_framework import serializers

from teams.models import Team


class TeamSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["slug", "name", "role", "namespace", "members_may_cancel_teammates_work"]

    def get_role(self, team) -> str:
        # Annotated by the queryset (one query for the whole page).
        return team.caller_role
