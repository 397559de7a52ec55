"""``manage.py sandbox status|tick|load|reset``: look at and drive the simulated cluster.

* ``status`` — nodes with GPUs used/free per resource, then pods that are not finished;
* ``tick [--at RFC3339] [--seconds N --step S]`` — advance the clock (once, or in steps);
* ``load <namespace>/<workload> <value|auto>`` — pin an endpoint's synthetic load (``auto``:
  back to the demo curve);
* ``reset`` — an empty cluster;
* ``reclaim-node <node>`` — a spot interruption: the node goes away as a cloud provider takes it
  back; its pods stop with the condition ``DisruptionTarget`` (reason ``TerminationByKubelet``,
  the kubelet's graceful node shutdown), a Job's stay as Failed attempts, a Deployment's are
  replaced elsewhere; nothing is scheduled there until ``restore-node <node>`` brings it back.
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
from sandbox import inventory
from sandbox.backend import SandboxBackend
from sandbox.models import SimObject, SimPod

#: Bounds of the simulated clock: far from the calendar's ends (the clock subtracts event
#: lifetimes and adds durations) and storable by every database.
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC)
#: At most a year per `tick --seconds`...
MAX_SECONDS = 365 * 24 * 3600
#: ...and at most this many ticks per command (a year at --step 1 would be 31 million).
MAX_TICKS = 100_000
#: A Kubernetes object name: a DNS-1123 label.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


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


class Command(BaseCommand):
    help = "Inspect and drive the sandbox cluster: status, tick, load, reset, reclaim-node, restore-node."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("status", help="nodes with GPUs used/free, and live pods")
        tick = sub.add_parser("tick", help="advance the simulated clock")
        tick.add_argument("--at", help="tick at this RFC 3339 time (default: now)")
        tick.add_argument("--seconds", type=int, default=0, help="advance this many seconds past the last tick")
        tick.add_argument("--step", type=int, default=5, help="step size for --seconds")
        load = sub.add_parser("load", help="set an endpoint's synthetic load")
        load.add_argument("address", help="<namespace>/<workload>")
        load.add_argument("value", help="load in the trigger's metric units, or 'auto'")
        sub.add_parser("reset", help="delete every sandbox object, pod and event")
        reclaim = sub.add_parser("reclaim-node", help="take a (spot) node away, as its cloud provider does")
        reclaim.add_argument("node", help="a node of the inventory (see status)")
        restore = sub.add_parser("restore-node", help="bring a reclaimed node back")
        restore.add_argument("node")

    def handle(self, *args: object, **options: object) -> None:
        backend = SandboxBackend()
        action = options["action"]
        if action == "status":
            self._status(backend)
        elif action == "tick":
            self._tick(backend, options)
        elif action == "load":
            raw = str(options["value"])
            address, value = _parse_load(str(options["address"]), raw)
            backend.set_load(address, value)
            self.stdout.write(f"load of {address.namespace}/{address.cluster_name} set to {raw}")
        elif action == "reset":
            backend.reset()
            self.stdout.write("sandbox cluster reset")
        elif action == "reclaim-node":
            self._reclaim(backend, str(options["node"]))
        elif action == "restore-node":
            node = str(options["node"])
            restored = backend.restore_node(node)
            self.stdout.write(f"node {node} restored" if restored else f"node {node} was not reclaimed")

    def _reclaim(self, backend: SandboxBackend, node: str) -> None:
        # The clock may be ahead of the wall clock (tick --seconds): the shutdown happens after both.
        now = max(timezone.now(), backend.clock())
        try:
            pods = backend.reclaim_node(node, now=now)
        except NotFound as exc:
            raise CommandError(f"no node {node!r} in the inventory") from exc
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
            self.stdout.write(f"advanced to {backend.clock().isoformat()}")
            return
        now = _parse_time(str(options["at"])) if options.get("at") else timezone.now()
        summary = backend.tick(now)
        self.stdout.write(f"tick at {now.isoformat()}: {summary or 'nothing to do (already there)'}")

    def _status(self, backend: SandboxBackend) -> None:
        capacity = backend.capacity()
        self.stdout.write(f"Sandbox cluster at {backend.clock().strftime('%Y-%m-%dT%H:%M:%SZ')}")
        self.stdout.write(f"{'NODE':<18} {'PRODUCT':<24} {'RESOURCE':<24} {'USED':>5} {'FREE':>5} {'TOTAL':>5}")
        labels = {node.name: node.labels for node in inventory.nodes()}
        for row in capacity:
            product = labels.get(row.node, {}).get("nvidia.com/gpu.product", "-")
            self.stdout.write(f"{row.node:<18} {product:<24} {row.resource_name:<24} {row.in_use:>5} {row.free:>5} "
                              f"{row.allocatable:>5}")
        for node, since in sorted(backend.nodes_down().items()):
            self.stdout.write(f"{node:<18} reclaimed since {since.strftime('%Y-%m-%dT%H:%M:%SZ')}")
        totals: Counter[str] = Counter()
        used: Counter[str] = Counter()
        for row in capacity:
            totals[row.resource_name] += row.allocatable
            used[row.resource_name] += row.in_use
        self.stdout.write("")
        for resource in sorted(totals):
            self.stdout.write(f"total {resource}: {used[resource]} used, {totals[resource] - used[resource]} free "
                              f"of {totals[resource]}")
        pods = SimPod.objects.filter(active=True).order_by("namespace", "name")
        objects = SimObject.objects.exclude(kind__in=("Namespace", "LimitRange", "NetworkPolicy")).count()
        self.stdout.write(f"\n{objects} workload objects, {pods.count()} live pods")
        for pod in pods[:50]:
            where = pod.node or f"unscheduled: {pod.message}"
            self.stdout.write(f"  {pod.namespace}/{pod.name:<40} {pod.phase:<10} {where}")
