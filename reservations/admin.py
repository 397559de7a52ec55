"""Reservations in the admin console: the policy per flavor and a team's overrides (staff set them), and the
bookings — pending ones approved or declined with the reason (the action bar's reason field), through the
services, which audit each move. The bookings themselves are read-only here: teams book and cancel them."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm

from reservations import services
from reservations.models import FlavorPolicy, Reservation, ReservationState, TeamPolicy


@admin.register(FlavorPolicy)
class FlavorPolicyAdmin(admin.ModelAdmin):
    list_display = ["flavor", "reservable_share", "max_units", "max_hours", "max_days_ahead", "weekly_unit_hours",
                    "needs_approval"]


@admin.register(TeamPolicy)
class TeamPolicyAdmin(admin.ModelAdmin):
    list_display = ["team", "flavor", "max_units", "max_hours", "max_days_ahead", "weekly_unit_hours", "needs_approval"]
    list_filter = ["flavor"]
    search_fields = ["team__slug"]


class DecisionForm(ActionForm):
    reason = forms.CharField(required=False, max_length=300, label="Reason (to decline)")


@admin.register(Reservation)
class ReservationAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "flavor", "cluster", "units", "start", "end", "recurrence", "state", "matching",
                    "price"]
    list_filter = ["state", "matching", "flavor", "cluster"]
    search_fields = ["name", "team__slug"]
    action_form = DecisionForm
    actions = ["approve", "decline"]

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in Reservation._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False  # teams book (the portal, the API, the CLI): the policy and the room are checked there

    @admin.action(description="Approve selected pending reservations", permissions=["change"])
    def approve(self, request, queryset):
        done = 0
        for reservation in queryset.filter(state=ReservationState.PENDING):
            try:
                services.approve(request.user, reservation)
            except services.ReservationConflict as refused:  # its windows all passed, or decided meanwhile
                self.message_user(request, f"{reservation.name} (#{reservation.pk}): {refused}", messages.ERROR)
                continue
            done += 1
        self.message_user(request, f"Approved {done} reservation(s).", messages.SUCCESS)

    @admin.action(description="Decline selected pending reservations (with the reason)", permissions=["change"])
    def decline(self, request, queryset):
        reason = request.POST.get("reason", "").strip()
        if not reason:
            self.message_user(request, "Give the reason to decline: the team reads it.", messages.ERROR)
            return
        done = 0
        for reservation in queryset.filter(state=ReservationState.PENDING):
            services.decline(request.user, reservation, reason)
            done += 1
        self.message_user(request, f"Declined {done} reservation(s).", messages.SUCCESS)
