"""HTML routes of the inference app (included at the site root by portal/urls.py)."""

from django.urls import path

from inference import key_views, views
from inference.models import InferenceEndpoint
from workloads.views import read_urls

app_name = "inference"

urlpatterns = [
    path("endpoints/", views.endpoint_list, name="endpoint-list"),
    path("endpoints/new/", views.endpoint_new, name="endpoint-new"),
    path("endpoints/preview/", views.endpoint_preview, name="endpoint-preview"),
    path("endpoints/<int:pk>/", views.endpoint_detail, name="endpoint-detail"),
    *read_urls(InferenceEndpoint, "endpoints/"),  # state, logs, logs/download, events: every kind's (workloads.views)
    path("endpoints/<int:pk>/traffic/", views.endpoint_traffic, name="endpoint-traffic"),
    path("endpoints/<int:pk>/edit/", views.endpoint_edit, name="endpoint-edit"),
    path("endpoints/<int:pk>/delete/", views.endpoint_delete, name="endpoint-delete"),
    # API keys (docs/serving.md "API keys"): an endpoint's Keys section, a team's keys page, a key's buttons.
    path("endpoints/<int:pk>/keys/", key_views.endpoint_keys, name="endpoint-keys"),
    path("teams/<slug:team>/keys/", key_views.team_keys, name="team-keys"),
    path("keys/<int:pk>/revoke/", key_views.key_revoke, name="key-revoke"),
    path("keys/<int:pk>/disable/", key_views.key_disable, name="key-disable"),
    path("keys/<int:pk>/enable/", key_views.key_enable, name="key-enable"),
    path("endpoints/<int:pk>/promote/", views.endpoint_promote, name="endpoint-promote"),
    path("endpoints/<int:pk>/rollback/", views.endpoint_rollback, name="endpoint-rollback"),
]
