"""App config for inference: registers inference endpoints as a workload kind, and the gateways' demand reader."""

from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference endpoints"

    def ready(self) -> None:
        # Imported here, not at the top: models may only be imported once apps are loaded.
        from core.backend import register_demand_reader
        from inference.kind import EndpointKind
        from inference.traffic import gateway_demand
        from workloads.registry import register

        register(EndpointKind())
        # The sandbox's KEDA reads what the gateways see (GatewayLoad) through the backend (docs/serving.md).
        register_demand_reader(gateway_demand)
