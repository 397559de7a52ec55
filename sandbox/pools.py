"""The sandbox's elastic pools as state: which of their nodes exist, their settings now, their delays.

An elastic pool (:class:`sandbox.inventory.ElasticPool`) names its nodes ``<prefix>-<i>`` for ``i < max``; which
of them exist is a :class:`~sandbox.models.SimNode` row each (provisioning, then ready), and its settings are the
inventory's with the live changes of ``manage.py sandbox pool`` (a :class:`~sandbox.models.SimPool` row). The
tick's autoscaler and ProvisioningRequest controller (:mod:`sandbox.controllers.autoscaler`,
:mod:`sandbox.controllers.provisioning`) move the rows; the backend reads them (capacity, node pools).

A pool is set up the first time its cluster is read or ticks (:func:`pools`): its ``min`` nodes exist from then on,
ready. Provisioning delays are drawn from a lognormal law (:func:`provisioning_delay`).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime

from django.db import IntegrityError, transaction

from sandbox import inventory
from sandbox.inventory import ElasticPool, Node, PoolSettings
from sandbox.models import SimNode, SimPool

#: The standard normal's 0.99 quantile: a pool's tail delay is its law's 0.99 quantile.
Z_99 = 2.3263478740408408
SETTING_NAMES = tuple(f.name for f in fields(PoolSettings))


@dataclass(frozen=True)
class LivePool:
    """One elastic pool as it is now: its inventory entry and its settings (live changes applied)."""

    pool: ElasticPool
    settings: PoolSettings

    @property
    def prefix(self) -> str:
        return self.pool.prefix

    @property
    def most_nodes(self) -> int:
        """The most nodes it may have: ``max``, or fewer when its ``limit_units`` allows fewer whole nodes."""
        if self.settings.limit_units is None:
            return self.settings.max_nodes
        return min(self.settings.max_nodes, self.settings.limit_units // max(self.pool.units_per_node, 1))


def live_settings(pool: ElasticPool, overrides: dict) -> PoolSettings:
    """The pool's inventory settings with ``overrides`` (unknown keys ignored: a row from an older version)."""
    return replace(pool.settings, **{k: v for k, v in (overrides or {}).items() if k in SETTING_NAMES})


def pools(cluster: str, now: datetime) -> dict[str, LivePool]:
    """The cluster's elastic pools by prefix, each set up (its row, its ``min`` nodes ready since ``now``) when
    the cluster meets it for the first time."""
    elastic = inventory.cluster(cluster).elastic
    if not elastic:
        return {}
    rows = {row.pool: row for row in SimPool.objects.filter(cluster=cluster)}
    for pool in elastic:
        if pool.prefix not in rows:
            rows[pool.prefix] = _set_up(cluster, pool, now)
    return {pool.prefix: LivePool(pool, live_settings(pool, rows[pool.prefix].overrides)) for pool in elastic}


def _set_up(cluster: str, pool: ElasticPool, now: datetime) -> SimPool:
    try:
        with transaction.atomic():
            row, created = SimPool.objects.get_or_create(cluster=cluster, pool=pool.prefix)
            if created:
                SimNode.objects.bulk_create(
                    [SimNode(cluster=cluster, pool=pool.prefix, node=f"{pool.prefix}-{i}", state=SimNode.READY,
                             asked_at=now, ready_at=now, idle_since=now) for i in range(pool.settings.min_nodes)],
                    ignore_conflicts=True)
            return row
    except IntegrityError:  # another process set it up at the same moment: its row is there now
        return SimPool.objects.get(cluster=cluster, pool=pool.prefix)


def existing(cluster: str, now: datetime) -> list[tuple[Node, SimNode]]:
    """The elastic pools' nodes that exist (provisioning or ready), with their rows, in pool and index order."""
    live = pools(cluster, now)
    if not live:
        return []
    found = []
    for row in SimNode.objects.filter(cluster=cluster):
        pool = live.get(row.pool)
        if pool is not None:
            found.append((pool.pool.node(pool.pool.index(row.node)), row))
    return sorted(found, key=lambda pair: (pair[1].pool, pool_index(pair[1].node)))


def pool_index(node: str) -> int:
    return int(node.rsplit("-", 1)[1])


def change(cluster: str, prefix: str, values: dict, now: datetime) -> LivePool:
    """Change a pool's settings live (``values`` by :class:`PoolSettings` field name); ValueError naming what is
    wrong, and nothing changed, when the result is not valid."""
    live = pools(cluster, now)
    if prefix not in live:
        known = ", ".join(live) or "none"
        raise ValueError(f"cluster {cluster} has no elastic pool {prefix!r} (its elastic pools: {known})")
    with transaction.atomic():
        row = SimPool.objects.select_for_update().get(cluster=cluster, pool=prefix)
        pool = live[prefix].pool
        settings = live_settings(pool, {**row.overrides, **values})
        problems = settings.problems()
        if problems:
            raise ValueError(problems[0])
        base = asdict(pool.settings)
        overrides = {k: v for k, v in asdict(settings).items() if v != base[k]}
        SimPool.objects.filter(pk=row.pk).update(overrides=overrides)
    return LivePool(pool, settings)


def provisioning_delay(rng: random.Random, median: float, tail: float) -> float:
    """Seconds a node takes to come up: lognormal with ``median`` and ``tail`` as its 0.99 quantile, and never
    more than ``tail`` (the 1 % of draws beyond it are held to it: the tail is also the cap)."""
    sigma = math.log(tail / median) / Z_99 if tail > median else 0.0
    return round(min(median * math.exp(sigma * rng.gauss(0.0, 1.0)), tail), 1)
