"""Read-only admin pages for the sandbox cluster (handy while demoing; the tick owns the rows)."""

from __future__ import annotations

from django.contrib import admin

from sandbox.models import SimEvent, SimLoad, SimObject, SimPod


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(SimObject)
class SimObjectAdmin(ReadOnly):
    list_display = ("cluster", "resource_kind", "namespace", "name", "workload", "replicas", "done", "created_at")
    list_filter = ("cluster", "resource_kind", "done")
    search_fields = ("namespace", "name", "workload")


@admin.register(SimPod)
class SimPodAdmin(ReadOnly):
    list_display = ("cluster", "name", "namespace", "node", "phase", "reason", "active", "created_at")
    list_filter = ("cluster", "phase", "active", "node")
    search_fields = ("namespace", "name", "workload")


@admin.register(SimEvent)
class SimEventAdmin(ReadOnly):
    list_display = ("cluster", "time", "type", "reason", "object", "message")
    list_filter = ("cluster", "type", "reason")
    search_fields = ("namespace", "workload", "object")


@admin.register(SimLoad)
class SimLoadAdmin(admin.ModelAdmin):
    """Editable: pinning an endpoint's load here drives its autoscaling, like ``manage.py sandbox load``."""

    list_display = ("cluster", "namespace", "workload", "value")
