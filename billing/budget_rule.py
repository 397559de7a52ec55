"""A team's month in money, pure: :class:`BudgetState`, the one place its left / exhausted / alert
state and its projection are worked out.

Billing's, and below admission: :func:`quotas.decide.decide` is given one to admit by, and the
budget summaries (:mod:`billing.services`: pages, the API, the reconcile cycle's budget step)
report the same properties. Imports nothing but the standard library and money's zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from core.money import ZERO


@dataclass(frozen=True)
class BudgetState:
    """A team's month in money, and the one place its left / exhausted / alert state is worked out.

    :func:`decide` reads it to admit; budget summaries (pages, the API, the reconcile cycle's
    budget step) report the same properties.
    """

    monthly_limit: Decimal | None = None  # None: no budget, spending is unlimited
    spent_month: Decimal = ZERO
    currency: str = "USD"
    committed: Decimal = ZERO  # estimated cost still to come from admitted work (ledger.committed)
    #: Hours until the month's end: what work without a known end commits (a month of 31 days
    #: when not given, the most a month can leave).
    hours_left: Decimal = Decimal(31 * 24)
    #: Percent of the limit whose spending raises the alert (None: only a spent budget alerts).
    alert_threshold_percent: int | None = None

    @property
    def left(self) -> Decimal:
        """What the month's budget leaves once spent and committed money is counted."""
        return (self.monthly_limit or ZERO) - self.spent_month - self.committed

    @property
    def projected_month_end(self) -> Decimal:
        """The month's spend at its end, the one projection (issue 34): spent plus what admitted
        work commits — the figure this gate admits against, so a page never projects one number
        while admission counts another."""
        return self.spent_month + self.committed

    def runs_out_at(self, now: datetime, burn_per_hour: Decimal) -> datetime | None:
        """When the month's budget is spent: None without one, or when admitted work does not
        spend it this month (:attr:`projected_month_end` below the limit); ``now`` once spent;
        else at the pace its committed money is spent — what runs now, or the committed money
        spread over the hours left when that is faster (work admitted but not started yet)."""
        limit = self.monthly_limit
        if limit is None or self.projected_month_end < limit:
            return None
        if self.spent_month >= limit:
            return now
        pace = max(burn_per_hour, self.committed / self.hours_left if self.hours_left > 0 else ZERO)
        if pace <= 0:
            return now
        return now + timedelta(hours=float((limit - self.spent_month) / pace))

    @property
    def exhausted(self) -> bool:
        """The month's spend reached the limit: new work is refused (and a "stop" policy stops work)."""
        return self.monthly_limit is not None and self.spent_month >= self.monthly_limit

    @property
    def alert(self) -> bool:
        """The month's spend reached the alert threshold (or the limit): the banner, the audit, no burst."""
        if self.monthly_limit is None:
            return False
        limit, threshold = self.monthly_limit, self.alert_threshold_percent
        return self.exhausted or (threshold is not None and limit > 0
                                  and self.spent_month * 100 >= limit * threshold)
