"""Elastic node pools as data (docs/pools.md): what each has now, the room it may still grow into, staff's changes.

The rules are :mod:`cluster.pools`' (pure); this module reads and writes the rows. A pool's nodes now are the
cluster's nodes as last recorded that offer its flavor (:func:`cluster.capacity.offers`): ready ones, and
``provisioning`` ones (up, not Ready yet). The room it may still grow into is *headroom*: a node for each
that ``max_nodes`` allows beyond those, offered to every reader of a cluster's nodes (:func:`with_headroom`)
as a node that is ``provisioning`` with all its units free. So placement, reservations' reservable share,
price quotes and capacity waits count what the pool can ever hold (its ``max``, which quota follows),
while what starts *now* counts ready nodes only (those not ``provisioning``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction

from cluster.backends.base import ClusterBackend, NodeCapacity, NodePoolLimit
from cluster.capacity import offers
from cluster.errors import ClusterError
from cluster.manifests.common import SPOT_KEY, SPOT_VALUE, node_selector
from cluster.pools import provisioning_seconds
from core.formatting import half_up
from fleet.models import Cluster, GpuFlavor, NodePool
from teams.models import AuditEvent
from teams.services import audit

logger = logging.getLogger(__name__)

#: How a headroom node is named: ``<flavor>-pool+<i>`` (a name no Kubernetes node can have).
HEADROOM_NAME = "{flavor}-pool+{i}"

#: The fields staff change (the admin console, the clusters API's PATCH), as the API names them.
API_FIELDS = {"min": "min_nodes", "max": "max_nodes", "mode": "mode", "unneeded_minutes": "unneeded_minutes"}

@dataclass(frozen=True)
class PoolStatus:
    """What a pool has now: nodes ready, and nodes up but not Ready yet."""

    nodes_ready: int
    nodes_provisioning: int


def pools_of(cluster: Cluster) -> list[NodePool]:
    """The cluster's pools with their flavors: read once per cluster instance (prefetched when the caller
    prefetched ``pools__flavor``, else one query the first time), since every reader of its nodes asks."""
    found = cluster.__dict__.get("_elastic_pools")
    if found is None:
        prefetched = "pools" in getattr(cluster, "_prefetched_objects_cache", {})
        found = list(cluster.pools.all() if prefetched else cluster.pools.select_related("flavor"))
        cluster.__dict__["_elastic_pools"] = found
    return found


def pool_for(cluster: Cluster | None, flavor_id: int | None) -> NodePool | None:
    """The elastic pool of ``flavor_id`` on ``cluster``, or None (a fixed inventory)."""
    if cluster is None or flavor_id is None:
        return None
    return next((p for p in pools_of(cluster) if p.flavor_id == flavor_id), None)


def pool_nodes(pool: NodePool, nodes: list[NodeCapacity]) -> list[NodeCapacity]:
    """The real nodes (not headroom) of ``nodes`` that belong to ``pool``: those offering its flavor."""
    spec = pool.flavor.to_spec()
    return [n for n in nodes if offers(n, spec) and not is_headroom(n)]


def is_headroom(node: NodeCapacity) -> bool:
    return "-pool+" in node.node


def status(pool: NodePool, nodes: list[NodeCapacity]) -> PoolStatus:
    """Nodes ready and provisioning in ``pool`` among the cluster's ``nodes``."""
    own = pool_nodes(pool, nodes)
    provisioning = sum(1 for n in own if n.provisioning)
    return PoolStatus(len(own) - provisioning, provisioning)


def room_of(pool: NodePool, own: list[NodeCapacity]) -> int:
    """Nodes ``pool`` may still add beside ``own``, its nodes now (:func:`pool_nodes`): its ``max`` (or fewer, by
    the autoscaler's limit) less those, ready or provisioning."""
    return max(pool.effective_max_nodes - len(own), 0)


def with_headroom(cluster: Cluster, nodes: list[NodeCapacity]) -> list[NodeCapacity]:
    """``nodes`` and, per elastic pool of ``cluster``, a ``provisioning`` node for each that its ``max`` still
    allows: all units free, the labels of one of its on-demand nodes (else its flavor's selector)."""
    extra: list[NodeCapacity] = []
    for pool in pools_of(cluster):
        own = pool_nodes(pool, nodes)
        room = room_of(pool, own)
        if room <= 0:
            continue
        model = next((n for n in own if n.labels.get(SPOT_KEY) != SPOT_VALUE), None)
        spec = pool.flavor.to_spec()
        labels = dict(model.labels) if model else node_selector(spec)
        extra += [NodeCapacity(HEADROOM_NAME.format(flavor=pool.flavor.name, i=i), spec.resource_name,
                               pool.units_per_node, 0, labels, provisioning=True)
                  for i in range(1, room + 1)]
    return [*nodes, *extra]


def answer(pool: NodePool, nodes: list[NodeCapacity]) -> dict:
    """A pool as ``GET /api/v1/clusters/`` shows it (docs/api.md "Clusters")."""
    now = status(pool, nodes)
    median, tail = provisioning_seconds(pool.history_seconds or [])
    return {"flavor": pool.flavor.name, "min": pool.min_nodes, "max": pool.max_nodes, "mode": pool.mode,
            "nodes_ready": now.nodes_ready, "nodes_provisioning": now.nodes_provisioning,
            "unneeded_minutes": pool.unneeded_minutes, "autoscaler_limit": pool.autoscaler_limit,
            "provisioning_seconds": {"median": half_up(median), "tail": half_up(tail),
                                     "observed": len(pool.history_seconds or [])}}


def lock_pools(cluster: Cluster) -> None:
    """Take ``cluster``'s row lock, which every change of its pools takes first (inside the caller's transaction):
    two staff creating the same pool at once are one create and one change, never a unique-constraint error, and
    two changes of one pool check min ≤ max against each other's result."""
    list(Cluster.objects.select_for_update().filter(pk=cluster.pk).values_list("pk", flat=True))


def set_pool(cluster: Cluster, flavor: GpuFlavor, values: dict, actor) -> NodePool:
    """Create or change ``cluster``'s pool of ``flavor`` with ``values`` (model field names). Audited with what
    changed. A ``ValidationError`` writes nothing: the model's rules are checked here, for every caller (min above max
    with the pool's own values, a max above :data:`fleet.models.MAX_NODES`)."""
    with transaction.atomic():
        lock_pools(cluster)
        pool = NodePool.objects.filter(cluster=cluster, flavor=flavor).first()
        created = pool is None
        if created:
            pool = NodePool(cluster=cluster, flavor=flavor)
        changed = {k: v for k, v in values.items() if getattr(pool, k, None) != v}
        for field, value in changed.items():
            setattr(pool, field, value)
        # The fields' rules and min ≤ max, under the cluster's lock: two changes at once never leave the pool
        # inverted. Uniqueness is the lock's (the pool was looked for under it).
        pool.full_clean(validate_unique=False, validate_constraints=False)
        if created or changed:
            pool.save()
            audit(AuditEvent.Action.CLUSTER_CHANGED, actor=actor, target=f"cluster:{cluster.name}",
                  pool=flavor.name, change="pool created" if created else "pool changed", **changed)
    return pool


def change_pools(cluster: Cluster, changes: list[tuple[GpuFlavor, dict | None]], actor) -> None:
    """Staff's changes of ``cluster``'s pools, all or none (one transaction): per flavor, the values to set
    (:func:`set_pool`) or None to remove its pool (:func:`remove_pool`). Each change audited."""
    with transaction.atomic():
        for flavor, values in changes:
            if values is None:
                remove_pool(cluster, flavor, actor)
            else:
                set_pool(cluster, flavor, values, actor)


def remove_pool(cluster: Cluster, flavor: GpuFlavor, actor) -> bool:
    """Make ``cluster``'s nodes of ``flavor`` a fixed inventory again. Audited."""
    with transaction.atomic():
        lock_pools(cluster)
        removed, _ = NodePool.objects.filter(cluster=cluster, flavor=flavor).delete()
        if removed:
            audit(AuditEvent.Action.CLUSTER_CHANGED, actor=actor, target=f"cluster:{cluster.name}",
                  pool=flavor.name, change="pool removed")
    return bool(removed)


def record_provisioning_time(pool_id: int, seconds: float) -> None:
    """Add one observed provisioning time to a pool's history (under its row lock: two cycles never lose one)."""
    with transaction.atomic():
        pool = NodePool.objects.select_for_update().filter(pk=pool_id).first()
        if pool is not None:
            NodePool.objects.filter(pk=pool_id).update(history_seconds=pool.remembered(seconds))


def discover_limits(cluster: Cluster, backend: ClusterBackend) -> None:
    """Read the autoscaler's own pool limits (:meth:`ClusterBackend.node_pools`) of a cluster with elastic pools and
    keep them (:func:`record_autoscaler_limits`); a failure keeps what was known (the next period asks again)."""
    if not pools_of(cluster):
        return
    try:
        limits = backend.node_pools()
    except ClusterError as exc:
        logger.warning("could not read the node pools of %s (keeping their limits): %s", cluster.name, exc)
        return
    record_autoscaler_limits(cluster, limits)


def record_autoscaler_limits(cluster: Cluster, limits: list[NodePoolLimit]) -> None:
    """Keep, per pool of ``cluster``, the GPU limit of the autoscaler pools that build its nodes (their labels
    include its flavor's selector), summed; None where none does."""
    for pool in pools_of(cluster):
        spec = pool.flavor.to_spec()
        selector = node_selector(spec).items()
        matching = [lim for lim in limits if lim.resource_name == spec.resource_name and selector <= lim.labels.items()]
        limit = sum(lim.limit for lim in matching) if matching else None
        if pool.autoscaler_limit != limit:
            NodePool.objects.filter(pk=pool.pk).update(autoscaler_limit=limit)
            pool.autoscaler_limit = limit


def can_grow(pool: NodePool, nodes: list[NodeCapacity]) -> bool:
    """Whether work waiting on ``pool`` among the cluster's ``nodes`` waits for the pool to grow: it may still add a
    node, or one of its nodes is being provisioned (else it waits for other work to end, as on a fixed pool)."""
    own = pool_nodes(pool, nodes)
    return room_of(pool, own) > 0 or any(n.provisioning for n in own)
