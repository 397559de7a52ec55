"""Idle pool capacity (docs/pools.md "Money"): units an elastic pool has up and ready that no pod uses.

An elastic pool's nodes cost the platform while they stand, whoever uses them; work is billed only for the
units its running pods hold (:mod:`billing.segments`), so the rest — capacity provisioned and not used — is
nobody's bill. Staff see it in money, to weigh a pool's ``min`` and ``unneeded`` minutes against what it costs.

What counts: per elastic pool (:class:`fleet.models.NodePool`; a fixed inventory has none, so counts nothing),
the free units of its *ready* nodes (:func:`fleet.pools.pool_nodes`, less those still provisioning: a node that
is not Ready yet serves nobody and is billed to nobody, and headroom is no node at all).

How it is integrated: each cycle that records a cluster's nodes takes a reading per pool
(:func:`record_readings`). The previous reading's idle units are taken to hold until this one (the reading we
had; a change between two readings counts from the next, so the error is at most one reading's interval, a
minute or so) and are added, × the seconds between the two, to hour rows by cluster and flavor
(:class:`billing.models.PoolIdleHour`, the ledger's local hours). A reading stands for at most
:data:`READING_LASTS`: a cluster that went silent, or a beat that stopped for an hour, adds five minutes of the
last reading, not an hour nobody saw. The mark (:class:`billing.models.PoolReading`) moves by a conditional
update on its time, in the transaction that adds the seconds, so two cycles of one cluster never count a
stretch twice.

Priced when read (:func:`idle_pool_capacity`), at the cluster's on-demand price of the flavor — the one price
rule (:meth:`billing.pricing.PriceBook.price_on`) — so the figures follow staff's prices as any quote does.
The figures run to each pool's last reading.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum

from billing.ledger import LEDGER_PRECISION, next_hour, usage_hour
from billing.models import PoolIdleHour, PoolReading
from billing.pricing import PriceBook
from cluster.backends.base import NodeCapacity
from core.money import ZERO
from fleet.models import Cluster, GpuFlavor, NodePool
from fleet.pools import pool_nodes, pools_of

#: The longest a reading stands for: a gap between two readings longer than this counts only this much.
#: Readings come every cycle that reads the nodes, at least once a minute while the cluster answers.
READING_LASTS = timedelta(minutes=5)


def idle_units(pool: NodePool, nodes: list[NodeCapacity]) -> int:
    """The units ``pool``'s ready nodes among ``nodes`` have free: neither provisioning nor headroom."""
    return sum(max(n.allocatable - n.in_use, 0) for n in pool_nodes(pool, nodes) if not n.provisioning)


def record_readings(cluster: Cluster, nodes: list[NodeCapacity], now: datetime) -> None:
    """Take a reading of each elastic pool of ``cluster`` from its ``nodes`` at ``now`` and add the stretch since
    its previous reading to the hour rows (module docstring). Safe to run twice: a replay, or an older
    observation than the mark, adds nothing."""
    for pool in pools_of(cluster):
        idle = idle_units(pool, nodes)
        with transaction.atomic():
            mark, created = PoolReading.objects.get_or_create(pool=pool, defaults={"at": now, "idle_units": idle})
            if created or now <= mark.at:
                continue
            if not PoolReading.objects.filter(pk=mark.pk, at=mark.at).update(at=now, idle_units=idle):
                continue  # another cycle moved the mark first: the stretch is its to count
            _add(cluster.pk, pool.flavor_id, mark.at, min(now, mark.at + READING_LASTS), mark.idle_units)


def _add(cluster_id: int, flavor_id: int, start: datetime, end: datetime, units: int) -> None:
    """Add ``units`` × seconds over ``[start, end)`` to the hour rows of ``cluster_id``'s ``flavor_id``."""
    if units <= 0:
        return
    while start < end:
        stop = min(next_hour(start), end)
        seconds = Decimal(units) * Decimal(str((stop - start).total_seconds()))
        row, _ = PoolIdleHour.objects.get_or_create(cluster_id=cluster_id, flavor_id=flavor_id,
                                                    hour=usage_hour(start))
        PoolIdleHour.objects.filter(pk=row.pk).update(unit_seconds=F("unit_seconds") + seconds)
        start = stop


@dataclass(frozen=True)
class PoolIdle:
    """One pool's idle capacity over a period: unit-hours, physical GPU-hours, and their money."""

    cluster: str
    flavor: str
    unit_hours: Decimal
    gpu_hours: Decimal
    cost: Decimal


@dataclass(frozen=True)
class IdlePools:
    """Idle pool capacity over a period, per pool (the costliest first) and in total."""

    rows: list[PoolIdle]
    currency: str

    @property
    def gpu_hours(self) -> Decimal:
        return sum((row.gpu_hours for row in self.rows), ZERO)

    @property
    def cost(self) -> Decimal:
        return sum((row.cost for row in self.rows), ZERO)


def idle_pool_capacity(since: datetime, until: datetime) -> IdlePools:
    """Idle pool capacity in the hours of ``[since, until)`` (local hour starts, as the ledger's months), per
    cluster and flavor, priced by the one price rule: the one figure every page and API shows. Staff's only."""
    sums = (PoolIdleHour.objects.filter(hour__gte=since, hour__lt=until)
            .values("cluster_id", "flavor_id").annotate(seconds=Sum("unit_seconds")).order_by())
    sums = [s for s in sums if s["seconds"]]
    clusters = {c.pk: c.name for c in Cluster.objects.filter(pk__in={s["cluster_id"] for s in sums})}
    flavors = GpuFlavor.objects.in_bulk({s["flavor_id"] for s in sums})
    book = PriceBook()
    rows = []
    for s in sums:
        flavor = flavors[s["flavor_id"]]
        unit_hours = s["seconds"] / Decimal(3600)  # rounded once, each figure from the exact sum
        price = book.price_on(flavor, False, s["cluster_id"])
        rows.append(PoolIdle(clusters[s["cluster_id"]], flavor.name, _exact(unit_hours),
                             _exact(unit_hours * flavor.gpu_fraction), _exact(unit_hours * price)))
    rows.sort(key=lambda r: (-r.cost, r.cluster, r.flavor))
    return IdlePools(rows, settings.SLIPWAY_CURRENCY)


def _exact(value: Decimal) -> Decimal:
    return value.quantize(LEDGER_PRECISION, ROUND_HALF_UP)
