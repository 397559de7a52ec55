"""App config for inference: registers inference endpoints as a workload kind, the gateways' demand reader, and
the receiver that ends a failed endpoint's canary with it."""

from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference endpoints"

    def ready(self) -> None:
        # Imported here, not at the top: models may only be imported once apps are loaded.
        from core.backend import register_demand_reader
        from inference import revisions
        from inference.kind import EndpointKind
        from inference.models import InferenceEndpoint
        from inference.traffic import gateway_demand
        from workloads.events import workload_moved
        from workloads.registry import register

        register(EndpointKind())
        # The sandbox's KEDA reads what the gateways see (GatewayLoad) through the backend (docs/serving.md).
        register_demand_reader(gateway_demand)
        # An endpoint that fails ends its candidate with it (in the move's transaction: workloads.events).
        workload_moved.connect(revisions.on_endpoint_moved, sender=InferenceEndpoint,
                               dispatch_uid="inference.endpoint_moved")
