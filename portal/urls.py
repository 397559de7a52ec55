"""Top-level URLs: portal pages, the REST API, the admin console, probes."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from front.urls import staff_urlpatterns
from portal import health

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    # Pages name their icon (<link rel="icon">); what asks the conventional path anyway (a JSON
    # page, a bookmark) is sent to the same file instead of a 404. Lazy: the hashed static name
    # of production is known only once collectstatic has run, not when this module is imported.
    path("favicon.ico", RedirectView.as_view(url=lazy(static, str)("favicon.svg"), permanent=True)),
    path("", include("front.urls")),
    path("", include("jobs.urls")),
    path("", include("inference.urls")),
    path("", include("workspaces.urls")),
    path("", include("reservations.urls")),
    path("", include("sweeps.urls")),
    path("", include("notifications.urls")),
    # Custom staff pages (Capacity, Showback, the workload list) before the admin site, which would 404 them.
    path("admin/", include(staff_urlpatterns)),
    path("admin/", admin.site.urls),
    path("api/v1/", include("portal.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # Deliberately public (README): the schema describes the contract, not anyone's data.
    # The split view serves Swagger UI's init script as a file: no inline script for the CSP.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
]

# Styled pages with the navigation in the portal; the API's JSON error shape under /api/
# (portal.errors, whose middleware covers DEBUG mode, where Django skips these handlers).
handler400 = "portal.errors.bad_request"
handler403 = "portal.errors.permission_denied"
handler404 = "portal.errors.not_found"
handler500 = "portal.errors.server_error"
