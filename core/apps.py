"""App config of core (an app for its template tags and system checks)."""

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Slipway core"

    def ready(self) -> None:
        # Imported here, not at the top: it imports prometheus_client, which must come after the
        # settings exported PROMETHEUS_MULTIPROC_DIR (core.metrics).
        from core import worker  # noqa: F401  (connects the Celery worker's receivers)
