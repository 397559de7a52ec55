"""The usage ledger: what ran, for how long, and what it cost.

One :class:`~quotas.models.UsageRecord` per (workload, interval start). The reconciler calls
:func:`record_usage` once per tick for every running workload; the unique constraint makes a
replayed tick a no-op instead of a double charge. Month-to-date spend is a plain sum over
the ledger.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from quotas.models import GpuFlavor, UsageRecord

CENTS = Decimal("0.0001")
GPU_HOUR_PRECISION = Decimal("0.000001")
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


def record_usage(team, ref: str, flavor: GpuFlavor | str, user, start: datetime, end: datetime, units: int,
                 spot: bool) -> Decimal:
    """Charge ``units`` of ``flavor`` for ``[start, end)``; returns the cost (0 for a replayed interval)."""
    if end <= start or units <= 0:
        return ZERO
    flavor = _flavor(flavor)
    hours = Decimal((end - start).total_seconds()) / Decimal(3600)
    cost = (flavor.price(spot) * units * hours).quantize(CENTS, ROUND_HALF_UP)
    gpu_hours = (flavor.gpu_fraction * units * hours).quantize(GPU_HOUR_PRECISION, ROUND_HALF_UP)
    try:
        # A savepoint, so a duplicate does not poison the caller's transaction.
        with transaction.atomic():
            UsageRecord.objects.create(
                team=team, ref=ref, flavor=flavor, user=user if getattr(user, "pk", None) else None,
                start=start, end=end, units=units, spot=spot, gpu_hours=gpu_hours, cost=cost,
            )
    except IntegrityError:
        return ZERO  # this interval was already charged (a replayed tick)
    return cost


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
