"""App config for the portal package."""

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Slipway portal"

    def ready(self) -> None:
        # Connect the sign-in audit receivers at start-up, not on first URL resolution.
        from portal import signals  # noqa: F401


class SlipwayAdminConfig(admin_apps.AdminConfig):
    """``django.contrib.admin`` with :class:`portal.admin_site.SlipwayAdminSite` as ``admin.site``."""

    default = False  # named in INSTALLED_APPS; "portal" alone still means PortalConfig

    default_site = "portal.admin_site.SlipwayAdminSite"
