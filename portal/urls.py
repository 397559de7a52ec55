"""Top-level URLs: portal pages, the REST API, the admin console, probes."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from jobs import views as jobs_views
from portal import health, staff, views

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    # Pages name their icon (<link rel="icon">); what asks the conventional path anyway (a JSON
    # page, a bookmark) is sent to the same file instead of a 404. Lazy: the hashed static name
    # of production is known only once collectstatic has run, not when this module is imported.
    path("favicon.ico", RedirectView.as_view(url=lazy(static, str)("favicon.svg"), permanent=True)),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", jobs_views.dashboard, name="dashboard"),
    path("team/switch/", views.switch_team, name="switch-team"),
    path("teams/", views.current_team, name="team"),
    path("teams/<slug:team>/", views.team_detail, name="team-detail"),
    path("teams/<slug:team>/members/", views.add_team_member, name="team-member-add"),
    path("teams/<slug:team>/members/<int:pk>/role/", views.change_member_role, name="team-member-role"),
    path("teams/<slug:team>/members/<int:pk>/remove/", views.remove_team_member, name="team-member-remove"),
    path("teams/<slug:team>/settings/", views.team_settings, name="team-settings"),
    path("tokens/", views.api_tokens, name="api-tokens"),
    path("tokens/<int:pk>/revoke/", views.revoke_api_token, name="revoke-api-token"),
    path("", include("jobs.urls")),
    path("", include("inference.urls")),
    path("", include("quotas.urls")),
    # Custom staff pages (the Capacity page) before the admin site, which would 404 them.
    path("admin/", include("quotas.admin_urls")),
    path("admin/workloads/", staff.workload_list, name="admin-workloads"),
    path("admin/workloads/<slug:prefix>/<int:pk>/end/", staff.end_workload, name="admin-workload-end"),
    path("admin/workloads/ep/<int:pk>/scale-to-minimum/", staff.scale_to_minimum,
         name="admin-endpoint-scale-to-minimum"),
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
