"""App config of notifications: connects its receivers to the lower apps' signals."""

from __future__ import annotations

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        # Imported here, not at the top: models may only be imported once apps are loaded.
        from notifications import receivers  # noqa: F401  (connects the receivers)
