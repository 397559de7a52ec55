"""Admin console: every team's inference endpoints, with "scale to minimum" and delete through the services."""

from __future__ import annotations

from django.contrib import admin, messages

from inference import services
from inference.models import InferenceEndpoint
from workloads.admin import WorkloadAdmin


@admin.register(InferenceEndpoint)
class InferenceEndpointAdmin(WorkloadAdmin):
    """Read-only rows (the portal and the API change endpoints); actions go through the services."""

    list_display = ["name", "team", "state", "flavor", "replicas", "replica_ceiling", "min_replicas", "max_replicas",
                    "created", "billed"]
    sortable_by = ["created", "billed", "name", "state", "replicas"]
    actions = ["scale_to_minimum", "delete_endpoints"]

    @admin.action(description="Scale the selected endpoints to their minimum (burst given back)")
    def scale_to_minimum(self, request, queryset):
        done = sum(services.scale_to_minimum(request.user, e) for e in queryset.select_related("team", "flavor"))
        self.message_user(request, f"{done} endpoint(s) gave back their burst.", messages.SUCCESS)

    @admin.action(description="Delete the selected endpoints (quota released, objects removed)")
    def delete_endpoints(self, request, queryset):
        deleted = 0
        for endpoint in queryset.select_related("team", "flavor"):
            try:
                services.delete_endpoint(request.user, endpoint)
                deleted += 1
            except services.EndpointConflict:
                continue
        self.message_user(request, f"Deleting {deleted} endpoint(s).", messages.SUCCESS)
