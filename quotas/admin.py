"""Admin console for flavors, prices, quotas, budgets, reservations, the queue and the ledger.

Staff only (Django admin). Every quota, budget or price change is written to the audit log
with its old and new value, and a quota or budget change is mirrored into the team's
ResourceQuota and re-runs admission of the team's queue after commit. The team page
(``portal.admin.TeamAdmin``) embeds :class:`TeamQuotaInline` and :class:`TeamBudgetInline`,
and calls :func:`audit_team_formset` from its ``save_formset``.
"""

from __future__ import annotations

from django.contrib import admin
from django.db import transaction
from django.db.models import IntegerField, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from portal.services import client_ip
from quotas import admission, services
from quotas.models import GpuFlavor, QueuedRequest, Reservation, TeamBudget, TeamQuota, UsageRecord


def _in_use_subquery():
    """Units of the row's team and flavor held by active reservations (a correlated subquery)."""
    units = (Reservation.objects.active().filter(team=OuterRef("team"), flavor=OuterRef("flavor"))
             .order_by().values("team").annotate(total=Sum("units")).values("total"))
    return Coalesce(Subquery(units, output_field=IntegerField()), Value(0))


class InUseMixin:
    """Shows "in use / limit" for quota rows, annotated in the queryset (no query per row)."""

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("team", "flavor").annotate(in_use=_in_use_subquery())

    @admin.display(description="In use / limit")
    def usage(self, obj: TeamQuota) -> str:
        if obj.pk is None:
            return "-"
        in_use = getattr(obj, "in_use", None)
        if in_use is None:
            in_use = Reservation.objects.active().filter(team=obj.team_id, flavor=obj.flavor_id).aggregate(
                t=Sum("units"))["t"] or 0
        return f"{in_use} / {obj.limit}"


class TeamQuotaInline(InUseMixin, admin.TabularInline):
    model = TeamQuota
    extra = 0
    fields = ["flavor", "limit", "usage"]
    readonly_fields = ["usage"]


class TeamBudgetInline(admin.StackedInline):
    model = TeamBudget
    extra = 0
    max_num = 1
    fields = ["monthly_limit", "currency", "alert_threshold_percent"]


def audit_team_formset(request, formset, team) -> None:
    """Audit the quota or budget rows a team-page formset just saved, and mirror them."""
    if formset.model not in (TeamQuota, TeamBudget):
        return
    initial = {form.instance.pk: form.initial for form in formset.initial_forms}
    ip = client_ip(request)
    touched = False
    if formset.model is TeamQuota:
        for obj in formset.new_objects:
            services.audit_quota_change(request.user, team, obj.flavor.name, None, obj.limit, ip=ip)
            touched = True
        for obj, fields in formset.changed_objects:
            before = initial.get(obj.pk, {})
            if "flavor" in fields:  # moved to another flavor: the old one's quota is gone
                old_flavor = GpuFlavor.objects.filter(pk=before.get("flavor")).first()
                if old_flavor is not None:
                    services.audit_quota_change(request.user, team, old_flavor.name, before.get("limit"), None, ip=ip)
                services.audit_quota_change(request.user, team, obj.flavor.name, None, obj.limit, ip=ip)
            else:
                services.audit_quota_change(request.user, team, obj.flavor.name, before.get("limit"), obj.limit, ip=ip)
            touched = True
        for obj in formset.deleted_objects:
            services.audit_quota_change(request.user, team, obj.flavor.name, obj.limit, None, ip=ip)
            touched = True
    else:
        for obj in formset.new_objects:
            services.audit_budget_change(request.user, team, None, services.budget_fields(obj), ip=ip)
            touched = True
        for obj, _fields in formset.changed_objects:
            old = initial.get(obj.pk, {})
            before = {"monthly_limit": services.money_str(old.get("monthly_limit")), "currency": old.get("currency"),
                      "alert_threshold_percent": old.get("alert_threshold_percent")}
            services.audit_budget_change(request.user, team, before, services.budget_fields(obj), ip=ip)
            touched = True
        for obj in formset.deleted_objects:
            services.audit_budget_change(request.user, team, services.budget_fields(obj), None, ip=ip)
            touched = True
    if touched:
        services.schedule_team_sync(team)


@admin.register(GpuFlavor)
class GpuFlavorAdmin(admin.ModelAdmin):
    list_display = ["name", "resource_name", "gpu_model", "mig_profile", "gpu_memory_gb", "gpu_fraction",
                    "max_units_per_node", "price_per_hour", "spot_price_per_hour", "active"]
    list_filter = ["active", "resource_name", "gpu_model"]
    search_fields = ["name", "gpu_model", "resource_name", "description"]
    fieldsets = [
        (None, {"fields": ["name", "description", "active"]}),
        ("Hardware", {"fields": ["resource_name", "gpu_model", "mig_profile", "gpu_memory_gb", "gpu_fraction",
                                 "max_units_per_node"]}),
        ("Placement", {"fields": ["node_labels", "tolerations"]}),
        ("Prices per unit and hour", {"fields": ["price_per_hour", "spot_price_per_hour"]}),
    ]

    def get_readonly_fields(self, request, obj=None):
        # Renaming a flavor would orphan the names users and automation refer to.
        return ["name"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if {"price_per_hour", "spot_price_per_hour"} & set(form.changed_data):
            old = ({"price_per_hour": services.money_str(form.initial.get("price_per_hour")),
                    "spot_price_per_hour": services.money_str(form.initial.get("spot_price_per_hour"))}
                   if change else {"price_per_hour": None, "spot_price_per_hour": None})
            services.audit_price_change(request.user, obj, old, ip=client_ip(request))


@admin.register(TeamQuota)
class TeamQuotaAdmin(InUseMixin, admin.ModelAdmin):
    list_display = ["team", "flavor", "limit", "usage"]
    list_filter = ["flavor", "team"]
    search_fields = ["team__slug", "team__name", "flavor__name"]
    autocomplete_fields = ["team"]

    def get_readonly_fields(self, request, obj=None):
        # A quota row is one team's limit for one flavor: to move it, delete it and add another.
        return ["team", "flavor"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        old = form.initial.get("limit") if change else None
        admission.lock_team(obj.team)  # quota rows change only under the team's admission lock
        super().save_model(request, obj, form, change)
        if old != obj.limit:
            services.audit_quota_change(request.user, obj.team, obj.flavor.name, old, obj.limit,
                                        ip=client_ip(request))
            services.schedule_team_sync(obj.team)

    def delete_model(self, request, obj):
        admission.lock_team(obj.team)
        services.audit_quota_change(request.user, obj.team, obj.flavor.name, obj.limit, None, ip=client_ip(request))
        super().delete_model(request, obj)
        services.schedule_team_sync(obj.team)

    def delete_queryset(self, request, queryset):
        # One transaction (the delete action has none of its own), teams locked in one order.
        with transaction.atomic():
            for obj in queryset.select_related("team", "flavor").order_by("team_id", "pk"):
                self.delete_model(request, obj)


@admin.register(TeamBudget)
class TeamBudgetAdmin(admin.ModelAdmin):
    list_display = ["team", "monthly_limit", "currency", "alert_threshold_percent", "spent"]
    list_filter = ["currency"]
    search_fields = ["team__slug", "team__name"]
    autocomplete_fields = ["team"]

    @admin.display(description="Spent this month")
    def spent(self, obj: TeamBudget) -> str:
        return f"{services.spent_month(obj.team):,.2f}"

    def save_model(self, request, obj, form, change):
        before = ({"monthly_limit": services.money_str(form.initial.get("monthly_limit")),
                   "currency": form.initial.get("currency"),
                   "alert_threshold_percent": form.initial.get("alert_threshold_percent")} if change else None)
        super().save_model(request, obj, form, change)
        after = services.budget_fields(obj)
        if before != after:
            services.audit_budget_change(request.user, obj.team, before, after, ip=client_ip(request))
            services.schedule_team_sync(obj.team)

    def delete_model(self, request, obj):
        services.audit_budget_change(request.user, obj.team, services.budget_fields(obj), None, ip=client_ip(request))
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written only by admission and the reconciler: staff may look, never edit."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ActiveFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("active", "Active"), ("released", "Released")]

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.filter(released_at__isnull=True)
        if self.value() == "released":
            return queryset.filter(released_at__isnull=False)
        return queryset


@admin.register(Reservation)
class ReservationAdmin(ReadOnlyAdmin):
    list_display = ["ref", "team", "flavor", "units", "units_per_node", "priority", "spot", "created_at",
                    "released_at"]
    list_filter = [ActiveFilter, "flavor", "spot", "team"]
    search_fields = ["ref", "team__slug", "description"]
    list_select_related = ["team", "flavor"]
    date_hierarchy = "created_at"


@admin.register(QueuedRequest)
class QueuedRequestAdmin(ReadOnlyAdmin):
    list_display = ["ref", "team", "flavor", "units", "units_per_node", "priority", "spot", "created_at"]
    list_filter = ["flavor", "priority", "team"]
    search_fields = ["ref", "team__slug", "description"]
    list_select_related = ["team", "flavor"]
    ordering = QueuedRequest.QUEUE_ORDER


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = ["ref", "team", "flavor", "user", "hour", "start", "end", "units", "spot", "gpu_hours", "cost",
                    "currency"]
    list_filter = ["flavor", "spot", "team"]
    search_fields = ["ref", "team__slug", "user__username"]
    list_select_related = ["team", "flavor", "user"]
    date_hierarchy = "start"
