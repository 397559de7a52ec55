"""App config for jobs."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
