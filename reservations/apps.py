"""App config for reservations: GPU time booked by the calendar (docs/reservations.md)."""

from django.apps import AppConfig


class ReservationsConfig(AppConfig):
    name = "reservations"
    verbose_name = "Reservations"

    def ready(self) -> None:
        from reservations.constants import AUDIT_ACTIONS
        from teams.models import declare_audit_actions

        declare_audit_actions(AUDIT_ACTIONS)
