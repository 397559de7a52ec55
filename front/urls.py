"""Routes of the pages that span kinds (mounted at the root; staff pages in ``staff_urlpatterns``)."""

from django.contrib.auth import views as auth_views
from django.urls import path

from front import sso, staff, views

urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Single sign-on (front.sso): allauth's URL names, only these two of its views (no password pages).
    path("accounts/oidc/<str:provider_id>/login/", sso.login, name="openid_connect_login"),
    path("accounts/oidc/<str:provider_id>/login/callback/", sso.callback, name="openid_connect_callback"),
    path("accounts/inactive/", sso.inactive, name="account_inactive"),
    path("", views.dashboard, name="dashboard"),
    path("team/switch/", views.switch_team, name="switch-team"),
    path("teams/", views.current_team, name="team"),
    path("teams/<slug:team>/", views.team_detail, name="team-detail"),
    path("teams/<slug:team>/members/", views.add_team_member, name="team-member-add"),
    path("teams/<slug:team>/members/<int:pk>/role/", views.change_member_role, name="team-member-role"),
    path("teams/<slug:team>/members/<int:pk>/remove/", views.remove_team_member, name="team-member-remove"),
    path("teams/<slug:team>/settings/", views.team_settings, name="team-settings"),
    path("teams/<slug:team>/alerts/", views.team_alert_settings, name="team-alert-settings"),
    path("tokens/", views.api_tokens, name="api-tokens"),
    path("tokens/<int:pk>/revoke/", views.revoke_api_token, name="revoke-api-token"),
    path("device/", views.device_login, name="device-login"),
    path("usage/", views.usage, name="usage"),
    path("help/flavors/", views.flavor_help, name="flavor-help"),
]

#: Custom staff pages, mounted under ``/admin/`` before the admin site (which would 404 them).
staff_urlpatterns = [
    path("capacity/", views.capacity, name="admin-capacity"),
    path("showback/", views.showback, name="admin-showback"),
    path("sso/preview/", staff.sso_preview, name="admin-sso-preview"),
    path("workloads/", staff.workload_list, name="admin-workloads"),
    path("workloads/<slug:prefix>/<int:pk>/end/", staff.end_workload, name="admin-workload-end"),
    path("workloads/<slug:prefix>/<int:pk>/<slug:action>/", staff.workload_action, name="admin-workload-action"),
]
