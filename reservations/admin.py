"""Reservations in the admin console: the policy per flavor and a team's overrides (staff set them), and the
bookings — pending ones approved or declined with the reason (the action bar's reason field), and any cancelled,
through the services, which audit each move. The bookings themselves are read-only here: teams book them.

A booking is never deleted here. Its windows are billing's rows (:class:`billing.models.ReservedWindow`, joined to it
by their ``ref``, not a foreign key), and deleting the booking left them holding the cluster's share, committing the
team's budget, admitting its work and billing it idle, with no booking left to cancel; deleting them with it would
take the record of hours already billed off the ledger's rows, which only move forward. Staff cancel it instead
(:func:`reservations.services.cancel`): the windows not started are freed, one under way ends now, and what was
billed stays billed and labelled."""

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
    actions = ["approve", "decline", "cancel"]

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in Reservation._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False  # teams book (the portal, the API, the CLI): the policy and the room are checked there

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # cancelled through the service instead, which frees its windows (the module's docstring)

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

    @admin.action(description="Cancel selected reservations (windows not started freed; one under way ends now)",
                  permissions=["change"])
    def cancel(self, request, queryset):
        done = 0
        for reservation in queryset.filter(state__in=(ReservationState.PENDING, ReservationState.BOOKED)):
            try:
                services.cancel(request.user, reservation, as_staff=True)
            except services.ReservationConflict:
                continue  # cancelled or decided meanwhile: nothing to do
            done += 1
        self.message_user(request, f"Cancelled {done} reservation(s).", messages.SUCCESS)
