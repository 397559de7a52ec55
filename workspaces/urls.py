"""HTML routes of workspaces (included at the site root by portal/urls.py), and the ingress's auth-url."""

from django.urls import path

from workloads.views import read_urls
from workspaces import views
from workspaces.models import Workspace

app_name = "workspaces"

urlpatterns = [
    path("workspaces/", views.workspace_list, name="workspace-list"),
    path("workspaces/new/", views.workspace_new, name="workspace-new"),
    path("workspaces/preview/", views.workspace_preview, name="workspace-preview"),
    path("workspaces/auth/", views.auth, name="workspace-auth"),
    path("workspaces/<int:pk>/", views.workspace_detail, name="workspace-detail"),
    *read_urls(Workspace, "workspaces/"),  # state, logs, logs/download, events: every kind's (workloads.views)
    path("workspaces/<int:pk>/open/", views.workspace_open, name="workspace-open"),
    path("workspaces/<int:pk>/pause/", views.workspace_pause, name="workspace-pause"),
    path("workspaces/<int:pk>/resume/", views.workspace_resume, name="workspace-resume"),
    path("workspaces/<int:pk>/share/", views.workspace_share, name="workspace-share"),
    path("workspaces/<int:pk>/delete/", views.workspace_delete, name="workspace-delete"),
]
