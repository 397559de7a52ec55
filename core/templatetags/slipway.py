"""``{{ value|when }}``, ``{{ amount|money }}``, ``{{ per_hour|rate }}`` and ``{{ span|duration }}``: the portal's one way to show
times, money and durations.

Both call :mod:`core.formatting`, which the Python code that writes times or money for
people calls too. A builtin (``TEMPLATES`` in settings), so every template and partial has them.
"""

from __future__ import annotations

from django import template

from core.formatting import format_amount, format_duration, format_money, format_rate, format_when

register = template.Library()


@register.filter
def when(value, precision: str = "minutes") -> str:
    """``2026-11-23 14:05 UTC``; ``{{ value|when:"seconds" }}`` adds the seconds."""
    return format_when(value, precision)


@register.filter
def money(value, currency: str | None = None) -> str:
    """``12,345.67 USD``; ``{{ amount|money:budget.currency }}`` names another currency."""
    return format_money(value, currency)


@register.filter
def rate(value, currency: str | None = None) -> str:
    """``1.0286 USD``: money per hour (:func:`core.formatting.format_rate`); the template adds "/h"."""
    return format_rate(value, currency)


@register.filter
def amount(value) -> str:
    """``12,345.67``: money in a table whose header names the currency."""
    return format_amount(value)


@register.filter
def duration(value) -> str:
    """``2 h 05 min`` for a timedelta (or seconds)."""
    return format_duration(value)
