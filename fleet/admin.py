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

Its elastic pools (docs/pools.md) are an inline of its page: staff set each pool's flavor, min, max, mode and
idle minutes (min ≤ max, max at most :data:`fleet.models.MAX_NODES`); what the pool has now (nodes ready and
provisioning, from the nodes as last read), the autoscaler's own limit and the provisioning times it observed are
read-only. The inline's saves go through :func:`fleet.pools.change_pools`, as the API's do, so each is audited
with what changed; a row whose flavor is changed is that flavor's pool removed and the other's set.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from cluster.pools import provisioning_seconds
from core.admin import when_column
from core.formatting import half_up
from fleet import pools, services
from fleet.models import Cluster, GpuFlavor, NodePool

#: The field only superusers read, and what everyone else sees instead.
SECRET_FIELD, SECRET_SUMMARY = "kubeconfig", "kubeconfig_summary"


class NodePoolForm(forms.ModelForm):
    """A pool's settings; the model's own rules (min ≤ max, idle minutes 1 to 1440, ``max`` at most 1000)."""

    class Meta:
        model = NodePool
        fields = ["flavor", "min_nodes", "max_nodes", "mode", "unneeded_minutes"]


class NodePoolInline(admin.TabularInline):
    """The cluster's elastic pools: settings staff change, and what each has now (read-only)."""

    model = NodePool
    form = NodePoolForm
    extra = 0
    fields = ["flavor", "min_nodes", "max_nodes", "mode", "unneeded_minutes", "nodes_ready", "nodes_provisioning",
              "autoscaler_limit", "provisioning_time"]
    readonly_fields = ["nodes_ready", "nodes_provisioning", "autoscaler_limit", "provisioning_time"]

    @staticmethod
    def _status(pool: NodePool) -> pools.PoolStatus | None:
        return pools.status(pool, services.recorded_nodes(pool.cluster)) if pool.pk else None

    @admin.display(description="Nodes ready")
    def nodes_ready(self, pool: NodePool):
        now = self._status(pool)
        return "–" if now is None else now.nodes_ready

    @admin.display(description="Nodes provisioning")
    def nodes_provisioning(self, pool: NodePool):
        now = self._status(pool)
        return "–" if now is None else now.nodes_provisioning

    @admin.display(description="Provisioning time (median, p90)")
    def provisioning_time(self, pool: NodePool) -> str:
        history = pool.history_seconds or []
        median, tail = provisioning_seconds(history)
        source = f"{len(history)} observed" if len(history) >= 3 else "defaults, too few observed"
        return f"{half_up(median)} s, {half_up(tail)} s ({source})"


def pool_changes(formset) -> list[tuple[GpuFlavor, dict | None]]:
    """What a saved pools inline changes, as :func:`fleet.pools.change_pools` takes it: removals first (a deleted
    row, the former flavor of a row whose flavor changed), then each new or changed row's settings."""
    removed, changed = [], []
    deleted = set(formset.deleted_forms)
    for form in formset.forms:
        was = form.initial.get("flavor") if form.instance.pk else None
        if form in deleted or ("flavor" in form.changed_data and was is not None):
            if was is not None:
                removed.append((GpuFlavor.objects.get(pk=was), None))
            if form in deleted:
                continue
        if form.has_changed():
            values = {field: form.cleaned_data[field] for field in NodePoolForm.Meta.fields if field != "flavor"}
            changed.append((form.cleaned_data["flavor"], values))
    return [*removed, *changed]


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
    inlines = [NodePoolInline]

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

    def save_formset(self, request, form, formset, change) -> None:
        """The pools inline's rows through the one audited service, as the API's changes go."""
        if formset.model is not NodePool:
            super().save_formset(request, form, formset, change)
            return
        pools.change_pools(form.instance, pool_changes(formset), request.user)
        # The admin's own history reads what a formset saved; the audit log is where these changes are told.
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []

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

    # permissions: an action without them is offered to, and run for, anyone who may view the list (read-only
    # Support); draining needs fleet.change_cluster here as in the API (docs/security.md "Staff roles").
    @admin.action(description="Drain: no new placements, running work finishes", permissions=["change"])
    def drain(self, request, queryset) -> None:
        for cluster in queryset:
            services.set_draining(cluster, True, request.user)
        messages.success(request, f"Draining: {', '.join(c.name for c in queryset)}.")

    @admin.action(description="Make ready: placeable again", permissions=["change"])
    def make_ready(self, request, queryset) -> None:
        for cluster in queryset:
            services.set_draining(cluster, False, request.user)
        messages.success(request, f"Placeable: {', '.join(c.name for c in queryset)}.")
