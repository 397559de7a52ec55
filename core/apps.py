"""App config of core (an app for its template tags and system checks)."""

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Slipway core"
