"""System checks of the workloads app: the secret env keys must be usable before the portal starts, and
GPU telemetry's bucket must divide a day."""

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


@checks.register()
def check_telemetry_step(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """``slipway.E003``: ``SLIPWAY_TELEMETRY_STEP_MINUTES`` is not a whole divisor of a day, so a day row's
    slots would not line up with the day (:mod:`workloads.telemetry.readings`)."""
    step = settings.SLIPWAY_TELEMETRY_STEP_MINUTES
    if step >= 1 and 1440 % step == 0:
        return []
    return [checks.Error(f"SLIPWAY_TELEMETRY_STEP_MINUTES={step} does not divide a day (1440 minutes)",
                         hint="Use 1, 2, 5, 10, 15, 30, 60 … (docs/metrics.md, GPU telemetry).", id="slipway.E003")]
