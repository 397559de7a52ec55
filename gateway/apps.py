"""App config for the gateway: no models of its own (it reads and writes inference's serving tables)."""

from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "Gateway"
