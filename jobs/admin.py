"""Admin console: every team's training runs, filtered and sorted; "End selected" cancels them (workloads.admin)."""

from __future__ import annotations

from django.contrib import admin

from jobs.models import TrainingRun
from workloads.admin import WorkloadAdmin


@admin.register(TrainingRun)
class TrainingRunAdmin(WorkloadAdmin):
    """Read-only rows (the portal and the API change runs); the one action is the shared end (a cancel)."""

    list_display = ["name", "team", "state", "flavor", "created_by", "created", "billed"]
    sortable_by = ["created", "billed", "name", "state"]
