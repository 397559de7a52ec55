"""``manage.py sandbox status|tick|load|reset``: look at and drive the simulated cluster.

* ``status`` — nodes with GPUs used/free per resource, then pods that are not finished;
* ``tick [--at RFC3339] [--seconds N --step S]`` — advance the clock (once, or in steps);
* ``load <namespace>/<workload> <value|auto>`` — pin an endpoint's synthetic load (``auto``:
  back to the demo curve);
* ``reset`` — an empty cluster.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from cluster.backends.base import WorkloadRef
from sandbox import inventory
from sandbox.backend import SandboxBackend
from sandbox.models import SimObject, SimPod


def _parse_time(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise CommandError(f"--at must be an RFC 3339 time, got {value!r}") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Inspect and drive the sandbox cluster: status, tick, load, reset."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("status", help="nodes with GPUs used/free, and live pods")
        tick = sub.add_parser("tick", help="advance the simulated clock")
        tick.add_argument("--at", help="tick at this RFC 3339 time (default: now)")
        tick.add_argument("--seconds", type=int, default=0, help="advance this many seconds past the last tick")
        tick.add_argument("--step", type=int, default=5, help="step size for --seconds")
        load = sub.add_parser("load", help="set an endpoint's synthetic load")
        load.add_argument("ref", help="<namespace>/<workload>")
        load.add_argument("value", help="load in the trigger's metric units, or 'auto'")
        sub.add_parser("reset", help="delete every sandbox object, pod and event")

    def handle(self, *args: object, **options: object) -> None:
        backend = SandboxBackend()
        action = options["action"]
        if action == "status":
            self._status(backend)
        elif action == "tick":
            self._tick(backend, options)
        elif action == "load":
            namespace, sep, workload = str(options["ref"]).partition("/")
            if not sep or not namespace or not workload:
                raise CommandError("load needs <namespace>/<workload>")
            raw = str(options["value"])
            try:
                value = None if raw == "auto" else float(raw)
            except ValueError as exc:
                raise CommandError(f"load value must be a number or 'auto', got {raw!r}") from exc
            backend.set_load(WorkloadRef(namespace, workload), value)
            self.stdout.write(f"load of {namespace}/{workload} set to {raw}")
        elif action == "reset":
            backend.reset()
            self.stdout.write("sandbox cluster reset")

    def _tick(self, backend: SandboxBackend, options: dict) -> None:
        if options.get("seconds"):
            start = backend.clock()
            step = max(int(options.get("step") or 5), 1)
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
