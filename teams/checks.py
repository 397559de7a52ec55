"""System checks of the teams app: single sign-on's group map must name real roles before the portal starts."""

from __future__ import annotations

from django.conf import settings
from django.core import checks

from teams.sso import group_map_problems


@checks.register()
def check_group_map(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """``slipway.E002``: an ``SLIPWAY_OIDC_GROUP_MAP`` entry with a role that is none of viewer, member, admin.

    The settings check the entries' shape; the roles are the teams app's, so they are checked here,
    by ``migrate`` and ``runserver``, rather than skipped silently at the first sign-in.
    """
    return [checks.Error(problem, hint="docs/sso.md, Group mappings.", id="slipway.E002")
            for problem in group_map_problems(settings.SLIPWAY_OIDC_GROUP_MAP)]
