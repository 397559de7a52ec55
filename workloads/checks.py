"""System checks of the workloads app: the secret env keys must be usable before the portal starts."""

from __future__ import annotations

from django.conf import settings
from django.core import checks

from workloads.crypto import key_problems


@checks.register(checks.Tags.security)
def check_secret_keys(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """``slipway.E001``: no usable ``SLIPWAY_SECRET_KEYS`` (unset with DEBUG off, or a malformed key).

    An error, not a deploy-only warning: ``migrate`` and ``runserver`` run it, so a production
    start without a key stops there instead of failing at the first secret env.
    """
    return [checks.Error(problem, hint="Set SLIPWAY_SECRET_KEYS (docs/security.md, Secret env at rest).",
                         id="slipway.E001")
            for problem in key_problems(list(settings.SLIPWAY_SECRET_KEYS))]
