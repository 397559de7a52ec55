"""Clusters in the admin console: each cluster's health at a glance, drain and undrain.

Health is the reconciler's to write (what observing the cluster found), so it is read-only
here; staff change where work goes (labels, region) and drain a cluster; the backend, the
kubeconfig and its context only superusers (a kubeconfig's ``exec`` runs a command on the
portal's host, a backend path is imported). Only superusers *see* a kubeconfig too: it is the
credential Slipway reaches the cluster with, and a read-only Support user reading it on the change
page was security review 5 #4; everyone else sees what it is ("set, 82 bytes, context x"), and
may not filter the list by it (a lookup would read it a guess at a time). Draining goes through
:func:`fleet.services.set_draining`, which audits it; every other save is audited too.

Its training API (docs/training.md) is discovery's to write, so it is read-only here with the runtimes'
frameworks and when it was last asked; staff may override it (``training_api_override``, audited with the
other fields of the save). A cluster added here is asked at once (:func:`fleet.services.registered`).
"""

from __future__ import annotations

from django.contrib import admin, messages

from core.admin import when_column
from fleet import services
from fleet.models import Cluster

#: The field only superusers read, and what everyone else sees instead.
SECRET_FIELD, SECRET_SUMMARY = "kubeconfig", "kubeconfig_summary"


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    """Superusers only change what runs code on the portal's host (:data:`fleet.services.CODE_FIELDS`);
    every save is audited with the fields it changed."""

    list_display = ["name", "state_", "training_api_", "last_seen_", "silent_cycles", "region", "last_error"]
    search_fields = ["name", "region"]
    fields = ["name", "backend", "kubeconfig", "context", "region", "labels", "state_", "last_seen_",
              "silent_cycles", "last_error", "draining", "training_api_", "training_api", "training_api_override",
              "frameworks_", "training_checked_at", "training_error"]
    readonly_fields = ["state_", "last_seen_", "silent_cycles", "last_error", "draining", "training_api_",
                       "training_api", "frameworks_", "training_checked_at", "training_error"]
    actions = ["drain", "make_ready"]

    def get_fields(self, request, obj=None):
        if request.user.is_superuser:
            return self.fields
        return [SECRET_SUMMARY if name == SECRET_FIELD else name for name in self.fields]

    def get_readonly_fields(self, request, obj=None):
        if request.user.is_superuser:
            return self.readonly_fields
        return [*self.readonly_fields, *(f for f in services.CODE_FIELDS if f != SECRET_FIELD), SECRET_SUMMARY]

    def lookup_allowed(self, lookup, value, request=None) -> bool:
        if lookup.split("__")[0] == SECRET_FIELD and not (request is not None and request.user.is_superuser):
            return False
        return super().lookup_allowed(lookup, value, request)

    @admin.display(description="Kubeconfig")
    def kubeconfig_summary(self, cluster: Cluster | None) -> str:
        """What a kubeconfig is, never what it says: "set, 82 bytes, context x" or "not set"."""
        if cluster is None or not cluster.kubeconfig:
            return "not set"
        context = f", context {cluster.context}" if cluster.context else ""
        return f"set, {len(cluster.kubeconfig.encode())} bytes{context}"

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        services.record_cluster_change(request.user, obj, list(form.changed_data), created=not change)
        if not change:
            services.registered(obj)

    @admin.display(description="State")
    def state_(self, cluster: Cluster) -> str:
        return cluster.state

    last_seen_ = when_column("last_seen", "Last seen", "seconds")

    @admin.display(description="Training API")
    def training_api_(self, cluster: Cluster) -> str:
        """The one it is taken to have, and whose word that is."""
        api = cluster.effective_training_api
        if cluster.training_api_override:
            return f"{api} (staff override)"
        return api if cluster.training_api else f"{api} (not checked yet)"

    @admin.display(description="Frameworks")
    def frameworks_(self, cluster: Cluster) -> str:
        return ", ".join(cluster.frameworks) or "none"

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
