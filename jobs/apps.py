"""App config for jobs: registers training runs as a workload kind."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Training runs"

    def ready(self) -> None:
        # Imported here, not at the top: models may only be imported once apps are loaded.
        from jobs.kind import TrainingKind
        from workloads.registry import register

        register(TrainingKind())
