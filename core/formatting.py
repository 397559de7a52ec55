"""How the portal writes times and money for people: one rule each.

* Times: ``2026-11-23 14:05 UTC`` — in the portal's current time zone (``TIME_ZONE``), with its
  abbreviation, so a time read on one page means the same on every other. Seconds only where
  they tell events apart (``precision="seconds"``: scaling decisions seconds apart).
* Money: ``12,345.67 USD`` — thousands separators, cents, the currency code after the amount,
  rounded half up (as the ledger's reports). **Money per hour** — a unit's price, a workload's
  cost per hour, a burn rate — is one rule, :func:`format_rate`: four decimals where cents would
  lose some (a MIG slice at 0.5857 an hour; 7 of them 4.10, not 7 × 0.59), else cents, so a
  page never writes one rate as 1.03 and its unit's as 1.0286 (issue 46). Files and programs (CSV
  downloads) get the same cents without separators (:func:`plain_amount`), the currency in
  a column of its own.
* Durations: ``2 h 05 min`` (:func:`format_duration`): "running for …", "ran for …".

The template filters ``when`` and ``money`` (``core.templatetags.slipway``), the admission
reasons and the flavor picker's labels all call these. The API is not formatted here: it keeps
machine values (RFC 3339 times, decimal strings).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from django.conf import settings
from django.utils import timezone

#: What a missing time or amount shows.
NOTHING = "—"

CENT = Decimal("0.01")
TEN_THOUSANDTH = Decimal("0.0001")

FORMATS = {"minutes": "%Y-%m-%d %H:%M", "seconds": "%Y-%m-%d %H:%M:%S"}


def _as_datetime(value) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value.strip():
        try:  # RFC 3339 from the cluster ("2026-11-23T14:05:00Z"; Python 3.11 reads the Z)
            return datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    return None


def format_when(value, precision: str = "minutes") -> str:
    """``2026-11-23 14:05 UTC`` in the current time zone; ``—`` for nothing; unreadable text as it is."""
    moment = _as_datetime(value)
    if moment is None:
        return str(value) if isinstance(value, str) and value.strip() else NOTHING
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.get_current_timezone())
    local = timezone.localtime(moment)
    return f"{local.strftime(FORMATS[precision])} {local.tzname()}"


def format_clock(value) -> str:
    """The time of day alone in the current time zone, ``14:05`` (chart axes, whose zone is said once)."""
    return timezone.localtime(value).strftime("%H:%M")


def current_zone_name() -> str:
    """The abbreviation ``format_when`` writes now, e.g. ``UTC`` or ``CET``."""
    return timezone.localtime(timezone.now()).tzname() or str(timezone.get_current_timezone())


def _decimal(value) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        return value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError, TypeError):
        return None


#: How money is rounded wherever a person reads it (pages, CSV files, the API's report).
MONEY_ROUNDING = ROUND_HALF_UP


def _rounded(amount: Decimal, places: Decimal) -> Decimal:
    rounded = amount.quantize(places, MONEY_ROUNDING)
    return abs(rounded) if rounded == 0 else rounded  # never "-0.00"


def format_amount(value, *, precise: bool = False) -> str:
    """``12,345.67``: the number of a money amount (``precise``: four decimals when cents would lose some)."""
    amount = _decimal(value)
    if amount is None:
        return NOTHING
    try:
        places = TEN_THOUSANDTH if precise and amount != amount.quantize(CENT, MONEY_ROUNDING) else CENT
        rounded = _rounded(amount, places)
    except InvalidOperation:  # beyond the context's 28 digits: nothing a budget holds
        return str(amount)
    return f"{rounded:,}"


def plain_amount(value) -> str:
    """``12345.67``: a money amount for files and programs (CSV cells) — cents, as :func:`format_amount`
    rounds them, without thousands separators or exponents (never ``0E-10``); ``""`` for no amount."""
    amount = _decimal(value)
    if amount is None:
        return ""
    try:
        return f"{_rounded(amount, CENT):f}"
    except InvalidOperation:
        return f"{amount:f}"


def stored_amount(value) -> str | None:
    """``"12345.6700"``: a money amount as the database stores it (four decimals), for audit records,
    so an old and a new value compare as the columns do; None for no amount."""
    amount = _decimal(value)
    return None if amount is None else str(amount.quantize(TEN_THOUSANDTH))


def format_money(value, currency: str | None = None, *, precise: bool = False) -> str:
    """``12,345.67 USD`` (``currency`` defaults to ``SLIPWAY_CURRENCY``); ``—`` for no amount."""
    number = format_amount(value, precise=precise)
    if number == NOTHING:
        return NOTHING
    return f"{number} {currency or settings.SLIPWAY_CURRENCY}"


def format_rate(value, currency: str | None = None) -> str:
    """``1.0286 USD``: money per hour (a price, a cost per hour) — every page's one rounding for it:
    cents, or four decimals where cents would lose some. The caller writes "/h" or "per hour"."""
    return format_money(value, currency, precise=True)


def format_duration(value) -> str:
    """``45 s``, ``3 min 20 s``, ``42 min``, ``2 h 05 min``, ``3 d 4 h`` for a timedelta or seconds; ``—`` for nothing.

    Seconds only while they matter (under ten minutes); a negative span (clocks apart) is ``0 s``.
    """
    if value is None or value == "":
        return NOTHING
    try:
        seconds = int(value.total_seconds() if isinstance(value, timedelta) else float(value))
    except (TypeError, ValueError, OverflowError):
        return NOTHING
    seconds = max(seconds, 0)
    minutes, sec = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    days, hrs = divmod(hours, 24)
    if days:
        return f"{days} d {hrs} h"
    if hours:
        return f"{hours} h {mins:02d} min"
    if minutes >= 10:
        return f"{minutes} min"
    if minutes:
        return f"{minutes} min {sec} s"
    return f"{sec} s"


def half_up(value: float) -> int:
    """``value`` (not negative) to the nearest whole number, a half up, as a reader rounds: 2.5 h is "3 h".

    Python's ``round`` takes a half to the even number (2.5 → 2, 3.5 → 4), so 150 min read "2 h" and a range of
    150 min read "100 min–2 h"."""
    return int(Decimal(str(value)).quantize(Decimal(1), ROUND_HALF_UP))


def count_of(number: int, noun: str, plural: str | None = None) -> str:
    """``1 replica``, ``3 replicas``, ``0 replicas``: a count with its noun in the right number."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
