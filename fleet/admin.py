"""Clusters in the admin console: each cluster's health at a glance, drain and undrain.

Health is the reconciler's to write (what observing the cluster found), so it is read-only
here; staff change where work goes (labels, region) and drain a cluster; the backend, the
kubeconfig and its context only superusers (a kubeconfig's ``exec`` runs a command on the
portal's host, a backend path is imported). Draining goes through
:func:`fleet.services.set_draining`, which audits it; every other save is audited too.
"""

from __future__ import annotations

from django.contrib import admin, messages

from core.admin import when_column
from fleet import services
from fleet.models import Cluster


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    """Superusers only change what runs code on the portal's host (:data:`fleet.services.CODE_FIELDS`);
    every save is audited with the fields it changed."""

    list_display = ["name", "state_", "last_seen_", "silent_cycles", "region", "last_error"]
    search_fields = ["name", "region"]
    fields = ["name", "backend", "kubeconfig", "context", "region", "labels", "state_", "last_seen_",
              "silent_cycles", "last_error", "draining"]
    readonly_fields = ["state_", "last_seen_", "silent_cycles", "last_error", "draining"]
    actions = ["drain", "make_ready"]

    def get_readonly_fields(self, request, obj=None):
        if request.user.is_superuser:
            return self.readonly_fields
        return [*self.readonly_fields, *services.CODE_FIELDS]

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        services.record_cluster_change(request.user, obj, list(form.changed_data), created=not change)

    @admin.display(description="State")
    def state_(self, cluster: Cluster) -> str:
        return cluster.state

    last_seen_ = when_column("last_seen", "Last seen", "seconds")

    @admin.action(description="Drain: no new placements, running work finishes")
    def drain(self, request, queryset) -> None:
        for cluster in queryset:
            services.set_draining(cluster, True, request.user)
        messages.success(request, f"Draining: {', '.join(c.name for c in queryset)}.")

    @admin.action(description="Make ready: placeable again")
    def make_ready(self, request, queryset) -> None:
        for cluster in queryset:
            services.set_draining(cluster, False, request.user)
        messages.success(request, f"Placeable: {', '.join(c.name for c in queryset)}.")
