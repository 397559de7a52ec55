"""The admin console's app config (the project package itself is not a Django app)."""

from django.contrib.admin import apps as admin_apps


class SlipwayAdminConfig(admin_apps.AdminConfig):
    """``django.contrib.admin`` with :class:`portal.admin_site.SlipwayAdminSite` as ``admin.site``."""

    default = False  # named in INSTALLED_APPS by its dotted path

    default_site = "portal.admin_site.SlipwayAdminSite"
