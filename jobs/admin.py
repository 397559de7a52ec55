"""Admin console: every team's training runs, filtered and sorted, cancelled through the run service."""

from __future__ import annotations

from django.contrib import admin, messages

from jobs import services
from jobs.models import TrainingRun
from workloads.admin import WorkloadAdmin, named


@admin.register(TrainingRun)
class TrainingRunAdmin(WorkloadAdmin):
    """Read-only rows (the portal and the API change runs); the one action is a cancel."""

    list_display = ["name", "team", "state", "flavor", "created_by", "created", "billed"]
    sortable_by = ["created", "billed", "name", "state"]
    actions = ["cancel_runs"]

    @admin.action(description="Cancel the selected runs (quota released, objects deleted)")
    def cancel_runs(self, request, queryset):
        asked = self.confirm_first(request, queryset, "Cancel the selected runs",
                                   "Their pods are deleted and their GPUs go back to their teams' quotas at once.")
        if asked is not None:
            return asked
        cancelled = []
        for run in queryset.select_related("team", "flavor"):
            try:
                services.cancel_run(request.user, run)
                cancelled.append(run)
            except services.RunConflict:
                continue  # already finished: nothing to cancel
        self.message_user(request, f"Cancelled {len(cancelled)} run(s){': ' if cancelled else ''}{named(cancelled)}.",
                          messages.SUCCESS)
