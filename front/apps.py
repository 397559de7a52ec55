"""App config of front: it also ships the staff groups (:mod:`front.roles`) after every migrate."""

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class FrontConfig(AppConfig):
    name = "front"
    verbose_name = "Slipway pages"

    def ready(self) -> None:
        from front.roles import ensure_staff_groups  # the auth models are not loaded before ready()

        # front has no models, so no post_migrate of its own: the handler waits for the last of
        # the apps whose permissions the groups name (front.roles.ensure_staff_groups).
        post_migrate.connect(ensure_staff_groups, dispatch_uid="slipway-staff-groups")
