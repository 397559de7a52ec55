"""App config for the portal package."""

from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Slipway portal"

    def ready(self) -> None:
        # Connect the sign-in audit receivers at start-up, not on first URL resolution.
        from portal import signals  # noqa: F401
