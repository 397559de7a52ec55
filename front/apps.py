"""App config of front."""

from django.apps import AppConfig


class FrontConfig(AppConfig):
    name = "front"
    verbose_name = "Slipway pages"
