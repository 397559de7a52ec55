"""The ``/api/v1/`` router. Each app registers its viewsets in its ``api.py``; ``/api/v1/`` itself links to them."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from inference import key_api
from inference.api import EndpointViewSet
from jobs.api import RunViewSet
from portal.api_root import api_root_view, collections
from quotas.api import (
    ClusterViewSet,
    CohortViewSet,
    FlavorViewSet,
    IdlePoolsView,
    TeamSharingViewSet,
    TeamViewSet,
    UsageReportView,
)
from reservations.api import ReservationViewSet
from sweeps.api import SweepViewSet
from teams.api import DeviceAuthorizationView, DeviceTokenView
from workloads.telemetry.alert_api import TeamAlertsView
from workspaces.api import WorkspaceViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False  # ours names every collection (portal.api_root)
router.register("teams", TeamViewSet, basename="team")
# /teams/{slug}/ (named team-sharing-detail: team-detail is the portal's Team page).
router.register("teams", TeamSharingViewSet, basename="team-sharing")
router.register("cohorts", CohortViewSet, basename="cohort")
router.register("clusters", ClusterViewSet, basename="cluster")
router.register("flavors", FlavorViewSet, basename="flavor")
router.register("runs", RunViewSet, basename="run")
router.register("endpoints", EndpointViewSet, basename="endpoint")
router.register("workspaces", WorkspaceViewSet, basename="workspace")
router.register("reservations", ReservationViewSet, basename="reservation")
router.register("sweeps", SweepViewSet, basename="sweep")

#: What ``GET /api/v1/`` links to: the router's collections, the usage report, the schema and its docs.
ROOT_LINKS = collections(router, usage="usage-report", schema="api-schema", docs="api-docs")

urlpatterns = [
    path("", api_root_view(ROOT_LINKS), name="api-root"),
    path("usage/", UsageReportView.as_view(), name="usage-report"),
    # Staff: idle pool capacity in money (docs/pools.md "Money").
    path("usage/idle-pools/", IdlePoolsView.as_view(), name="usage-idle-pools"),
    path("auth/device/", DeviceAuthorizationView.as_view(), name="auth-device"),
    path("auth/token/", DeviceTokenView.as_view(), name="auth-token"),
    path("teams/<slug:slug>/alerts/", TeamAlertsView.as_view(), name="team-alerts"),
    # API keys (docs/api.md "API keys"): an endpoint's and a team's, and their usage in money.
    path("endpoints/<int:pk>/keys/", key_api.EndpointKeysView.as_view(), name="endpoint-keys"),
    path("endpoints/<int:pk>/keys/usage/", key_api.EndpointKeyUsageView.as_view(), name="endpoint-keys-usage"),
    path("endpoints/<int:pk>/keys/<int:key_pk>/", key_api.EndpointKeyDetailView.as_view(), name="endpoint-key-detail"),
    path("endpoints/<int:pk>/keys/<int:key_pk>/disable/", key_api.EndpointKeyDisableView.as_view(),
         name="endpoint-key-disable"),
    path("endpoints/<int:pk>/keys/<int:key_pk>/enable/", key_api.EndpointKeyEnableView.as_view(),
         name="endpoint-key-enable"),
    path("teams/<slug:slug>/keys/", key_api.TeamKeysView.as_view(), name="team-keys"),
    path("teams/<slug:slug>/keys/usage/", key_api.TeamKeyUsageView.as_view(), name="team-keys-usage"),
    path("teams/<slug:slug>/keys/<int:key_pk>/", key_api.TeamKeyDetailView.as_view(), name="team-key-detail"),
    path("teams/<slug:slug>/keys/<int:key_pk>/disable/", key_api.TeamKeyDisableView.as_view(),
         name="team-key-disable"),
    path("teams/<slug:slug>/keys/<int:key_pk>/enable/", key_api.TeamKeyEnableView.as_view(), name="team-key-enable"),
    path("", include(router.urls)),
]
