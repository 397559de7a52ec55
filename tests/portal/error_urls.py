"""Test-only URLconf: the portal's URLs and handlers plus views that fail on purpose."""

from django.core.exceptions import PermissionDenied
from django.urls import path

from portal.urls import handler400, handler403, handler404, handler500
from portal.urls import urlpatterns as portal_urlpatterns

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]


def boom(request):
    raise RuntimeError("a bug")


def forbidden(request):
    raise PermissionDenied("not for you")


urlpatterns = [
    path("boom/", boom),
    path("api/v1/boom/", boom),
    path("api/v1/forbidden/", forbidden),
    *portal_urlpatterns,
]
