"""``/api/v1/flavors/``, ``/api/v1/usage/`` (and staff's ``usage/idle-pools/``), the logic behind ``/api/v1/teams/{slug}/usage/``, and
quota as code (docs/api.md "Quota as code"): ``/cohorts/``, ``/teams/{slug}/quotas/`` and
``/teams/{slug}/`` (a team's sharing settings).

The team usage and quotas routes are actions of :class:`TeamViewSet`, which extends
``teams.api``'s (so they live under the team's URL). Who may read or change a team's quotas is
``teams.permissions``' (:func:`~teams.permissions.team_for_reading`,
:func:`~teams.permissions.team_for_staff_change`); every change is one audited service call of
:mod:`quotas.services`, which takes the admission locks.
"""

from __future__ import annotations

import csv
import io

from django.db import transaction
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

import fleet.services as fleet
from billing.pool_idle import idle_pool_capacity
from billing.reports import report_columns, report_filename, usage_report
from billing.services import budget_summary
from core.pagination import StandardPagination
from fleet import pools as fleet_pools
from fleet.models import GpuFlavor, unknown_flavor
from quotas import services
from quotas.models import Cohort
from quotas.serializers import (
    ClusterInputSerializer,
    ClusterSerializer,
    CohortInputSerializer,
    CohortSerializer,
    FlavorSerializer,
    IdlePoolsQuerySerializer,
    IdlePoolsSerializer,
    QuotaInputSerializer,
    QuotaRowSerializer,
    TeamDetailSerializer,
    TeamSharingInputSerializer,
    TeamUsageSerializer,
    UsageQuerySerializer,
    UsageReportPageSerializer,
    UsageRowSerializer,
)
from quotas.services import usage_summary
from teams import api as teams_api
from teams.models import Membership, Team
from teams.permissions import (
    get_membership,
    report_teams,
    require_staff_permission,
    team_for_reading,
    team_for_staff_change,
)

SLUG = OpenApiParameter("slug", str, OpenApiParameter.PATH)
FLAVOR = OpenApiParameter("flavor", str, OpenApiParameter.PATH, description="A flavor's name, e.g. a100-80gb.")


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

    @extend_schema(responses=QuotaRowSerializer(many=True), parameters=[SLUG])
    @action(detail=True, methods=["get"], url_path="quotas", url_name="quotas")
    def quotas(self, request, slug=None, **kwargs):
        """The team's quota per flavor with its borrowing and lending limits and what it uses
        (members and platform staff)."""
        team, _membership = team_for_reading(request.user, slug)
        rows = QuotaRowSerializer(services.quota_rows(team), many=True).data
        return self.get_paginated_response(self.paginate_queryset(rows))

    @extend_schema(request=QuotaInputSerializer, responses=QuotaRowSerializer, parameters=[SLUG, FLAVOR])
    @action(detail=True, methods=["put"], url_path=r"quotas/(?P<flavor>[^/]+)", url_name="quota")
    def set_quota(self, request, slug=None, flavor=None, **kwargs):
        """Set (or with limit null remove) the team's quota of a flavor, whole (platform staff; audited)."""
        team = team_for_staff_change(request.user, slug, "quotas.change_teamquota", "change quotas")
        body = QuotaInputSerializer(data=request.data)
        errors = {} if body.is_valid() else dict(body.errors)
        row = GpuFlavor.objects.filter(name=flavor).first()
        if row is None:
            errors["flavor"] = [unknown_flavor(flavor)]
        if errors:
            raise ValidationError(errors)
        data = body.validated_data
        services.set_team_quota(request.user, team, row, data["limit"], borrowing_limit=data["borrowing_limit"],
                                lending_limit=data["lending_limit"])
        shown = next((r for r in services.quota_rows(team) if r["flavor"] == row.name), None)
        return Response(QuotaRowSerializer(shown or {
            "flavor": row.name, "limit": None, "borrowing_limit": None, "lending_limit": None,
            "in_use": 0, "borrowed": 0, "queued": 0}).data)


def team_detail(team: Team, membership: Membership | None) -> dict:
    """The body of ``GET /teams/{slug}/``: the team as listed, the caller's role (None: staff outside
    it) and its place in quota sharing."""
    team.caller_role = membership.role if membership is not None else None
    team.sharing_row = services.sharing_of(team)
    return TeamDetailSerializer(team).data


class TeamSharingViewSet(viewsets.GenericViewSet):
    # ``/api/v1/teams/{slug}/``: one team, and its sharing settings changed by platform staff. A
    # viewset of its own (registered under the same prefix) so that its route is not named
    # ``team-detail``, which is the portal's Team page.
    lookup_field = "slug"
    queryset = Team.objects.none()  # the schema's path parameter; access is teams.permissions'
    serializer_class = TeamDetailSerializer

    def retrieve(self, request, slug=None, **kwargs):
        """One team: as listed, plus its fair-share weight, within-team preemption and cohort
        (members and platform staff)."""
        team, membership = team_for_reading(request.user, slug)
        return Response(team_detail(team, membership))

    @extend_schema(request=TeamSharingInputSerializer, responses=TeamDetailSerializer)
    def partial_update(self, request, slug=None, **kwargs):
        """Change the team's fair-share weight and within-team preemption (platform staff; audited)."""
        team = team_for_staff_change(request.user, slug, "quotas.change_teamsharing", "change quota sharing")
        body = TeamSharingInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.set_team_sharing(request.user, team, body.validated_data.get("fair_weight"),
                                  within_team_preemption=body.validated_data.get("within_team_preemption"))
        return Response(team_detail(team, get_membership(request.user, team)))


class CohortViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Cohorts: teams that lend each other their unused quota (platform staff only)."""

    serializer_class = CohortSerializer
    queryset = Cohort.objects.prefetch_related("members__team").order_by("name")
    lookup_field = "name"
    lookup_value_regex = "[^/]+"  # names may hold dots

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # 401 without credentials
        # Cohorts are the platform's, not a team's: to anyone but staff they do not exist. A
        # method the route does not serve is a 405 for everyone, as on every route (the schema
        # is public: the route's existence is no secret, the cohorts are).
        if not request.user.is_staff and request.method.lower() in self.action_map:
            raise NotFound()

    def retrieve(self, request, name=None, **kwargs):
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(request=CohortInputSerializer, responses={200: CohortSerializer, 201: CohortSerializer})
    def update(self, request, name=None, **kwargs):
        """Create or replace the cohort, whole: a field left out takes its default (``teams``: none)."""
        require_staff_permission(request.user, "quotas.change_cohort", "change cohorts")
        body = request.data
        serializer = CohortInputSerializer(data={"name": name, **body} if isinstance(body, dict) else body)
        errors = {} if serializer.is_valid() else dict(serializer.errors)
        if isinstance(body, dict) and "name" in body and body["name"] != name:
            errors["name"] = ["Must be the cohort's name in the URL (or left out)."]
        if errors:
            raise ValidationError(errors)
        data = serializer.validated_data
        _cohort, created = services.set_cohort(request.user, name, reclaim=data["reclaim"], min_runtime_minutes=data["min_runtime_minutes"],
                            preemption_delay_seconds=data["preemption_delay_seconds"], teams=data["teams"])
        cohort = self.get_queryset().get(name=name)
        return Response(self.get_serializer(cohort).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(responses={204: None})
    def destroy(self, request, name=None, **kwargs):
        """Delete the cohort: its teams keep their quotas as walls again."""
        require_staff_permission(request.user, "quotas.delete_cohort", "delete cohorts")
        services.remove_cohort(request.user, self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class ClusterViewSet(viewsets.ViewSet):
    """Clusters work is placed on, with their health and what they offer (platform staff only)."""

    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    serializer_class = ClusterSerializer

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # 401 without credentials
        # Clusters are the platform's: to anyone but staff they do not exist (as cohorts).
        if not request.user.is_staff and request.method.lower() in self.action_map:
            raise NotFound()

    @extend_schema(responses={200: ClusterSerializer(many=True)})
    def list(self, request):
        return Response(ClusterSerializer([services.cluster_view(c) for c in fleet.clusters()], many=True).data)

    @extend_schema(responses={200: ClusterSerializer})
    def retrieve(self, request, name=None):
        return Response(ClusterSerializer(services.cluster_view(self._cluster(name))).data)

    @extend_schema(request=ClusterInputSerializer, responses={200: ClusterSerializer})
    def partial_update(self, request, name=None):
        """Drain the cluster (no new placements; what runs there finishes) or make it placeable again; override
        the training API discovery found (null: discovery's again); create, change or remove its elastic pools.
        Each change audited; the whole body is checked before anything is written, and written in one
        transaction."""
        cluster = self._cluster(name)
        require_staff_permission(request.user, "fleet.change_cluster", "change clusters")
        body = ClusterInputSerializer(data=request.data, context={"cluster": cluster})
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if "pools" in data:
            require_staff_permission(request.user, "fleet.change_nodepool", "change node pools")
        with transaction.atomic():
            if "state" in data:
                cluster = fleet.set_draining(cluster, data["state"] == "draining", request.user)
            if "training_api_override" in data:
                cluster = fleet.set_training_override(cluster, data["training_api_override"] or "", request.user)
            if "pools" in data:
                fleet_pools.change_pools(cluster, [(item["flavor"], pool_values(item)) for item in data["pools"]],
                                         request.user)
        return Response(ClusterSerializer(services.cluster_view(self._cluster(name))).data)

    @staticmethod
    def _cluster(name: str):
        cluster = fleet.get(name)
        if cluster is None:
            raise NotFound()
        return cluster


def pool_values(item: dict) -> dict | None:
    """One checked item of a PATCH's ``pools`` as :func:`fleet.pools.change_pools` takes it: the model's fields
    given (the others keep their values, a new pool's defaults), or None to remove the pool."""
    if item.get("remove"):
        return None
    return {field: item[name] for name, field in fleet_pools.API_FIELDS.items() if name in item}


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
    day, flavor, user, workload or workload kind."""

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


class IdlePoolsView(APIView):
    """Idle pool capacity over a period (platform staff only: it is nobody's bill; anyone else 404)."""

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # 401 without credentials
        # To anyone but staff it does not exist (as clusters); a method it never answers stays a 405.
        if not request.user.is_staff and request.method in ("GET", "HEAD"):
            raise NotFound()

    @extend_schema(parameters=[IdlePoolsQuerySerializer], responses={200: IdlePoolsSerializer})
    def get(self, request):
        query = IdlePoolsQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        period = query.validated_data
        return Response(IdlePoolsSerializer(idle_pool_capacity(period["since"], period["until"])).data)
