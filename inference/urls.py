"""HTML routes of the inference app (included at the site root by portal/urls.py)."""

from django.urls import path

from inference import views

app_name = "inference"

urlpatterns = [
    path("endpoints/", views.endpoint_list, name="endpoint-list"),
    path("endpoints/new/", views.endpoint_new, name="endpoint-new"),
    path("endpoints/preview/", views.endpoint_preview, name="endpoint-preview"),
    path("endpoints/<int:pk>/", views.endpoint_detail, name="endpoint-detail"),
    path("endpoints/<int:pk>/state/", views.endpoint_state, name="endpoint-state"),
    path("endpoints/<int:pk>/logs/", views.endpoint_logs, name="endpoint-logs"),
    path("endpoints/<int:pk>/logs/download/", views.endpoint_log_download, name="endpoint-logs-download"),
    path("endpoints/<int:pk>/events/", views.endpoint_events, name="endpoint-events"),
    path("endpoints/<int:pk>/edit/", views.endpoint_edit, name="endpoint-edit"),
    path("endpoints/<int:pk>/delete/", views.endpoint_delete, name="endpoint-delete"),
]
