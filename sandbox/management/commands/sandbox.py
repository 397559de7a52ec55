"""``manage.py sandbox status|tick|load|reset|…``: look at and drive the simulated clusters.

The inventory may hold several clusters (``sandbox/inventory.yaml``); ``--cluster <name>`` picks
one. Without it, ``status``, ``tick`` and ``reset`` act on every cluster (each on its own
clock), ``load`` on the first one, and the node verbs on the cluster that has the node.

* ``status`` — per cluster: nodes with GPUs used/free per resource, the shared GPUs as the simulated
  DCGM exporter sees them (pods, utilisation, memory), then pods that are not finished;
* ``tick [--at RFC3339] [--seconds N --step S]`` — advance the clock (once, or in steps);
* ``load <namespace>/<workload> <value|auto>`` — pin an endpoint's synthetic load (``auto``:
  back to the demo curve);
* ``reset`` — an empty cluster;
* ``reclaim-node <node>`` — a spot interruption: the node goes away as a cloud provider takes it
  back; its pods stop with the condition ``DisruptionTarget`` (reason ``TerminationByKubelet``,
  the kubelet's graceful node shutdown), a Job's stay as Failed attempts, a Deployment's are
  replaced elsewhere; nothing is scheduled there until ``restore-node <node>`` brings it back;
* ``overheat-node <node> <degrees>`` — the node's GPUs report that many °C more than their load
  makes (a failed fan): the hot-GPU alert's case; ``cool-node <node>`` ends it;
* ``pool <cluster> <pool> [--min N --max N --mode atomic|any --median S --tail S --failure P --revoke P
  --unneeded M --limit-units N|none]`` — change an elastic pool live (the database's settings over the
  inventory's; ``sandbox reset`` returns it to them) and print it: its settings and its nodes now;
* ``silence <cluster>`` — the cluster stops answering (a network partition): Slipway's every
  call to it fails with ``Transient`` while it keeps running its work; ``answer <cluster>``
  ends that.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from cluster.backends.base import ClusterAddress
from cluster.errors import NotFound
from core.text import whole_number
from sandbox import faults, inventory
from sandbox import pools as elastic
from sandbox.backend import POD_OWNER_KINDS, SandboxBackend
from sandbox.models import SimNode, SimObject, SimPod

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

#: Bounds of the simulated clock: far from the calendar's ends (the clock subtracts event
#: lifetimes and adds durations) and storable by every database.
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC)
#: At most a year per `tick --seconds`...
MAX_SECONDS = 365 * 24 * 3600
#: ...and at most this many ticks per command (a year at --step 1 would be 31 million).
MAX_TICKS = 100_000
#: A Kubernetes object name: a DNS-1123 label.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _whole(raw: str) -> int:
    units = whole_number(raw, 9)  # a limit of more than 999,999,999 units is no limit the pool could reach
    if units is None:
        raise CommandError(f"--limit-units must be a whole number of units (up to 999999999) or 'none', "
                           f"got {raw[:40]!r}")
    return units


#: ``sandbox pool``'s options: flag, type, help; and each one's :class:`sandbox.inventory.PoolSettings` field.
POOL_OPTIONS = (
    ("--min", int, "nodes it keeps even when idle"),
    ("--max", int, "the most nodes it may have"),
    ("--mode", str, "atomic (ProvisioningRequests: all nodes or none) or any (node by node for pending pods)"),
    ("--median", float, "median provisioning delay of a node, seconds"),
    ("--tail", float, "tail provisioning delay (the 0.99 quantile, and the most a node takes), seconds"),
    ("--failure", float, "probability that a scale-up fails (0-1)"),
    ("--revoke", float, "probability that provisioned capacity is taken back before use (0-1)"),
    ("--unneeded", int, "minutes a node stands idle before it is removed"),
    ("--limit-units", str, "the most GPU units all its nodes may have (a Karpenter limit), or 'none'"),
)
POOL_FIELDS = {"min": "min_nodes", "max": "max_nodes", "mode": "mode", "median": "delay_median_seconds",
               "tail": "delay_tail_seconds", "failure": "failure_probability", "revoke": "revoke_probability",
               "unneeded": "unneeded_minutes", "limit_units": "limit_units"}


def _parse_time(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise CommandError(f"--at must be an RFC 3339 time, got {value!r}") from exc
    try:
        parsed = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:30+01:00 is before year 1 in UTC
        parsed = EARLIEST - timedelta(days=1)
    if not EARLIEST <= parsed < LATEST:
        raise CommandError(f"--at must be between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d}, got {value!r}")
    return parsed


def _parse_load(text: str, raw: str) -> tuple[ClusterAddress, float | None]:
    """``<namespace>/<workload>`` and a finite load (or ``auto``), or a CommandError."""
    namespace, sep, workload = text.partition("/")
    if not sep or not _NAME.fullmatch(namespace) or not _NAME.fullmatch(workload):
        raise CommandError(f"load needs <namespace>/<workload>, both Kubernetes names, got {text!r}")
    if raw == "auto":
        return ClusterAddress(namespace, workload), None
    try:
        value = float(raw)
    except ValueError as exc:
        raise CommandError(f"load value must be a number or 'auto', got {raw!r}") from exc
    if not math.isfinite(value) or value < 0:
        raise CommandError(f"load value must be a finite number of at least 0, got {raw!r}")
    return ClusterAddress(namespace, workload), value


def _backend(name: str | None) -> SandboxBackend:
    """The backend of the cluster called ``name`` (None: the first), or a CommandError naming the known ones."""
    try:
        return SandboxBackend(name)
    except inventory.UnknownCluster as exc:
        raise CommandError(str(exc)) from None


def _backends(name: str | None) -> list[SandboxBackend]:
    """The cluster called ``name``, or every cluster of the inventory when None."""
    if name is not None:
        return [_backend(name)]
    return [SandboxBackend(cluster.name) for cluster in inventory.clusters()]


def _node_backend(node: str, name: str | None) -> SandboxBackend:
    """The backend of the cluster that has ``node``: ``--cluster``'s, or the one cluster listing it."""
    if name is not None:
        backend = _backend(name)
        if node not in {n.name for n in inventory.nodes(backend.cluster)}:
            raise CommandError(f"no node {node!r} in cluster {backend.cluster}")
        return backend
    having = [cluster.name for cluster in inventory.clusters()
              if node in {n.name for n in inventory.nodes(cluster.name)}]
    if not having:
        raise CommandError(f"no node {node!r} in the inventory")
    if len(having) > 1:
        raise CommandError(f"node {node!r} is in clusters {', '.join(having)}: say which with --cluster")
    return SandboxBackend(having[0])


class Command(BaseCommand):
    help = ("Inspect and drive the sandbox clusters: status, tick, load, reset, reclaim-node, restore-node, "
            "overheat-node, cool-node, pool, silence, answer.")

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        status = sub.add_parser("status", help="nodes with GPUs used/free, and live pods")
        tick = sub.add_parser("tick", help="advance the simulated clock")
        tick.add_argument("--at", help="tick at this RFC 3339 time (default: now)")
        tick.add_argument("--seconds", type=int, default=0, help="advance this many seconds past the last tick")
        tick.add_argument("--step", type=int, default=5, help="step size for --seconds")
        load = sub.add_parser("load", help="set an autoscaled workload's synthetic load")
        load.add_argument("address", help="<namespace>/<workload>")
        load.add_argument("value", help="load in the trigger's metric units, or 'auto'")
        reset = sub.add_parser("reset", help="delete every sandbox object, pod and event")
        reclaim = sub.add_parser("reclaim-node", help="take a (spot) node away, as its cloud provider does")
        reclaim.add_argument("node", help="a node of the inventory (see status)")
        restore = sub.add_parser("restore-node", help="bring a reclaimed node back")
        restore.add_argument("node")
        overheat = sub.add_parser("overheat-node", help="make a node's GPUs run hotter than their load (a failed fan)")
        overheat.add_argument("node")
        overheat.add_argument("degrees", type=float, help="°C added to their temperature (more than 0, at most 80)")
        cool = sub.add_parser("cool-node", help="end overheat-node: the node's GPUs follow their load again")
        cool.add_argument("node")
        for verb, default in ((status, "every cluster"), (tick, "every cluster"), (reset, "every cluster"),
                              (load, "the first"), (reclaim, "the one that has the node"),
                              (restore, "the one that has the node"), (overheat, "the one that has the node"),
                              (cool, "the one that has the node")):
            verb.add_argument("--cluster", help=f"a cluster of the inventory (default: {default})")
        pool = sub.add_parser("pool", help="show an elastic pool, or change it live")
        pool.add_argument("cluster", help="a cluster of the inventory")
        pool.add_argument("pool", help="an elastic pool of that cluster (its node prefix)")
        for flag, kind, what in POOL_OPTIONS:
            pool.add_argument(flag, type=kind, help=what)
        silence = sub.add_parser("silence", help="make a cluster stop answering (a network partition); it runs on")
        silence.add_argument("cluster", help="a cluster of the inventory")
        answer = sub.add_parser("answer", help="make a silenced cluster answer again")
        answer.add_argument("cluster", help="a cluster of the inventory")

    def handle(self, *args: object, **options: object) -> None:
        action = options["action"]
        name = options.get("cluster")
        if action == "status":
            for i, backend in enumerate(_backends(name)):
                if i:
                    self.stdout.write("")
                self._status(backend)
        elif action == "tick":
            for backend in _backends(name):
                self._tick(backend, options)
        elif action == "load":
            raw = str(options["value"])
            address, value = _parse_load(str(options["address"]), raw)
            backend = _backend(name)
            backend.set_load(address, value)
            self.stdout.write(f"load of {address.namespace}/{address.object_name} set to {raw} "
                              f"(cluster {backend.cluster})")
        elif action == "reset":
            for backend in _backends(name):
                backend.reset()
                self.stdout.write(f"sandbox cluster {backend.cluster} reset")
        elif action == "reclaim-node":
            node = str(options["node"])
            self._reclaim(_node_backend(node, name), node)
        elif action == "restore-node":
            node = str(options["node"])
            restored = faults.restore_node(_node_backend(node, name), node)
            self.stdout.write(f"node {node} restored" if restored else f"node {node} was not reclaimed")
        elif action == "overheat-node":
            node, degrees = str(options["node"]), float(options["degrees"])
            try:
                faults.overheat_node(_node_backend(node, name), node, degrees)
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(f"node {node}'s GPUs run {degrees:g} °C hotter than their load makes them "
                              f"('sandbox cool-node {node}' ends it)")
        elif action == "cool-node":
            node = str(options["node"])
            cooled = faults.cool_node(_node_backend(node, name), node)
            self.stdout.write(f"node {node} cooled" if cooled else f"node {node} was not overheated")
        elif action == "pool":
            self._pool(_backend(str(options["cluster"])).cluster, str(options["pool"]), options)
        elif action == "silence":
            backend = _backend(name)
            began = faults.silence(backend)
            since = f"{backend.silent_since():{TIME_FORMAT}}"
            self.stdout.write(f"cluster {backend.cluster} does not answer since {since}: Slipway's calls fail, "
                              f"its work runs on ('sandbox answer {backend.cluster}' ends it)" if began
                              else f"cluster {backend.cluster} was already silent (since {since})")
        elif action == "answer":
            backend = _backend(name)
            answered = faults.answer(backend)
            self.stdout.write(f"cluster {backend.cluster} answers again" if answered
                              else f"cluster {backend.cluster} was not silent")

    def _pool(self, cluster: str, prefix: str, options: dict) -> None:
        values = {field: options[dest] for dest, field in POOL_FIELDS.items() if options.get(dest) is not None}
        if "limit_units" in values:
            values["limit_units"] = None if values["limit_units"] == "none" else _whole(values["limit_units"])
        now = timezone.now()
        try:
            live = elastic.change(cluster, prefix, values, now) if values else elastic.pools(cluster, now).get(prefix)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if live is None:
            known = ", ".join(elastic.pools(cluster, now)) or "none"
            raise CommandError(f"cluster {cluster} has no elastic pool {prefix!r} (its elastic pools: {known})")
        s = live.settings
        limit = "none" if s.limit_units is None else f"{s.limit_units} units"
        self.stdout.write(f"pool {prefix} on {cluster}{' changed' if values else ''}: min {s.min_nodes}, max "
                          f"{s.max_nodes}, mode {s.mode}, provisioning delay median {s.delay_median_seconds:g}s tail "
                          f"{s.delay_tail_seconds:g}s, failure {s.failure_probability:g}, revoke "
                          f"{s.revoke_probability:g}, unneeded {s.unneeded_minutes} min, limit {limit}")
        rows = [row for _, row in elastic.existing(cluster, now) if row.pool == prefix]
        for row in rows:
            state = (f"ready since {row.ready_at:{TIME_FORMAT}}" if row.state == SimNode.READY
                     else f"provisioning, ready at {row.ready_at:{TIME_FORMAT}}")
            booked = f", booked by {row.request}" if row.request else ""
            self.stdout.write(f"  {row.node:<18} {state}{booked}")
        if not rows:
            self.stdout.write("  no nodes now")

    def _reclaim(self, backend: SandboxBackend, node: str) -> None:
        # The clock may be ahead of the wall clock (tick --seconds): the shutdown happens after both.
        now = max(timezone.now(), backend.clock())
        try:
            pods = faults.reclaim_node(backend, node, now=now)
        except NotFound as exc:
            raise CommandError(f"no node {node!r} in cluster {backend.cluster}") from exc
        backend.tick(now + timedelta(seconds=1))  # the shutdown: its pods stop
        self.stdout.write(f"node {node} reclaimed: {pods} pod(s) stopped with DisruptionTarget (TerminationByKubelet)")

    def _tick(self, backend: SandboxBackend, options: dict) -> None:
        if options.get("seconds"):
            if not 0 < int(options["seconds"]) <= MAX_SECONDS:
                raise CommandError(f"--seconds must be between 1 and {MAX_SECONDS} (a year)")
            start = backend.clock()
            step = max(int(options.get("step") or 5), 1)
            if int(options["seconds"]) // step > MAX_TICKS:  # each step is a full tick
                raise CommandError(f"--seconds / --step must be at most {MAX_TICKS} ticks; use a larger --step")
            for offset in range(step, int(options["seconds"]) + 1, step):
                backend.tick(start + timedelta(seconds=offset))
            self.stdout.write(f"{backend.cluster} advanced to {backend.clock().isoformat()}")
            return
        now = _parse_time(str(options["at"])) if options.get("at") else timezone.now()
        summary = backend.tick(now)
        self.stdout.write(f"{backend.cluster} tick at {now.isoformat()}: {summary or 'nothing to do (already there)'}")

    def _status(self, backend: SandboxBackend) -> None:
        capacity = backend.node_usage()
        region = inventory.cluster(backend.cluster).region
        self.stdout.write(f"Sandbox cluster {backend.cluster}{f' ({region})' if region else ''} at "
                          f"{backend.clock().strftime(TIME_FORMAT)}")
        silent = backend.silent_since()
        if silent is not None:
            self.stdout.write(f"silent since {silent.strftime(TIME_FORMAT)}: Slipway's calls fail, its work runs on")
        self.stdout.write(f"{'NODE':<18} {'PRODUCT':<24} {'RESOURCE':<24} {'USED':>5} {'FREE':>5} {'TOTAL':>5}")
        labels = {node.name: node.labels for node in inventory.nodes(backend.cluster)}
        for row in capacity:
            product = "(provisioning)" if row.provisioning else labels.get(row.node, {}).get("nvidia.com/gpu.product", "-")
            self.stdout.write(f"{row.node:<18} {product:<24} {row.resource_name:<24} {row.in_use:>5} {row.free:>5} "
                              f"{row.allocatable:>5}")
        for node, since in sorted(backend.nodes_down().items()):
            self.stdout.write(f"{node:<18} reclaimed since {since.strftime(TIME_FORMAT)}")
        totals: Counter[str] = Counter()
        used: Counter[str] = Counter()
        for row in capacity:
            totals[row.resource_name] += row.allocatable
            used[row.resource_name] += row.in_use
        if silent is None and any(node.sharing for node in inventory.nodes(backend.cluster)):
            self.stdout.write(f"\n{'SHARED GPU':<18} {'SHARING':<18} {'PODS':>5} {'UTIL':>5} {'MEMORY (GiB)':>13}")
            for gpu in backend.gpu_devices(backend.observe(POD_OWNER_KINDS)):
                self.stdout.write(f"{gpu.node + '/' + str(gpu.gpu):<18} {gpu.sharing + ' x' + str(gpu.replicas):<18} "
                                  f"{len(gpu.pods):>5} {gpu.utilization:>4}% "
                                  f"{gpu.memory_used_mib / 1024:>6.1f}/{gpu.memory_mib / 1024:<6.1f}")
        self.stdout.write("")
        for resource in sorted(totals):
            self.stdout.write(f"total {resource}: {used[resource]} used, {totals[resource] - used[resource]} free "
                              f"of {totals[resource]}")
        pods = SimPod.objects.filter(cluster=backend.cluster, active=True).order_by("namespace", "name")
        objects = SimObject.objects.filter(cluster=backend.cluster).exclude(
            resource_kind__in=("Namespace", "LimitRange", "NetworkPolicy")).count()
        self.stdout.write(f"\n{objects} workload objects, {pods.count()} live pods")
        for pod in pods[:50]:
            where = pod.node or f"unscheduled: {pod.message}"
            self.stdout.write(f"  {pod.namespace}/{pod.name:<40} {pod.phase:<10} {where}")
