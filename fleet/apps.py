"""App config of fleet."""

from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "fleet"
    verbose_name = "Clusters"
    default_auto_field = "django.db.models.BigAutoField"
