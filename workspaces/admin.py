"""Admin console: every team's workspaces ("End selected" deletes them, with their home volumes), and the
teams' workspace policies (default priority, longest idle window), which platform staff set."""

from __future__ import annotations

from django.contrib import admin

from workloads.admin import WorkloadAdmin
from workspaces.models import Workspace, WorkspacePolicy


@admin.register(Workspace)
class WorkspaceAdmin(WorkloadAdmin):
    """Read-only rows (the portal, the API and the CLI change workspaces); its token is never among its fields."""

    list_display = ["name", "team", "state", "flavor", "gpus", "home_gb", "idle_minutes", "created_by", "created",
                    "billed"]
    sortable_by = ["created", "billed", "name", "state"]


@admin.register(WorkspacePolicy)
class WorkspacePolicyAdmin(admin.ModelAdmin):
    list_display = ["team", "default_priority", "max_idle_minutes"]
    search_fields = ["team__slug"]
