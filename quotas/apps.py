"""App config for quotas."""

from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "quotas"
