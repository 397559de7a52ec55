"""The in-memory cluster of one tick: the rows it loads, the changes it collects, the write-back.

A :class:`World` is one cluster's: it loads every live object and pod of that cluster (each
query filtered on the ``cluster`` column, which leads the indexes it uses) in a few queries (plain records, see
:mod:`sandbox.bulk`); the controllers of :mod:`sandbox.controllers` change those records and
report what they changed (``touch``/``dirty``/``event``), and :meth:`World.save` writes back
only that, with one ``executemany`` per table, so a tick over 10,000 workloads stays cheap.
:mod:`sandbox.tick` runs the steps in order.

Pod lifecycle stages (``SimPod.stage``; events are emitted once when a stage is reached):
0 created, 1 bound (Scheduled, Pulling), 2 started (Pulled, Created, Started) or image pull
failed, 3 ready (servers past their readiness delay), 4 terminated, 5 crash-looping.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from cluster.backends.base import ClusterAddress, DemandReader, EndpointDemand
from sandbox import pools as elastic
from sandbox.bulk import Record, fast_insert, fast_update
from sandbox.bulk import load as load_records
from sandbox.bulk import new as new_record
from sandbox.inventory import Node, fixed_nodes
from sandbox.models import SimEvent, SimLoad, SimNode, SimNodeOutage, SimObject, SimPod
from sandbox.timestamps import parse_rfc3339

STAGE_CREATED, STAGE_BOUND, STAGE_STARTED, STAGE_READY, STAGE_DONE, STAGE_CRASHING = 0, 1, 2, 3, 4, 5
#: The object kinds a controller of the tick acts on; the others are only stored and observed.
#: The kinds whose controller owns pods.
OWNER_KINDS = ("Job", "PyTorchJob", "TrainJob", "Deployment")
CONTROLLED = (*OWNER_KINDS, "ScaledObject", "ResourceQuota", "ProvisioningRequest")
BATCH = 500
#: The tick works on plain records of these tables (see sandbox.bulk), not model instances.
ObjRow = Record
PodRow = Record
OBJECT_COLUMNS = ("id", "resource_kind", "namespace", "name", "workload", "team", "uid", "resource_version", "status", "memo",
                  "replicas", "done", "generation", "delete_at")
#: Plans only change when an object is applied (which bumps its resourceVersion), so each
#: process keeps them decoded: (uid, resourceVersion) -> plan. Long-lived worker/beat
#: processes then read only the small status/memo columns per tick.
PLANS: dict[tuple[str, int], dict] = {}
_PLAN_CACHE_MAX = 200_000


def add_requests(usage: dict[str, int], plan: dict, sign: int) -> None:
    """Add (``sign`` +1) or take away (-1) one pod of ``plan`` in a tally of pods and requests."""
    usage["pods"] += sign
    for resource, units in plan["req"].items():
        usage[resource] += sign * units


class World:
    """The state of one tick: rows loaded once, changes collected, written back at the end."""

    def __init__(self, now: datetime, cluster: str, demand_reader: DemandReader | None = None) -> None:
        self.now = now
        self.cluster = cluster
        #: What the gateways see of endpoints (the backend's ``demand``), and its answer, read once a tick when
        #: first needed (sandbox.controllers.scaledobject).
        self.demand_reader = demand_reader
        self.demand: dict[ClusterAddress, EndpointDemand] | None = None
        #: The nodes that run pods: the fixed pools' (less reclaimed ones) and the elastic pools' ready ones
        #: (:meth:`refresh_nodes`).
        self.nodes: tuple[Node, ...] = fixed_nodes(cluster)
        self._fixed = self.nodes
        #: The shared nodes' device plugin sharing (sandbox.sharing), by node name.
        self.sharing = {node.name: node.sharing for node in self.nodes if node.sharing is not None}
        #: The elastic pools (sandbox.pools) by prefix, and their nodes that exist by name (ORM rows: a handful);
        #: the autoscaler and the ProvisioningRequest controller change these and list them in ``pool_changes``.
        self.pools: dict[str, elastic.LivePool] = {}
        self.pool_nodes: dict[str, SimNode] = {}
        self.pool_changes: set[str] = set()
        self.pool_removed: set[str] = set()
        self.down: dict[str, datetime] = {}
        #: Pods whose only change is a new progress checkpoint (a time-sliced GPU): written
        #: without drawing their owner's controller's attention.
        self.progressed: list[PodRow] = []
        self.events: list[Record] = []
        self.new_pods: list[PodRow] = []
        self.changed_pods: dict[int, PodRow] = {}
        self.deleted_pods: set[int] = set()
        self.reset_owners: set[int] = set()
        self.changed_objects: dict[int, ObjRow] = {}
        self.usage: dict[str, dict[str, int]] | None = None
        #: Owners whose pods changed this tick; the others are skipped when nothing is due.
        self.attention: set[int] = set()
        #: The cluster's real engines by (namespace, pod), read once a tick when first needed (sandbox.engines).
        self.engines: dict | None = None

    # -- bookkeeping ------------------------------------------------------------------------

    def event(self, obj: ObjRow | PodRow, ref: str, type_: str, reason: str, message: str,
              at: datetime | None = None) -> None:
        self.events.append(new_record(SimEvent, cluster=self.cluster, namespace=obj.namespace, workload=obj.workload,
                                      object=ref, type=type_, reason=reason, message=message, time=at or self.now))

    def touch(self, pod: PodRow) -> None:
        self.attention.add(pod.owner_id)
        if pod.pk is not None:
            self.changed_pods[pod.pk] = pod

    def dirty(self, obj: ObjRow) -> None:
        self.changed_objects[obj.pk] = obj

    def set_status(self, obj: ObjRow, status: dict) -> None:
        if status != obj.status:
            obj.status = status
            self.dirty(obj)

    def plan_of(self, pod: PodRow) -> dict:
        return self.owners[pod.owner_id].plan["pods"][pod.role]

    def quiet(self, owner: ObjRow, pods: list[PodRow]) -> bool:
        """Nothing can have changed: pods exist and are untouched, and no deadline is due.

        Quiet workloads cost almost nothing: a controller returns before even decoding their status.
        """
        if owner.pk in self.attention or not pods:
            return False
        deadline = owner.plan.get("deadline")
        if deadline is None:
            return True
        return "start" in owner.memo and self.now < parse_rfc3339(owner.memo["start"]) + timedelta(seconds=int(deadline))

    # -- load -----------------------------------------------------------------------------------

    def load(self) -> None:
        #: Reclaimed nodes (sandbox reclaim-node) and since when: their pods stop, nothing lands there.
        self.down = dict(SimNodeOutage.objects.filter(cluster=self.cluster).values_list("node", "since"))
        if self.down:
            self._fixed = tuple(node for node in self._fixed if node.name not in self.down)
        self.pools = elastic.pools(self.cluster, self.now)
        if self.pools:
            self.pool_nodes = {row.node: row for row in SimNode.objects.filter(cluster=self.cluster)
                               if row.pool in self.pools}
        self.refresh_nodes()
        # The manifest column (the biggest) is never read here: plans carry what the tick needs.
        # In creation order: controllers then create pods first-come first-served (within quota and
        # capacity), whatever order the database hands back rows it has updated.
        live = SimObject.objects.filter(cluster=self.cluster, done=False, resource_kind__in=CONTROLLED).order_by("pk")
        objects = load_records(live, OBJECT_COLUMNS, lazy=("status", "memo"))
        missing = [o.pk for o in objects if (o.uid, o.resource_version) not in PLANS]
        if missing:
            if len(PLANS) > _PLAN_CACHE_MAX:
                PLANS.clear()
            found = (live.values_list("uid", "resource_version", "plan") if len(missing) > 500
                     else SimObject.objects.filter(pk__in=missing).values_list("uid", "resource_version", "plan"))
            for uid, version, plan in found:
                PLANS[(uid, version)] = plan
        for o in objects:
            o.plan = PLANS.get((o.uid, o.resource_version))
        # An object re-applied between the two reads is picked up by the next tick.
        objects = [o for o in objects if o.plan is not None]
        self.owners = {o.pk: o for o in objects if o.resource_kind in OWNER_KINDS}
        self.requests = [o for o in objects if o.resource_kind == "ProvisioningRequest"]
        self.scaled = {(o.namespace, o.plan.get("target")): o for o in objects if o.resource_kind == "ScaledObject"}
        self.quotas: dict[str, list[ObjRow]] = defaultdict(list)
        for o in objects:
            if o.resource_kind == "ResourceQuota":
                self.quotas[o.namespace].append(o)
        self.loads = {(ns, wl): v for ns, wl, v in SimLoad.objects.filter(cluster=self.cluster).values_list(
            "namespace", "workload", "value")}
        self.pods_by_owner: dict[int, list[PodRow]] = defaultdict(list)
        pods = SimPod.objects.filter(cluster=self.cluster, active=True)
        for pod in load_records(pods, lazy=("annotations",)):  # not read here
            if pod.owner_id in self.owners:
                self.pods_by_owner[pod.owner_id].append(pod)
        self.finished: dict[int, list[PodRow]] = defaultdict(list)  # pods that ended this tick

    def refresh_nodes(self) -> None:
        """The nodes that run pods now: the fixed ones and the elastic pools' ready ones (never a provisioning one)."""
        ready = [self.pools[row.pool].pool.node(elastic.pool_index(row.node))
                 for row in sorted(self.pool_nodes.values(), key=lambda r: (r.pool, elastic.pool_index(r.node)))
                 if row.state == SimNode.READY and row.node not in self.down]
        self.nodes = (*self._fixed, *ready)

    def pool_node_changed(self, row: SimNode) -> None:
        self.pool_changes.add(row.node)

    def remove_pool_node(self, name: str) -> None:
        self.pool_nodes.pop(name, None)
        self.pool_removed.add(name)
        self.pool_changes.discard(name)

    def _save_pool_nodes(self) -> None:
        """The elastic pools' node rows (a handful; only this tick writes them, under the clock row's lock)."""
        if self.pool_removed:
            SimNode.objects.filter(cluster=self.cluster, node__in=self.pool_removed).delete()
        for name in self.pool_changes:
            row = self.pool_nodes[name]
            row.save()

    # -- save -----------------------------------------------------------------------------------

    def save(self) -> dict[str, int]:
        self._save_pool_nodes()
        if self.reset_owners:
            # Restarted gangs: their old pods go (the new ones reuse the names), before the inserts.
            SimPod.objects.filter(owner_id__in=self.reset_owners).delete()
            for pk in list(self.changed_pods):
                if self.changed_pods[pk].owner_id in self.reset_owners:
                    del self.changed_pods[pk]
        if self.deleted_pods:
            ids = list(self.deleted_pods)
            for i in range(0, len(ids), BATCH):
                SimPod.objects.filter(pk__in=ids[i:i + BATCH]).delete()
        fast_insert(SimPod, self.new_pods)
        fast_update(SimPod, list(self.changed_pods.values()),
                    ["node", "phase", "stage", "active", "scheduled_at", "started_at", "ready_at", "finished_at", "reason",
                     "exit_code", "message", "disruption", "gpu", "progress", "progress_at", "pace"])
        fast_update(SimPod, [pod for pod in self.progressed if pod.pk is not None and pod.pk not in self.changed_pods
                             and pod.pk not in self.deleted_pods], ["progress", "progress_at", "pace"])
        fast_update(SimObject, list(self.changed_objects.values()), ["status", "memo", "replicas", "done"])
        fast_insert(SimEvent, self.events)
        return {"pods_created": len(self.new_pods), "pods_changed": len(self.changed_pods),
                "objects_changed": len(self.changed_objects), "events": len(self.events)}
