"""HTML routes of the jobs app (included at the site root by portal/urls.py)."""

from django.urls import path

from jobs import views

app_name = "jobs"

urlpatterns = [
    path("runs/", views.run_list, name="run-list"),
    path("runs/new/", views.run_new, name="run-new"),
    path("runs/preview/", views.run_preview, name="run-preview"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/state/", views.run_state, name="run-state"),
    path("runs/<int:pk>/logs/", views.run_logs, name="run-logs"),
    path("runs/<int:pk>/logs/download/", views.run_log_download, name="run-logs-download"),
    path("runs/<int:pk>/events/", views.run_events, name="run-events"),
    path("runs/<int:pk>/cancel/", views.run_cancel, name="run-cancel"),
]
