"""``/api/v1/teams/{slug}/alerts/``: a team's alert rules — its own, the platform's, and what applies.

Every member reads them; the team's admins change them (``PATCH``), tighter than the platform's
only (:mod:`workloads.telemetry.alert_settings`: a looser value or nonsense is a 400 with field errors,
nothing written). Outside the team: 404, as everywhere (platform staff set the defaults, in the
settings, not here).
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from teams.models import Role, Team
from teams.permissions import require_team
from teams.services import client_ip
from workloads.telemetry.alert_settings import set_team_alert_settings, team_view


class TeamRulesSerializer(serializers.Serializer):
    """The rules a team may set: a number, or null for the platform's."""

    idle_util_pct = serializers.FloatField(allow_null=True, required=False,
                                           help_text="Idle alert: GPU utilization under this percent (at least the platform's).")
    idle_minutes = serializers.IntegerField(allow_null=True, required=False,
                                            help_text="Idle alert: for this many minutes (at most the platform's).")
    memory_pct = serializers.FloatField(allow_null=True, required=False,
                                        help_text="OOM-risk alert: GPU memory used over this percent (at most the platform's).")
    memory_minutes = serializers.IntegerField(allow_null=True, required=False,
                                              help_text="OOM-risk alert: for this many minutes (at most the platform's).")


class PlatformRulesSerializer(serializers.Serializer):
    idle_util_pct = serializers.FloatField()
    idle_minutes = serializers.IntegerField()
    memory_pct = serializers.FloatField()
    memory_minutes = serializers.IntegerField()
    temp_c = serializers.FloatField(help_text="The hot-GPU alert (to platform staff): over this many °C ...")
    temp_minutes = serializers.IntegerField(help_text="... for this many minutes.")
    clear_minutes = serializers.IntegerField(help_text="An open alert closes once clear this long.")


class AlertRulesSerializer(serializers.Serializer):
    team = TeamRulesSerializer(help_text="The team's own (null: the platform's).")
    platform = PlatformRulesSerializer(help_text="The platform's defaults (SLIPWAY_ALERT_*).")
    effective = TeamRulesSerializer(help_text="What applies: for each, the tighter of the two.")


def alert_rules(team: Team) -> dict:
    """The body of ``GET /teams/{slug}/alerts/``."""
    views = team_view(team)
    platform = {view.field.name: view.default for view in views}
    platform.update(temp_c=settings.SLIPWAY_ALERT_TEMP_C, temp_minutes=settings.SLIPWAY_ALERT_TEMP_MINUTES,
                    clear_minutes=settings.SLIPWAY_ALERT_CLEAR_MINUTES)
    effective = {view.field.name: int(view.effective) if view.field.minutes else view.effective for view in views}
    return AlertRulesSerializer({"team": {view.field.name: view.own for view in views}, "platform": platform,
                                 "effective": effective}).data


class TeamAlertsView(APIView):
    """A team's alert rules (``GET``: its members; ``PATCH``: its admins, tightening only)."""

    @extend_schema(responses=AlertRulesSerializer)
    def get(self, request, slug: str):
        return Response(alert_rules(require_team(request.user, slug).team))

    @extend_schema(request=TeamRulesSerializer, responses=AlertRulesSerializer)
    def patch(self, request, slug: str):
        """Change some of the team's alert rules: any of the four, null for the platform's again."""
        team = require_team(request.user, slug, Role.ADMIN).team
        if not isinstance(request.data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object of alert rules."]})
        set_team_alert_settings(request.user, team, dict(request.data), ip=client_ip(request))
        return Response(alert_rules(team))
