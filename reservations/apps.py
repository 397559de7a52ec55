"""App config for reservations: GPU time booked by the calendar (docs/reservations.md)."""

from django.apps import AppConfig


class ReservationsConfig(AppConfig):
    name = "reservations"
    verbose_name = "Reservations"

    def ready(self) -> None:
        from billing.ledger import register_kind_nouns, register_ref_labels
        from billing.reserved import REF_PREFIX
        from reservations.constants import AUDIT_ACTIONS
        from reservations.services import ref_labels
        from teams.models import declare_audit_actions

        declare_audit_actions(AUDIT_ACTIONS)
        # A window's idle units are billed under its reservation's ref (workloads.cycle.windows.bill): reports
        # name it and group it as the workloads' rows are.
        register_ref_labels(ref_labels)
        register_kind_nouns(lambda: {REF_PREFIX: "reservation"})
