"""Admin console: every team's inference endpoints, with "scale to minimum"; "End selected" (workloads.admin) deletes them;
every team's API keys, which staff revoke or disable."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse

from core.admin import ReadOnlyAdmin, when_column
from inference import keys, services
from inference.models import ApiKey, InferenceEndpoint
from workloads.admin import CONFIRMED, WorkloadAdmin, named


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


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    """Every team's API keys, never their secret (only its digest is stored). Staff look, and revoke or disable
    keys (confirmed, audited, through :mod:`inference.keys` with their ``inference.change_apikey`` permission);
    teams create them, and enable them again, in the portal, the API or the CLI."""

    list_display = ["prefix_column", "name", "team", "scope", "created_by", "created", "expires", "last_used", "state"]
    list_filter = ["team", ("revoked_at", admin.EmptyFieldListFilter), ("disabled_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix", "team__slug", "endpoint__name", "created_by__username"]
    list_select_related = ["team", "endpoint", "created_by"]
    ordering = ["-created_at"]
    exclude = ["digest"]
    created = when_column("created_at", "created")
    expires = when_column("expires_at", "expires")
    last_used = when_column("last_used_at", "last used")
    actions = ["revoke_selected", "disable_selected"]

    @admin.display(description="prefix", ordering="prefix")
    def prefix_column(self, key: ApiKey) -> str:
        return f"{key.prefix}…"

    @admin.display(description="for")
    def scope(self, key: ApiKey) -> str:
        return f"endpoint {key.endpoint.name} (#{key.endpoint_id})" if key.endpoint_id else "every endpoint of the team"

    @admin.display(description="state")
    def state(self, key: ApiKey) -> str:
        return keys.key_state(key)

    def _confirm(self, request, queryset, action: str, consequence: str) -> TemplateResponse | None:
        if request.POST.get(CONFIRMED) == "yes":
            return None
        context = {**self.admin_site.each_context(request), "title": f"{action}?", "action": action,
                   "consequence": consequence, "keys": list(queryset.select_related("team", "endpoint", "created_by")),
                   "action_name": request.POST.get("action", ""), "opts": self.model._meta,
                   "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME, "confirmed": CONFIRMED}
        return TemplateResponse(request, "inference/admin/apikey_action_confirm.html", context)

    def _act(self, request, queryset, move, done: str) -> None:
        changed = []
        for key in queryset.select_related("team", "endpoint", "created_by"):
            try:
                before = (key.revoked_at, key.disabled_at)
                key = move(request.user, key, staff=True)
            except keys.KeyConflict:
                continue  # revoked already: nothing to disable
            except PermissionDenied as exc:
                self.message_user(request, str(exc), messages.ERROR)
                return
            if (key.revoked_at, key.disabled_at) != before:
                changed.append(f"{key.prefix}… {key.name} ({key.team.slug})")
        said = f"{done}: {', '.join(changed)}." if changed else f"No key {done.lower()}: they already were."
        self.message_user(request, said, messages.SUCCESS)

    @admin.action(description="Revoke selected keys (for good)")
    def revoke_selected(self, request, queryset):
        asked = self._confirm(request, queryset, "Revoke the selected keys",
                              "Every gateway refuses them within seconds, for good: applications using them stop "
                              "working until their team creates new keys.")
        if asked is not None:
            return asked
        self._act(request, queryset, keys.revoke_key, "Revoked")
        return None

    @admin.action(description="Disable selected keys (their team may enable them again)")
    def disable_selected(self, request, queryset):
        asked = self._confirm(request, queryset, "Disable the selected keys",
                              "Every gateway refuses them within seconds, until their team enables them again.")
        if asked is not None:
            return asked
        self._act(request, queryset, keys.disable_key, "Disabled")
        return None
