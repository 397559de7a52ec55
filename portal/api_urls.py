"""The ``/api/v1/`` router. Each app registers its viewsets in its ``api.py``."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from inference.api import EndpointViewSet
from jobs.api import RunViewSet
from quotas.api import FlavorViewSet, TeamViewSet, UsageReportView

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("teams", TeamViewSet, basename="team")
router.register("flavors", FlavorViewSet, basename="flavor")
router.register("runs", RunViewSet, basename="run")
router.register("endpoints", EndpointViewSet, basename="endpoint")

urlpatterns = [
    path("usage/", UsageReportView.as_view(), name="usage-report"),
    path("", include(router.urls)),
]
