"""Work waiting on an elastic pool's new nodes (docs/pools.md): how long they should still take, and the words.

A workload admitted onto an atomic pool whose ready nodes cannot hold it waits for its ProvisioningRequest
(reason code ``provisioning``, ``provisioning_since`` set). What it is told is said from the pool's own figures,
read each time (never stored twice): how many of the nodes it needs are ready now — from the pool's status,
:func:`cluster.pools.nodes_needed` over the free units of its ready nodes — and how long the rest should
still take, from the pool's history (:func:`cluster.pools.provisioning_seconds`: the median, the tail).
The start estimates of work queued behind it read the same :func:`seconds_left`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from cluster.backends.base import NodeCapacity
from cluster.capacity import offers, serves
from cluster.pools import new_nodes, nodes_needed, provisioning_seconds
from core.formatting import half_up
from fleet.models import Cluster, GpuFlavor, NodePool
from fleet.pools import is_headroom, pool_nodes, pools_of
from fleet.services import recorded_nodes
from workloads.estimates import Growth
from workloads.models import ReasonCode


def seconds_left(history: list[float], since: datetime | None, now: datetime, tail: bool = False) -> float | None:
    """How long a provisioning asked for at ``since`` should still take, by the pool's ``history``: what is left
    of its median (``tail``: of its tail, the bound); once past the median, what is left of the tail; past
    the tail too, unknown (None: the pool is slower than it has ever been seen to be). ``since`` None: not
    asked yet, the whole median (or tail)."""
    median, slow = provisioning_seconds(history)
    if since is None:
        return slow if tail else median
    spent = max((now - since).total_seconds(), 0.0)
    for expected in ((slow,) if tail else (median, slow)):
        if spent < expected:
            return expected - spent
    return None


def ready_at(history: list[float], since: datetime | None, now: datetime, tail: bool = False) -> datetime:
    """When a provisioning asked for at ``since`` should be done (:func:`seconds_left`), ``now`` at the
    earliest: once past its tail, at the next moment anything is known (now)."""
    left = seconds_left(history, since, now, tail)
    return now + timedelta(seconds=left or 0.0)


def waiting_words(pool: NodePool, nodes: list[NodeCapacity], pods: int, units_per_pod: int,
                  since: datetime | None, now: datetime) -> str:
    """The reason of a workload waiting on ``pool``'s new nodes: "pool h100-80gb on east growing: node 2 of 4
    ready, about 3 min".

    ``nodes``: the cluster's nodes as last read (:func:`fleet.services.recorded_nodes`; headroom and nodes
    not Ready yet are not ready); ``pods`` of ``units_per_pod`` units each: the workload's shape; ``since``:
    its ``provisioning_since``. Of the nodes its pods need (each node holds as many of them as fit), those
    that are ready are the ones its pods would fit on now, free ready nodes the pool already had included.
    """
    ready = [node.free for node in pool_nodes(pool, nodes) if not node.provisioning]
    wanted = new_nodes(pods, pool.units_per_node, units_per_pod)
    still = new_nodes(nodes_needed(ready, units_per_pod, pods), pool.units_per_node, units_per_pod)
    return growing_words(pool.flavor.name, pool.cluster.name, wanted - still, wanted,
                         seconds_left(pool.history_seconds or [], since, now))


def about_minutes(seconds: float) -> int:
    """A pool's provisioning time as its words say it, "about N min": whole minutes, a half up (2 min 30 s is
    "about 3 min", as the start estimate's own minutes read), at least 1."""
    return max(1, half_up(seconds / 60))


def growing_words(flavor: str, cluster: str, ready: int, wanted: int, seconds: float | None) -> str:
    """A workload's reason while its pool grows: "pool h100-80gb on east growing: node 2 of 4 ready, about 3 min"."""
    words = f"pool {flavor} on {cluster} growing: node {min(ready, wanted)} of {wanted} ready"
    if seconds is not None:
        words += f", about {about_minutes(seconds)} min"
    return words


class Pools:
    """The elastic pools of the flavors a queue waits for, read once for a forecast (one query when there are
    none; else the clusters with their pools, the nodes as last recorded): what :func:`workloads.estimates.simulate` is fed as each
    flavor's :class:`~workloads.estimates.Growth`, and when admitted work waiting on new nodes should start.

    A flavor no cluster has a pool of gets no growth (a fixed inventory, estimated as before). Of one that has, on the
    clusters that take new work (:attr:`fleet.models.Cluster.placeable`, placement's rule: a draining or lost
    cluster's free units and pools start nothing new):
    the units free on the ready on-demand nodes of every cluster offering it (spot work does not wait for a pool), the room its pools may still grow into
    (:func:`fleet.pools.with_headroom`'s nodes), the units of nodes being provisioned that the work waiting on
    them leaves free, and the pool that grows first — of those with room, the quickest by its median.
    """

    def __init__(self, flavors: dict[int, GpuFlavor]):
        self.pools: dict[tuple[int, int], NodePool] = {}
        self.free: dict[int, int] = dict.fromkeys(flavors, 0)
        self.room: dict[int, int] = dict.fromkeys(flavors, 0)
        self.coming: dict[int, int] = dict.fromkeys(flavors, 0)
        self.growing: dict[int, list[NodePool]] = {}
        self.placing: set[int] = set()  # the clusters counted: those taking new work
        room_of: dict[int, int] = {}  # pool pk → units it may still add
        # One query when no pool offers these flavors (then nothing more: fixed inventories, as before).
        if not NodePool.objects.filter(flavor_id__in=list(flavors)).exists():
            return
        for cluster in Cluster.objects.prefetch_related("pools__flavor"):
            elastic = {pool.flavor_id: pool for pool in pools_of(cluster) if pool.flavor_id in flavors}
            if not cluster.placeable:
                # Work already there waiting on its nodes still gets them (its pool, for start_of); nothing else.
                self.pools.update({(cluster.pk, flavor_id): pool for flavor_id, pool in elastic.items()})
                continue
            self.placing.add(cluster.pk)
            nodes = recorded_nodes(cluster)  # with the room its pools may still grow into, as headroom nodes
            for flavor_id, flavor in flavors.items():
                own = [node for node in nodes if offers(node, flavor.to_spec())]
                # On-demand nodes only: what a pool adds is on-demand, and a spot node's units run no other work.
                self.free[flavor_id] += sum(node.free for node in own
                                            if not node.provisioning and serves(node, flavor.to_spec(), False))
                pool = elastic.get(flavor_id)
                if pool is None:
                    continue
                self.pools[(cluster.pk, flavor_id)] = pool
                room_of[pool.pk] = sum(node.free for node in own if is_headroom(node))
                self.room[flavor_id] += room_of[pool.pk]
                self.coming[flavor_id] += sum(node.free for node in own if node.provisioning and not is_headroom(node))
                self.growing.setdefault(flavor_id, []).append(pool)
        for growing in self.growing.values():
            # The pool that grows first: of those with room, the quickest (one at its max adds no node).
            growing.sort(key=lambda pool: (room_of[pool.pk] <= 0, provisioning_seconds(pool.history_seconds or [])[0]))

    def pool_of(self, workload) -> NodePool | None:
        """The pool ``workload`` (placed on a cluster) waits on, or None."""
        return self.pools.get((getattr(workload, "cluster_id", None), getattr(workload, "flavor_id", None)))

    def waits_on_nodes(self, workload) -> bool:
        """Admitted, not started, waiting on its pool's new nodes (reason code ``provisioning``)."""
        return (getattr(workload, "reason_code", "") == ReasonCode.PROVISIONING and workload.started_at is None
                and self.pool_of(workload) is not None)

    def start_of(self, workload, now: datetime, tail: bool = False) -> datetime | None:
        """When admitted work waiting on its pool's new nodes should start (None: it does not wait on them)."""
        if not self.waits_on_nodes(workload):
            return None
        return ready_at(self.pool_of(workload).history_seconds or [], workload.provisioning_since, now, tail)

    def first(self, flavor_id: int) -> NodePool | None:
        """The pool of ``flavor_id`` that grows first (None: a fixed inventory)."""
        return next(iter(self.growing.get(flavor_id, [])), None)

    def growth(self, waiting: list[tuple[object, int]], now: datetime, tail: bool = False) -> dict[int, Growth]:
        """``{flavor id: Growth}`` for the simulation; ``waiting``: the admitted work waiting on new nodes and the
        units it holds (they are on the nodes being provisioned; what those leave comes when the last of them
        should be ready)."""
        result = {}
        for flavor_id, pool in ((f, self.first(f)) for f in self.growing):
            # The nodes coming on a cluster taking no new work are not counted, nor is the work waiting on them.
            waiting_here = [(w, units) for w, units in waiting
                            if w.flavor_id == flavor_id and getattr(w, "cluster_id", None) in self.placing]
            waiters = [w for w, _units in waiting_here]
            spare = max(self.coming[flavor_id] - sum(units for _w, units in waiting_here), 0)
            coming = ()
            if spare:
                when = max((self.start_of(w, now, tail) for w in waiters), default=None)
                coming = ((when or now + timedelta(seconds=seconds_left(pool.history_seconds or [], None, now, tail))),
                          spare),
            takes = seconds_left(pool.history_seconds or [], None, now, tail)
            result[flavor_id] = Growth(self.free[flavor_id], self.room[flavor_id], timedelta(seconds=takes), coming,
                                       str(pool))
        return result

    def words(self, flavor_id: int, new_units: int) -> str:
        """"after pool h100-80gb on east grows by 2 nodes (about 4 min)" for work that waits on ``new_units``
        of new nodes ("" when it waits on none)."""
        pool = self.first(flavor_id)
        if pool is None or new_units <= 0:
            return ""
        count = max(-(-new_units // max(pool.units_per_node, 1)), 1)
        minutes = about_minutes(provisioning_seconds(pool.history_seconds or [])[0])
        return f"after pool {pool} grows by {count} node{'s' if count > 1 else ''} (about {minutes} min)"
