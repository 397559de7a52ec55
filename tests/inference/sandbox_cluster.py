"""The simulated cluster driven step by step, for endpoint tests that need real scaling behaviour.

:class:`Cluster` is the sandbox backend plus the tasks the portal published, run in order as a
worker would; :meth:`Cluster.cycle` advances the sandbox's clock and runs one reconcile cycle.
The ``cluster`` fixture (tests/inference/conftest.py) installs it behind
the ``SLIPWAY_CLUSTER_BACKEND`` setting, the one seam (``tests/backends.py``).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from cluster.status import gpu_units, parse_time
from inference.cleanup import delete_candidate
from sandbox.backend import SandboxBackend
from tests.backends import use_backend
from workloads.cycle import reconcile as rec
from workloads.registry import resource_kinds
from workloads.tasks import apply_workload


class Cluster:
    """The sandbox plus the tasks the portal published, run in order (as a worker would)."""

    def __init__(self, published, start):
        self.backend = SandboxBackend()
        self.published = published
        self.now = start
        #: pod name → [GPU units, start (its status.startTime), last time it was seen running]
        self.pods: dict[str, list] = {}

    def run_tasks(self) -> None:
        while self.published:
            name, args = self.published.pop(0)
            if name == "workloads.tasks.apply_workload":
                assert apply_workload(*args) in ("applied", "skipped")
            elif name == "inference.cleanup.delete_candidate":
                delete_candidate(*args)

    def cycle(self, seconds: int = 5):
        self.now += timedelta(seconds=seconds)
        self.run_tasks()
        self.backend.tick(self.now)
        report = rec.reconcile(self.backend, now=self.now)
        self.run_tasks()
        for observed in self.backend.observe(resource_kinds()):
            for pod in observed.pods:
                if pod["status"].get("phase") == "Running" and observed.object_name.startswith("ep-"):
                    seen = self.pods.setdefault(pod["metadata"]["name"], [gpu_units(pod),
                                                                            parse_time(pod["status"]["startTime"]), None])
                    seen[2] = self.now
        return report

    @classmethod
    def installed(cls, published, settings) -> Cluster:
        """A cluster starting now, installed as the portal's backend."""
        made = cls(published, timezone.now().replace(microsecond=0) + timedelta(seconds=1))
        use_backend(settings, made.backend)
        return made

    def replica_hours(self) -> Decimal:
        """Running GPU time of the endpoint's pods, from each pod's start to when it was last seen running."""
        seconds = sum(units * (last - start).total_seconds() for units, start, last in self.pods.values())
        return Decimal(seconds) / 3600
