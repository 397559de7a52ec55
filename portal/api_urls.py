"""The ``/api/v1/`` router. Each app registers its viewsets in its ``api.py``."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from portal.api import TeamViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("teams", TeamViewSet, basename="team")

urlpatterns = [
    path("", include(router.urls)),
]
