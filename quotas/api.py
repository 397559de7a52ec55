"""``/api/v1/flavors/``, ``/api/v1/usage/`` and the logic behind ``/api/v1/teams/{slug}/usage/``.

The team usage route is an action of :class:`TeamViewSet`, which extends ``teams.api``'s (so it
lives under the team's URL and inherits its 404-for-outsiders lookup).
"""

from __future__ import annotations

import csv
import io

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from core.pagination import StandardPagination
from quotas.models import GpuFlavor
from quotas.reports import report_columns, report_filename, usage_report
from quotas.serializers import (
    FlavorSerializer,
    TeamUsageSerializer,
    UsageQuerySerializer,
    UsageReportPageSerializer,
    UsageRowSerializer,
)
from quotas.services import budget_summary, usage_summary
from teams import api as teams_api
from teams.models import Team
from teams.permissions import report_teams


def team_usage(team: Team) -> dict:
    """The body of ``GET /teams/{slug}/usage/``: quotas per flavor and the budget."""
    return TeamUsageSerializer({"quotas": usage_summary(team), "budget": budget_summary(team)}).data


class TeamViewSet(teams_api.TeamViewSet):
    # ``/api/v1/teams/`` with each team's quota usage (a comment, not a docstring: the schema's
    # description of the list stays the teams app's).

    @extend_schema(responses=TeamUsageSerializer, parameters=[OpenApiParameter("slug", str, OpenApiParameter.PATH)])
    @action(detail=True, methods=["get"])
    def usage(self, request, slug=None):
        """The team's quota per flavor (limit, in use, queued) and its monthly budget."""
        return Response(team_usage(self.get_object()))


class FlavorViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """The GPU flavors users can request, with prices per unit and hour."""

    serializer_class = FlavorSerializer
    queryset = GpuFlavor.objects.usable().order_by("name")


def csv_download(rows: list[dict], columns: list[str], filename: str) -> HttpResponse:
    """``rows`` as a CSV attachment with ``columns`` (the API's usage report, the staff showback)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


class UsageReportView(APIView):
    """Cost report of the caller's teams (or one ``team``; staff: any team, all without one), grouped by
    day, flavor, user or workload."""

    @extend_schema(
        parameters=[UsageQuerySerializer],
        # JSON: paginated like every list of the API; ?format=csv: the whole report as CSV.
        responses={(200, "application/json"): UsageReportPageSerializer, (200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request):
        # A plain dict, not the QueryDict: DRF reads an empty value of an HTML-style input as
        # "not given", so ``?team=`` would report every team instead of answering 400.
        query = UsageQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        params = query.validated_data
        slug = params.get("team")
        teams = report_teams(request.user, slug)  # 404 for other teams (staff: any team; all without one)
        since, until, group_by = params["since"], params["until"], params["group_by"]
        rows = UsageRowSerializer(usage_report(teams, since, until, group_by), many=True).data
        if params["format"] == "csv":
            who = "all-teams" if slug is None and request.user.is_staff else None
            return csv_download(rows, report_columns(group_by), report_filename(teams, since, until, group_by, who))
        # JSON is paginated like every API list; CSV is the whole report in one file.
        paginator = StandardPagination()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(page)
