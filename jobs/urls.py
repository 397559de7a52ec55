"""HTML routes of the jobs app (included at the site root by portal/urls.py)."""

from django.urls import path

from jobs import metric_views, views
from jobs.models import TrainingRun
from workloads.views import read_urls

app_name = "jobs"

urlpatterns = [
    path("runs/", views.run_list, name="run-list"),
    path("runs/new/", views.run_new, name="run-new"),
    path("runs/preview/", views.run_preview, name="run-preview"),
    path("runs/compare/", metric_views.run_compare, name="run-compare"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/metrics/", metric_views.run_metrics, name="run-metrics"),
    *read_urls(TrainingRun, "runs/"),  # state, logs, logs/download, events: every kind's (workloads.views)
    path("runs/<int:pk>/cancel/", views.run_cancel, name="run-cancel"),
]
