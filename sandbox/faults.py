"""Faults injected into a sandbox cluster, as a real one suffers them: a spot node taken back by
its cloud provider, and the whole cluster cut off by a network partition.

They are levers of the simulation, not part of the cluster-backend interface: Slipway never
calls them; ``manage.py sandbox reclaim-node|restore-node|silence|answer`` and the tests do.
Each takes the :class:`~sandbox.backend.SandboxBackend` of the cluster it acts on and writes
the fault's row (:class:`~sandbox.models.SimNodeOutage`, :class:`~sandbox.models.SimSilence`);
the backend and the tick read those rows, so every process sees the fault.

* A reclaimed node is gone from the next tick: nothing is scheduled there, its capacity is not
  reported, and its pods stop as the kubelet's graceful node shutdown leaves them, until
  :func:`restore_node` brings it back empty.
* A silenced cluster stops answering: every call of the cluster-backend interface raises
  ``Transient`` until :func:`answer`, but the cluster itself runs on — its ``tick`` and the
  simulation's own levers (clock, loads, nodes, reset) keep working, so its work may finish
  while nobody can see it.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from cluster.errors import NotFound
from sandbox import inventory
from sandbox.backend import SandboxBackend, storage_errors
from sandbox.models import SimNodeOutage, SimPod, SimSilence
from sandbox.pods import NODE_SHUTDOWN


@storage_errors
def reclaim_node(backend: SandboxBackend, node: str, *, now: datetime | None = None) -> int:
    """Take ``node`` away as a cloud provider reclaims a spot node; how many live pods it had.

    The cluster first advances to ``now``; from the next tick the node is gone: nothing is
    scheduled there, its capacity is not reported, and its pods stop with the condition
    ``DisruptionTarget`` (reason ``TerminationByKubelet``, phase Failed; a Deployment's
    are deleted and replaced), as the kubelet's graceful node shutdown leaves them.
    """
    if node not in {n.name for n in inventory.nodes(backend.cluster)}:
        raise NotFound(f'nodes "{node}" not found', status=404)
    now = now or timezone.now()
    backend.tick(now)
    SimNodeOutage.objects.get_or_create(cluster=backend.cluster, node=node,
                                        defaults={"since": max(now, backend.clock()), "reason": NODE_SHUTDOWN[0]})
    return SimPod.objects.filter(cluster=backend.cluster, node=node, active=True).count()


@storage_errors
def restore_node(backend: SandboxBackend, node: str) -> bool:
    """Bring a reclaimed node back (empty, as a fresh spot node); False when it was not gone."""
    return SimNodeOutage.objects.filter(cluster=backend.cluster, node=node).delete()[0] > 0


@storage_errors
def silence(backend: SandboxBackend, *, now: datetime | None = None) -> bool:
    """Stop answering, as a cluster cut off by a network partition; False when already silent.

    From now on every call of the cluster-backend interface raises ``Transient``; the cluster
    runs on (``tick``), so its work may finish unseen.
    """
    return SimSilence.objects.get_or_create(cluster=backend.cluster, defaults={"since": now or timezone.now()})[1]


@storage_errors
def answer(backend: SandboxBackend) -> bool:
    """Answer again after :func:`silence`; False when it was not silent."""
    return SimSilence.objects.filter(cluster=backend.cluster).delete()[0] > 0
