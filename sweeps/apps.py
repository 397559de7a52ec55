"""App config for sweeps: hyperparameter search whose trials are the team's runs (docs/sweeps.md)."""

from django.apps import AppConfig


class SweepsConfig(AppConfig):
    name = "sweeps"
    verbose_name = "Sweeps"

    def ready(self) -> None:
        from sweeps.constants import AUDIT_ACTIONS
        from teams.models import declare_audit_actions

        declare_audit_actions(AUDIT_ACTIONS)
