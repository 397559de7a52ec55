"""App config for jobs: connects the signal receivers."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Training runs"

    def ready(self) -> None:
        from jobs import signals  # noqa: F401  (connects receivers)
