"""A scripted timeline on the simulated cluster, shared by the tests that replay one.

The sandbox, its clock (which ``timezone.now`` follows, so user actions happen at scripted
instants), and the published tasks, run in order; each cycle ticks the cluster and runs the
real reconcile cycle.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

import fleet.services as fleet
from cluster.errors import Transient
from cluster.status import parse_time
from sandbox.backend import SandboxBackend
from tests.backends import use_backend
from workloads.cycle import reconcile as rec
from workloads.registry import resource_kinds
from workloads.tasks import apply_workload

INTERVAL = 5  # seconds between reconcile cycles


class Timeline:
    """The sandbox, its clock (which ``timezone.now`` follows) and the published tasks, run in order."""

    def __init__(self, published, start: datetime, backend: SandboxBackend | None = None):
        self.backend = backend or SandboxBackend()
        self.published = published
        self.now = start
        #: What an apply task may answer (a test whose cluster refuses an apply adds "failed").
        self.apply_outcomes = ("applied", "skipped")

    def run_tasks(self) -> None:
        while self.published:
            name, args = self.published.pop(0)
            if name in ("workloads.tasks.apply_workload",):
                assert apply_workload(*args) in self.apply_outcomes

    def advance(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)
        self.run_tasks()
        self.backend.tick(self.now)

    def cycle(self, seconds: int = INTERVAL):
        self.advance(seconds)
        report = rec.reconcile(self.backend, now=self.now)
        self.run_tasks()
        return report

    def cycles(self, count: int) -> None:
        for _ in range(count):
            self.cycle()

    def container_start(self, workload) -> datetime:
        """When the workload's first container started, as the cluster reports it."""
        observed = next(o for o in self.backend.observe(resource_kinds()) if o.object_name == workload.object_name)
        starts = [parse_time(s["state"]["running"]["startedAt"] if "running" in s["state"]
                             else s["state"]["terminated"]["startedAt"])
                  for pod in observed.pods for s in pod["status"].get("containerStatuses", [])
                  if "running" in s["state"] or "terminated" in s["state"]]
        return min(starts)


def scripted_timeline(published, monkeypatch, settings, start: datetime,
                      backend: SandboxBackend | None = None) -> Timeline:
    """A :class:`Timeline` from ``start`` that ``timezone.now`` and the backend seam follow (for a fixture);
    ``backend``: a sandbox of the test's own (one that loses calls, say)."""
    made = Timeline(published, start, backend)
    monkeypatch.setattr(timezone, "now", lambda: made.now)
    use_backend(settings, made.backend)
    return made


class FleetTimeline(Timeline):
    """Several sandbox clusters (the inventory's ``clusters:``), each with the backend the portal builds
    for it from ``SLIPWAY_CLUSTER_BACKEND=sandbox``: every cycle ticks them all, silenced or not (a
    silenced cluster runs on), and runs the whole reconcile — each cluster, then the queue — publishing
    what it re-drives, as the reconcile tasks do. An apply that no cluster can take now (``Transient``)
    is dropped, as Celery gives up on it after its retries: the reconciler re-drives it."""

    def __init__(self, published, start: datetime):
        self.published = published
        self.now = start
        self.unapplied: list[str] = []  #: the Transient messages of the applies dropped

    def run_tasks(self) -> None:
        while self.published:
            name, args = self.published.pop(0)
            if name == "workloads.tasks.apply_workload":
                try:
                    outcome = apply_workload(*args)
                    assert outcome in ("applied", "skipped", "queued", "provisioning"), outcome
                except Transient as exc:
                    self.unapplied.append(str(exc))

    def backend_of(self, cluster: str) -> SandboxBackend:
        return fleet.backend(fleet.get(cluster))

    def advance(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)
        self.run_tasks()
        for cluster in fleet.clusters():
            fleet.backend(cluster).tick(self.now)

    def cycle(self, seconds: int = INTERVAL):
        self.advance(seconds)
        report = rec.reconcile(now=self.now)
        self.published += [("workloads.tasks.apply_workload", (i.prefix, i.pk)) for i in report.redriven]
        self.run_tasks()
        return report
