"""The admin console's site: Django's, with its login door behind the sign-in throttle.

Installed as the default site by :class:`portal.apps.SlipwayAdminConfig` (in place of
``django.contrib.admin`` in INSTALLED_APPS), so ``admin.site`` everywhere is this one.
"""

from __future__ import annotations

from django.contrib import admin

from teams import throttle


class SlipwayAdminSite(admin.AdminSite):
    login_form = throttle.AdminSignInForm

    def login(self, request, extra_context=None):
        response = super().login(request, extra_context)
        form = (getattr(response, "context_data", None) or {}).get("form")
        if form is not None and form.is_bound and throttle.refused(form):
            response.status_code = 429  # as the portal's login page
        return response
