"""What a team may book, pure: staff's policy per flavor, a team's overrides, and the refusals it gives.

Staff set a policy per flavor (:class:`reservations.models.ReservationPolicy` without a team) and may
override it for one team (the same model with the team: each field it sets replaces the flavor's; what
it leaves empty is the flavor's). Without any row a flavor has :data:`DEFAULT`. The reservable share is
the cluster's, not a team's (it bounds what all teams together hold), so only the flavor's row sets it.

:func:`refusals` says, per request field, every limit a booking breaks, in words that name the limit;
the API answers them as a 400, the form beside its fields, the CLI as its message.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import date, datetime, timedelta
from decimal import Decimal


@dataclass(frozen=True)
class Policy:
    reservable_share: Decimal = Decimal("0.5")
    max_units: int | None = None  # None: only the share bounds it
    max_hours: int | None = 24  # the longest window; None: any
    max_days_ahead: int = 28  # how far ahead a window may start
    weekly_unit_hours: int | None = None  # per team and flavor, per local week; None: no cap
    needs_approval: bool = False


DEFAULT = Policy()
#: What a team's row may override (the share is the cluster's).
TEAM_FIELDS = ("max_units", "max_hours", "max_days_ahead", "weekly_unit_hours", "needs_approval")


def hours(value: Decimal) -> str:
    """Hours as people write them: ``8``, ``7.5``."""
    return f"{value.quantize(Decimal('0.1')).normalize():f}"


def effective(flavor_row: Policy | None, team_row: dict | None) -> Policy:
    """The flavor's policy (or the default) with a team's overrides: ``team_row`` maps a field of
    :data:`TEAM_FIELDS` to its value, None where the team's row leaves it to the flavor."""
    policy = flavor_row or DEFAULT
    if team_row:
        policy = replace(policy, **{name: value for name, value in team_row.items()
                                    if name in TEAM_FIELDS and value is not None})
    return policy


def policy_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(Policy))


def refusals(policy: Policy, flavor: str, units: int, windows: list, now: datetime,
             week_hours: dict[date, Decimal], new_week_hours: dict[date, Decimal]) -> dict[str, list[str]]:
    """Every limit of ``policy`` a booking of ``units`` × ``flavor`` over ``windows`` breaks, by field.

    ``week_hours`` is what the team has booked of the flavor per local week already, ``new_week_hours``
    what this booking adds.
    """
    errors: dict[str, list[str]] = {}
    if policy.max_units is not None and units > policy.max_units:
        errors.setdefault("units", []).append(f"at most {policy.max_units} units of {flavor} per booking")
    if policy.max_hours is not None:
        longest = max(windows, key=lambda w: w.end - w.start)
        if longest.end - longest.start > timedelta(hours=policy.max_hours):
            errors.setdefault("end", []).append(
                f"a window may last at most {policy.max_hours} h; this one lasts {hours(longest.hours)} h")
    if windows[0].start < now:
        errors.setdefault("start", []).append("the window starts in the past")
    horizon = now + timedelta(days=policy.max_days_ahead)
    late = [w for w in windows if w.start > horizon]
    if late:
        field = "recurrence" if len(windows) > 1 else "start"
        errors.setdefault(field, []).append(
            f"bookings may start at most {policy.max_days_ahead} days ahead (until {horizon:%Y-%m-%d %H:%M} UTC); "
            f"{'a window' if field == 'recurrence' else 'this one'} starts {late[0].start:%Y-%m-%d %H:%M} UTC")
    if policy.weekly_unit_hours is not None:
        for monday in sorted(new_week_hours):
            total = week_hours.get(monday, Decimal(0)) + new_week_hours[monday]
            if total > policy.weekly_unit_hours:
                errors.setdefault("units", []).append(
                    f"the team may reserve {policy.weekly_unit_hours} unit-hours of {flavor} a week; the week of "
                    f"{monday:%Y-%m-%d} would have {hours(total)}")
                break
    return errors
