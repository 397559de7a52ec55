"""Admin console: every team's training runs, filtered and sorted, cancelled through the run service."""

from __future__ import annotations

from django.contrib import admin, messages

from jobs import services
from jobs.models import TrainingRun


@admin.register(TrainingRun)
class TrainingRunAdmin(admin.ModelAdmin):
    """Read-only rows (the portal and the API change runs); the one action is a cancel."""

    list_display = ["name", "team", "state", "flavor", "created_by", "created_at", "billed_cost"]
    list_filter = ["state", "team", "flavor", "created_by"]
    search_fields = ["name", "team__slug", "created_by__username"]
    ordering = ["-created_at"]
    sortable_by = ["created_at", "billed_cost", "name", "state"]
    list_select_related = ["team", "flavor", "created_by"]
    actions = ["cancel_runs"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Cancel the selected runs (quota released, objects deleted)")
    def cancel_runs(self, request, queryset):
        cancelled = 0
        for run in queryset.select_related("team", "flavor"):
            try:
                services.cancel_run(request.user, run)
                cancelled += 1
            except services.RunConflict:
                continue  # already finished: nothing to cancel
        self.message_user(request, f"Cancelled {cancelled} run(s).", messages.SUCCESS)
