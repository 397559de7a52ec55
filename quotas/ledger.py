"""The usage ledger: what ran, for how long, and what it cost.

One :class:`~quotas.models.UsageRecord` per (workload, hour). The reconciler calls
:func:`record_usage` once per cycle for every running workload; each interval is added to its
hour's row in one conditional upsert, which ignores an interval that does not start after
what the row already covers, so a replayed cycle is a no-op instead of a double charge.
Month-to-date spend is a plain sum over the ledger: at most one row per workload and hour,
however short the reconcile interval.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache

from django.conf import settings
from django.db import connection
from django.db.models import Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from quotas.models import GpuFlavor, UsageRecord

CENTS = Decimal("0.0001")
#: Ledger amounts (cost, GPU-hours) keep ten decimals. A reconcile interval is a few seconds,
#: so rounding each one to 1/100 of a cent would bias the bill: an L4 at 0.32/h for 5 s costs
#: 0.000444, which rounds to 0.0004 (10% under) every single time. Reports round the sums.
LEDGER_PRECISION = Decimal("1E-10")
LEDGER_DIGITS = 20
ZERO = Decimal(0)


def _flavor(flavor: GpuFlavor | str) -> GpuFlavor:
    return flavor if isinstance(flavor, GpuFlavor) else GpuFlavor.objects.get(name=flavor)


def estimated_cost_per_hour(flavor: GpuFlavor | str, units: int, spot: bool = False) -> Decimal:
    """What ``units`` of ``flavor`` cost per hour (MIG prices are already fraction-adjusted)."""
    return (_flavor(flavor).price(spot) * units).quantize(CENTS, ROUND_HALF_UP)


def month_start(now: datetime | None = None) -> datetime:
    """Midnight of the first day of ``now``'s month, in the portal's time zone."""
    local = timezone.localtime(now or timezone.now())
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def usage_hour(instant: datetime) -> datetime:
    """The start of ``instant``'s hour in the portal's time zone: the ledger row it is billed to.

    Local hours, so the rows line up with local days and months (zones offset by half an hour
    included), which is what budgets and reports are cut by.
    """
    return timezone.localtime(instant).replace(minute=0, second=0, microsecond=0)


def interval_charge(flavor: GpuFlavor, units: int, spot: bool, start: datetime, end: datetime) -> tuple[Decimal, Decimal]:
    """``(cost, gpu_hours)`` of ``units`` of ``flavor`` over ``[start, end)``, at ledger precision."""
    hours = Decimal((end - start).total_seconds()) / Decimal(3600)
    return ((flavor.price(spot) * units * hours).quantize(LEDGER_PRECISION, ROUND_HALF_UP),
            (flavor.gpu_fraction * units * hours).quantize(LEDGER_PRECISION, ROUND_HALF_UP))


@dataclass(frozen=True)
class Interval:
    """``units`` of ``flavor`` used by workload ``ref`` of ``team`` over ``[start, end)``."""

    team_id: int
    ref: str
    flavor: GpuFlavor
    user_id: int | None
    start: datetime
    end: datetime
    units: int
    spot: bool

    def charge(self) -> tuple[Decimal, Decimal]:
        """``(cost, gpu_hours)`` of this interval."""
        return interval_charge(self.flavor, self.units, self.spot, self.start, self.end)


def record_usage(team, ref: str, flavor: GpuFlavor | str, user, start: datetime, end: datetime, units: int,
                 spot: bool) -> Decimal:
    """Charge ``units`` of ``flavor`` for ``[start, end)``; returns the cost (0 for a replayed interval).

    The interval is added to the row of the hour ``start`` falls in (created on first use). It
    is ignored when it starts before the end of what that row already covers: billing only moves
    forward, so that is a replay (or the overlapping half of a race between the reconciler and a
    cancel, which both bill from the same ``billed_until``).
    """
    if end <= start or units <= 0:
        return ZERO
    interval = Interval(team.pk, ref, _flavor(flavor), getattr(user, "pk", None), start, end, units, spot)
    return interval.charge()[0] if record_intervals([interval]) else ZERO


def record_intervals(intervals: list[Interval]) -> set[str]:
    """Add every interval to its hour's row in one statement; returns the refs whose interval was recorded.

    At most one interval per ref (one statement cannot change a row twice). A ref missing from
    the result was a replay: see :func:`record_usage`.
    """
    intervals = [i for i in intervals if i.end > i.start and i.units > 0]
    if not intervals:
        return set()
    ops, currency = connection.ops, settings.SLIPWAY_CURRENCY
    params: list = []
    for i in intervals:
        cost, gpu_hours = i.charge()
        params += [i.team_id, i.ref, i.flavor.pk, i.user_id, ops.adapt_datetimefield_value(usage_hour(i.start)),
                   ops.adapt_datetimefield_value(i.start), ops.adapt_datetimefield_value(i.end), i.units, i.spot,
                   ops.adapt_decimalfield_value(gpu_hours, LEDGER_DIGITS, 10),
                   ops.adapt_decimalfield_value(cost, LEDGER_DIGITS, 10), currency]
    with connection.cursor() as cursor:
        cursor.execute(_upsert_sql(connection.vendor, len(intervals)), params)
        return {ref for (ref,) in cursor.fetchall()}


@lru_cache(maxsize=32)
def _upsert_sql(vendor: str, rows: int) -> str:
    """Insert each interval's row, or add the interval to its hour's row when it starts at or after its end.

    PostgreSQL and SQLite share the syntax. The WHERE of DO UPDATE makes a replay a no-op (no
    row changed, none returned). Money is added in SQL; Django quantizes decimals it reads back.
    """
    q = connection.ops.quote_name
    table = q(UsageRecord._meta.db_table)
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"] * rows)
    return (
        f"INSERT INTO {table} (team_id, ref, flavor_id, user_id, hour, {q('start')}, {q('end')}, units, spot,"  # noqa: S608 - only quoted model names are interpolated
        f" gpu_hours, cost, currency) VALUES {values}"
        f" ON CONFLICT (ref, hour) DO UPDATE SET {q('end')} = excluded.{q('end')},"
        f" gpu_hours = {table}.gpu_hours + excluded.gpu_hours, cost = {table}.cost + excluded.cost,"
        f" units = CASE WHEN excluded.units > {table}.units THEN excluded.units ELSE {table}.units END"
        f" WHERE {table}.{q('end')} <= excluded.{q('start')} RETURNING ref"
    )


def cost_by_ref(refs: Iterable[str]) -> dict[str, Decimal]:
    """Cost to date of each workload in ``refs`` (one query); refs without usage map to 0."""
    refs = list(refs)
    totals = dict.fromkeys(refs, ZERO)
    if refs:
        rows = UsageRecord.objects.filter(ref__in=refs).values("ref").annotate(total=Sum("cost")).order_by()
        for row in rows:
            totals[row["ref"]] = row["total"] or ZERO
    return totals


def spent_month(team, now: datetime | None = None) -> Decimal:
    """The team's spend since the start of the current month."""
    total = UsageRecord.objects.filter(team=team, start__gte=month_start(now)).aggregate(total=Sum("cost"))["total"]
    return total or ZERO


GROUP_FIELDS = {"day": "day", "flavor": "flavor__name", "user": "user__username", "workload": "ref"}


def usage_rows(teams, since, until, group_by: str) -> list[dict]:
    """Cost report rows ``{group, gpu_hours, cost, currency}`` for ``teams`` in ``[since, until)``."""
    records = UsageRecord.objects.filter(team__in=teams, start__gte=since, start__lt=until)
    if group_by == "day":
        records = records.annotate(day=TruncDate("start"))
    field = GROUP_FIELDS[group_by]
    rows = (records.values(field, "currency").annotate(gpu_hours=Sum("gpu_hours"), cost=Sum("cost"))
            .order_by(field, "currency"))
    return [{"group": str(row[field]) if row[field] is not None else "", "gpu_hours": row["gpu_hours"],
             "cost": row["cost"], "currency": row["currency"]} for row in rows]
