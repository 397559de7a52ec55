"""System checks of billing: budgets whose limit was set in a currency other than the one they are kept in."""

from __future__ import annotations

from django.conf import settings
from django.core import checks
from django.db import DatabaseError

from billing.models import TeamBudget


@checks.register(checks.Tags.database)
def check_budget_currencies(app_configs, databases=None, **kwargs) -> list[checks.CheckMessage]:
    """``slipway.W001``: a team budget set in another currency than ``SLIPWAY_CURRENCY``.

    A budget is in ``SLIPWAY_CURRENCY`` (:class:`billing.models.TeamBudget`), as the spend it is compared
    with; staff could once type another (EUR over USD spend), and such a limit's number may have been meant
    in it. Its pages now say the setting's currency; this names each such budget so staff review the limit
    and save it (which records the setting's currency), rather than a migration relabelling it unseen. A
    database check: ``migrate`` and ``manage.py check --database default`` run it, never before the tables exist.
    """
    if not databases:
        return []
    try:
        odd = list(TeamBudget.objects.exclude(currency=settings.SLIPWAY_CURRENCY).order_by("team__slug")
                   .values_list("team__slug", "monthly_limit", "currency"))
    except DatabaseError:  # not migrated yet: migrate runs the checks before it migrates
        return []
    return [checks.Warning(f"The budget of team {slug} was set as {limit} {currency}, but budgets are in "
                           f"{settings.SLIPWAY_CURRENCY} (SLIPWAY_CURRENCY): it has always been compared with "
                           f"{settings.SLIPWAY_CURRENCY} spend and now shows as {settings.SLIPWAY_CURRENCY}.",
                           hint="Review its limit and save it (admin console, Budgets); docs/money.md, "
                                "\"A budget's currency\".", id="slipway.W001")
            for slug, limit, currency in odd]
