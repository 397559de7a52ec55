"""Admin console: every team's inference endpoints, with "scale to minimum"; "End selected" (workloads.admin) deletes them."""

from __future__ import annotations

from django.contrib import admin, messages

from inference import services
from inference.models import InferenceEndpoint
from workloads.admin import WorkloadAdmin, named


@admin.register(InferenceEndpoint)
class InferenceEndpointAdmin(WorkloadAdmin):
    """Read-only rows (the portal and the API change endpoints); actions go through the services."""

    list_display = ["name", "team", "state", "flavor", "replicas", "replica_ceiling", "min_replicas", "max_replicas",
                    "created", "billed"]
    sortable_by = ["created", "billed", "name", "state", "replicas"]
    actions = ["end_selected", "scale_to_minimum"]

    @admin.action(description="Scale the selected endpoints to their minimum (burst given back)")
    def scale_to_minimum(self, request, queryset):
        asked = self.confirm_first(request, queryset, "Scale the selected endpoints to their minimum",
                                   "Their replicas above the minimum stop serving now and their units go back to "
                                   "their teams' quotas.")
        if asked is not None:
            return asked
        done = [e for e in queryset.select_related("team", "flavor") if services.scale_to_minimum(request.user, e)]
        said = f"Burst given back: {named(done)}." if done else "No endpoint had burst to give back."
        self.message_user(request, said, messages.SUCCESS)
