"""App config for inference: registers inference endpoints as a workload kind."""

from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference endpoints"

    def ready(self) -> None:
        # Imported here, not at the top: models may only be imported once apps are loaded.
        from inference.kind import EndpointKind
        from workloads.registry import register

        register(EndpointKind())
