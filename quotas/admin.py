"""Admin console for flavors, prices, quotas, budgets, holds, the queue and the ledger.

Staff only (Django admin). Every quota, budget or price change goes through the same quota
service functions the rest of Slipway uses (:mod:`quotas.services`: team lock, audit of old and
new value, ResourceQuota mirror, re-admission of the queue after commit). The team page
(``teams.admin.TeamAdmin``, registered by the app below) is extended here with
:class:`TeamQuotaInline` and :class:`TeamBudgetInline`, saved by :func:`save_team_formset`.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin

from billing import services as billing_services
from billing.ledger import spent_month
from billing.models import BudgetMonth, ClusterPrice, PreemptionEvent, QuotaHold, TeamBudget, UsageRecord
from core.admin import DeletesOneByOne, ReadOnlyAdmin, money_column, when_column
from core.formatting import format_money
from fleet.models import Cluster, GpuFlavor
from quotas import services
from quotas.facts import in_use_of_row, units_of
from quotas.models import Cohort, QueuedRequest, TeamQuota, TeamSharing
from teams.admin import TeamAdmin
from teams.models import Team
from teams.services import client_ip


class InUseMixin:
    """Shows "in use / limit" for quota rows, annotated in the queryset (no query per row)."""

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("team", "flavor").annotate(in_use=in_use_of_row())

    @admin.display(description="In use / limit")
    def usage(self, obj: TeamQuota) -> str:
        if obj.pk is None:
            return "-"
        in_use = getattr(obj, "in_use", None)
        if in_use is None:
            in_use = units_of(obj.team, obj.flavor_id)[0]
        return f"{in_use} / {obj.limit}"


class TeamQuotaInline(InUseMixin, admin.TabularInline):
    model = TeamQuota
    extra = 0
    fields = ["flavor", "limit", "borrowing_limit", "lending_limit", "usage"]
    readonly_fields = ["usage"]


class TeamBudgetInline(admin.StackedInline):
    model = TeamBudget
    extra = 0
    max_num = 1
    fields = ["monthly_limit", "alert_threshold_percent", "policy"]  # in SLIPWAY_CURRENCY (TeamBudget): no choice


def save_team_formset(request, formset, team) -> None:
    """Save the quota or budget rows of a team page through the quota services.

    The services lock, audit, mirror and re-admit; the formset only says what changed.
    """
    ip = client_ip(request)
    formset.save(commit=False)  # fills new/changed/deleted objects; the services write them
    if formset.model is TeamQuota:
        initial = {form.instance.pk: form.initial for form in formset.initial_forms}
        for obj in formset.deleted_objects:
            services.set_team_quota(request.user, team, obj.flavor, None, ip=ip)
        for obj, fields in formset.changed_objects:
            if "flavor" in fields:  # moved to another flavor: the old one's quota is gone
                old_flavor = GpuFlavor.objects.filter(pk=initial.get(obj.pk, {}).get("flavor")).first()
                if old_flavor is not None:
                    services.set_team_quota(request.user, team, old_flavor, None, ip=ip)
            services.set_team_quota(request.user, team, obj.flavor, obj.limit, ip=ip,
                                    borrowing_limit=obj.borrowing_limit, lending_limit=obj.lending_limit)
        for obj in formset.new_objects:
            services.set_team_quota(request.user, team, obj.flavor, obj.limit, ip=ip,
                                    borrowing_limit=obj.borrowing_limit, lending_limit=obj.lending_limit)
    else:
        for _obj in formset.deleted_objects:
            services.set_team_budget(request.user, team, None, ip=ip)
        for obj in [*formset.new_objects, *(o for o, _fields in formset.changed_objects)]:
            services.set_team_budget(request.user, team, obj.monthly_limit, None,
                                     obj.alert_threshold_percent, ip=ip, policy=obj.policy)


class ClusterPriceInline(admin.TabularInline):
    """A flavor's price on each cluster that prices it differently (placement ranks by it, billing charges it)."""

    model = ClusterPrice
    extra = 0
    fields = ["cluster", "price_per_hour", "spot_price_per_hour"]
    verbose_name = "price on a cluster"
    verbose_name_plural = "Prices on clusters (a cluster not listed charges the prices above)"


class GpuFlavorForm(forms.ModelForm):
    """The flavor form, with the help a shared flavor needs where the model's field help is too short."""

    class Meta:
        model = GpuFlavor
        fields = ["name", "description", "active", "resource_name", "gpu_model", "mig_profile", "gpu_memory_gb",
                  "gpu_fraction", "max_units_per_node", "sharing", "replicas", "training", "one_team_per_gpu",
                  "node_labels", "tolerations", "price_per_hour", "spot_price_per_hour"]
        help_texts = {
            "resource_name": "nvidia.com/gpu (whole GPUs; time-sliced or MPS GPUs as the device plugin keeps the "
                             "name), nvidia.com/gpu.shared (shared GPUs when the device plugin renames them: "
                             "renameByDefault) or nvidia.com/mig-<profile>.",
            "gpu_model": "GPU Feature Discovery's nvidia.com/gpu.product of an unshared GPU, e.g. Tesla-T4 (on a "
                         "time-sliced or MPS node it writes Tesla-T4-SHARED: Slipway selects that itself).",
            "gpu_memory_gb": "The physical GPU's memory, also for time-sliced and MPS flavors (an MPS unit is "
                             "limited to memory / replicas; time-sliced units share all of it).",
            "gpu_fraction": "Share of a physical GPU one unit is (a MIG 1g slice of an A100 is 1/7). Time-sliced "
                            "and MPS flavors: set to 1/replicas on save.",
            "node_labels": "Extra node selector, a JSON object. Slipway's pods already select the labels GPU "
                           "Feature Discovery puts on the flavor's nodes (nvidia.com/gpu.product; on shared GPUs "
                           "also nvidia.com/gpu.replicas and nvidia.com/gpu.sharing-strategy); labels that "
                           "contradict them are refused.",
        }


@admin.register(GpuFlavor)
class GpuFlavorAdmin(admin.ModelAdmin):
    form = GpuFlavorForm
    list_display = ["name", "resource_name", "gpu_model", "mig_profile", "sharing", "replicas", "gpu_memory_gb",
                    "gpu_fraction", "max_units_per_node", "price", "spot_price", "training", "one_team_per_gpu",
                    "active"]
    price = money_column("price_per_hour", "price per hour", precise=True)
    spot_price = money_column("spot_price_per_hour", "spot price per hour", precise=True)
    list_filter = ["active", "sharing", "training", "resource_name", "gpu_model"]
    search_fields = ["name", "gpu_model", "resource_name", "description"]
    fieldsets = [
        (None, {"fields": ["name", "description", "active"]}),
        ("Hardware", {"fields": ["resource_name", "gpu_model", "mig_profile", "gpu_memory_gb", "gpu_fraction",
                                 "max_units_per_node"]}),
        ("Sharing", {
            "fields": ["sharing", "replicas", "training", "one_team_per_gpu"],
            "description": "Time-sliced and MPS flavors cut each GPU of a node pool into replicas units, each "
                           "1/replicas of a GPU (quota, billing and idle waste count it so; price it at about "
                           "the GPU's price / replicas). Time-slicing isolates nothing: every pod sees the whole "
                           "GPU memory and one can exhaust it for all (not for training that needs the whole "
                           "memory). MPS limits each pod's memory but not its faults: keep it to one team per "
                           "GPU. The nodes need the device plugin config of the flavor: manage.py "
                           "device_plugin_config writes it (docs/admin.md, \"Shared GPUs\").",
        }),
        ("Placement", {"fields": ["node_labels", "tolerations"]}),
        ("Prices per unit and hour", {"fields": ["price_per_hour", "spot_price_per_hour"]}),
    ]
    inlines = [ClusterPriceInline]

    def save_formset(self, request, form, formset, change):
        # Cluster prices go through the quota service too (audited with old and new).
        formset.save(commit=False)
        ip = client_ip(request)
        initial = {row.instance.pk: row.initial for row in formset.initial_forms}
        for obj in formset.deleted_objects:
            billing_services.set_cluster_price(request.user, form.instance, obj.cluster, None, ip=ip)
        for obj, fields in formset.changed_objects:
            if "cluster" in fields:  # moved to another cluster: the old one charges the flavor's price again
                old_cluster = Cluster.objects.filter(pk=initial.get(obj.pk, {}).get("cluster")).first()
                if old_cluster is not None:
                    billing_services.set_cluster_price(request.user, form.instance, old_cluster, None, ip=ip)
        for obj in [*formset.new_objects, *(o for o, _fields in formset.changed_objects)]:
            billing_services.set_cluster_price(request.user, form.instance, obj.cluster, obj.price_per_hour,
                                       obj.spot_price_per_hour, ip=ip)

    def get_readonly_fields(self, request, obj=None):
        # Renaming a flavor would orphan the names users and automation refer to.
        return ["name"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        # Prices go through the quota service (audit of old and new); the other fields are plain.
        super().save_model(request, obj, form, change)
        if not change or {"price_per_hour", "spot_price_per_hour"} & set(form.changed_data):
            old = None if not change else (form.initial.get("price_per_hour"), form.initial.get("spot_price_per_hour"))
            billing_services.set_flavor_prices(request.user, obj, obj.price_per_hour, obj.spot_price_per_hour, old=old,
                                       ip=client_ip(request))


@admin.register(TeamQuota)
class TeamQuotaAdmin(InUseMixin, DeletesOneByOne):
    list_display = ["team", "flavor", "limit", "borrowing_limit", "lending_limit", "usage"]
    list_filter = ["flavor", "team"]
    search_fields = ["team__slug", "team__name", "flavor__name"]
    autocomplete_fields = ["team"]

    def get_readonly_fields(self, request, obj=None):
        # A quota row is one team's limit for one flavor: to move it, delete it and add another.
        return ["team", "flavor"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        saved = services.set_team_quota(request.user, obj.team, obj.flavor, obj.limit, ip=client_ip(request),
                                        borrowing_limit=obj.borrowing_limit, lending_limit=obj.lending_limit)
        obj.pk = saved.pk  # the admin links to the row it saved

    def delete_model(self, request, obj):
        services.set_team_quota(request.user, obj.team, obj.flavor, None, ip=client_ip(request))

    delete_related = ("team", "flavor")
    delete_order = ("team_id", "pk")  # teams locked in one order


class CohortForm(forms.ModelForm):
    teams = forms.ModelMultipleChoiceField(
        Team.objects.order_by("slug"), required=False,
        help_text="A team belongs to at most one cohort: choosing it here moves it out of its former one.")

    class Meta:
        model = Cohort
        fields = ["name", "reclaim", "min_runtime_minutes", "preemption_delay_seconds"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["teams"].initial = Team.objects.filter(sharing__cohort=self.instance)


@admin.register(Cohort)
class CohortAdmin(DeletesOneByOne):
    """Cohorts and their teams, written through :func:`quotas.services.set_cohort` (locked, audited)."""

    form = CohortForm
    list_display = ["name", "reclaim", "min_runtime_minutes", "preemption_delay_seconds", "members"]
    search_fields = ["name"]

    def get_readonly_fields(self, request, obj=None):
        return ["name"] if obj is not None else []  # the name is how the API refers to it

    @admin.display(description="Teams")
    def members(self, obj: Cohort) -> str:
        return ", ".join(sorted(obj.members.values_list("team__slug", flat=True))) or "-"

    def save_model(self, request, obj, form, change):
        saved, _created = services.set_cohort(request.user, obj.name, reclaim=obj.reclaim,
                                    min_runtime_minutes=obj.min_runtime_minutes,
                                    preemption_delay_seconds=obj.preemption_delay_seconds,
                                    teams=list(form.cleaned_data["teams"]), ip=client_ip(request))
        obj.pk = saved.pk

    def delete_model(self, request, obj):
        services.remove_cohort(request.user, obj, ip=client_ip(request))



@admin.register(TeamSharing)
class TeamSharingAdmin(admin.ModelAdmin):
    """Each team's cohort (changed on the cohort's page), fair-share weight and within-team
    preemption (audited here)."""

    list_display = ["team", "cohort", "fair_weight", "within_team_preemption"]
    list_filter = ["cohort"]
    search_fields = ["team__slug", "team__name"]
    autocomplete_fields = ["team"]
    readonly_fields = ["cohort"]

    def save_model(self, request, obj, form, change):
        saved = services.set_team_sharing(request.user, obj.team, obj.fair_weight, ip=client_ip(request),
                                          within_team_preemption=obj.within_team_preemption)
        obj.pk = saved.pk


@admin.register(TeamBudget)
class TeamBudgetAdmin(DeletesOneByOne):
    list_display = ["team", "limit", "alert_threshold_percent", "policy", "spent"]
    limit = money_column("monthly_limit", "monthly limit")  # in SLIPWAY_CURRENCY, as every budget (TeamBudget)
    search_fields = ["team__slug", "team__name"]
    autocomplete_fields = ["team"]

    @admin.display(description="Spent this month")
    def spent(self, obj: TeamBudget) -> str:
        return format_money(spent_month(obj.team))

    def save_model(self, request, obj, form, change):
        saved = services.set_team_budget(request.user, obj.team, obj.monthly_limit, None,
                                         obj.alert_threshold_percent, ip=client_ip(request), policy=obj.policy)
        obj.pk = saved.pk

    def delete_model(self, request, obj):
        services.set_team_budget(request.user, obj.team, None, ip=client_ip(request))

    delete_related = ("team",)
    delete_order = ("team_id",)  # teams locked in one order


class HeldFilter(admin.SimpleListFilter):
    """Held (not released) or released holds; the admin's words and URL stay "active"."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("active", "Active"), ("released", "Released")]

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.held()
        if self.value() == "released":
            return queryset.filter(released_at__isnull=False)
        return queryset


@admin.register(QuotaHold)
class QuotaHoldAdmin(ReadOnlyAdmin):
    list_display = ["ref", "team", "flavor", "units", "units_per_node", "priority", "spot", "created", "released"]
    created = when_column("created_at", "created")
    released = when_column("released_at", "released")
    list_filter = [HeldFilter, "flavor", "spot", "team"]
    search_fields = ["ref", "team__slug", "description"]
    list_select_related = ["team", "flavor"]
    date_hierarchy = "created_at"


@admin.register(QueuedRequest)
class QueuedRequestAdmin(ReadOnlyAdmin):
    list_display = ["ref", "team", "flavor", "units", "units_per_node", "priority", "spot", "cost_per_hour_",
                    "estimated_cost_", "created"]
    created = when_column("created_at", "created")
    cost_per_hour_ = money_column("cost_per_hour", "commits per hour")
    estimated_cost_ = money_column("estimated_cost", "estimated cost")
    exclude = ["cost_per_hour", "estimated_cost"]  # shown as money on the detail page too
    readonly_fields = ["cost_per_hour_", "estimated_cost_"]
    list_filter = ["flavor", "priority", "team"]
    search_fields = ["ref", "team__slug", "description"]
    list_select_related = ["team", "flavor"]
    ordering = QueuedRequest.QUEUE_ORDER


@admin.register(BudgetMonth)
class BudgetMonthAdmin(ReadOnlyAdmin):
    """The budget history (written by the quota services when a budget changes): what each month's burn-down uses."""

    list_display = ["team", "month_", "limit"]
    list_filter = ["team"]
    search_fields = ["team__slug", "team__name"]
    list_select_related = ["team"]

    @admin.display(description="month", ordering="month")
    def month_(self, row: BudgetMonth) -> str:
        return f"{row.month:%Y-%m}"

    @admin.display(description="monthly limit", ordering="monthly_limit")
    def limit(self, row: BudgetMonth) -> str:
        return "no budget" if row.monthly_limit is None else format_money(row.monthly_limit, row.currency)


@admin.register(PreemptionEvent)
class PreemptionEventAdmin(ReadOnlyAdmin):
    """Every preemption: who took which units back from which workload, and the work it cost."""

    list_display = ["ref", "team", "by_team", "units", "flavor", "at_", "lost_gpu_hours_", "lost_cost_"]
    at_ = when_column("at", "at", "seconds")
    lost_cost_ = money_column("lost_cost", "lost cost", "currency")
    exclude = ["lost_gpu_hours", "lost_cost"]
    readonly_fields = ["lost_gpu_hours_", "lost_cost_"]
    list_filter = ["team", "by_team", "flavor"]
    search_fields = ["ref", "for_ref", "team__slug", "by_team__slug"]
    list_select_related = ["team", "by_team", "flavor"]

    @admin.display(description="work lost (GPU-hours)", ordering="lost_gpu_hours")
    def lost_gpu_hours_(self, event: PreemptionEvent) -> str:
        return f"{event.lost_gpu_hours:.4f}"


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = ["ref", "team", "flavor", "user", "hour_", "start_", "end_", "units", "spot", "unit_hours_",
                    "gpu_hours_", "cost_"]
    hour_ = when_column("hour", "hour")
    start_ = when_column("start", "start", "seconds")
    end_ = when_column("end", "end", "seconds")
    cost_ = money_column("cost", "cost", "currency")
    idle_cost_ = money_column("idle_cost", "idle cost", "currency")
    # Money and GPU-hours as people read them on the detail page too (the columns keep ten decimals).
    exclude = ["cost", "gpu_hours", "idle_cost", "idle_gpu_hours", "borrowed_gpu_hours", "unit_hours"]
    readonly_fields = ["unit_hours_", "gpu_hours_", "cost_", "idle_gpu_hours_", "idle_cost_", "borrowed_gpu_hours_"]

    @admin.display(description="unit-hours", ordering="unit_hours")
    def unit_hours_(self, record: UsageRecord) -> str:
        return f"{record.unit_hours:.4f}"  # the flavor's units held × hours (docs/money.md)

    @admin.display(description="physical GPU-hours", ordering="gpu_hours")
    def gpu_hours_(self, record: UsageRecord) -> str:
        return f"{record.gpu_hours:.4f}"  # the column keeps ten decimals for exact sums

    @admin.display(description="idle GPU-hours", ordering="idle_gpu_hours")
    def idle_gpu_hours_(self, record: UsageRecord) -> str:
        return f"{record.idle_gpu_hours:.4f}"

    @admin.display(description="borrowed GPU-hours", ordering="borrowed_gpu_hours")
    def borrowed_gpu_hours_(self, record: UsageRecord) -> str:
        return f"{record.borrowed_gpu_hours:.4f}"  # the part run on units borrowed from the cohort
    list_filter = ["flavor", "spot", "team"]
    search_fields = ["ref", "team__slug", "user__username"]
    list_select_related = ["team", "flavor", "user"]
    date_hierarchy = "start"


class TeamWithQuotasAdmin(TeamAdmin):
    """The team page with its quota and budget rows.

    ``teams`` sits below ``quotas`` and cannot name them, so this app re-registers the team page
    it extends (its admin module loads after teams', in INSTALLED_APPS order).
    """

    inlines = [TeamQuotaInline, TeamBudgetInline, *TeamAdmin.inlines]

    def save_formset(self, request, form, formset, change):
        if formset.model in (TeamQuota, TeamBudget):
            save_team_formset(request, formset, form.instance)
        else:
            super().save_formset(request, form, formset, change)


admin.site.unregister(Team)
admin.site.register(Team, TeamWithQuotasAdmin)
