"""The admin console's sweeps: read their state and reason; they are made and stopped through the portal and API."""

from django.contrib import admin

from sweeps.models import Sweep, Trial


class TrialInline(admin.TabularInline):
    model = Trial
    fields = ("number", "state", "workload", "params", "objective", "best", "step", "value", "reason")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    list_display = ("name", "team", "state", "sampler", "max_trials", "max_cost", "created_at")
    list_filter = ("state", "sampler")
    search_fields = ("name", "team__slug")
    readonly_fields = [f.name for f in Sweep._meta.fields]
    inlines = [TrialInline]

    def has_add_permission(self, request):
        return False
