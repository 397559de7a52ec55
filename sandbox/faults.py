"""Faults injected into a sandbox cluster, as a real one suffers them: a spot node taken back by
its cloud provider, the whole cluster cut off by a network partition, and a node whose GPUs
overheat.

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
* An overheated node's GPUs report ``degrees`` more than their load makes (a failed fan): what
  the hot-GPU alert (``gpu_hot``, platform staff's) watches for, until :func:`cool_node`.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from cluster.errors import NotFound
from sandbox import inventory
from sandbox.backend import SandboxBackend, storage_errors
from sandbox.models import SimNodeHeat, SimNodeOutage, SimPod, SimSilence
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


#: How much hotter an overheated node may run, in °C (a GPU shuts itself down well before 33 + 80).
MAX_EXTRA_DEGREES = 80.0


@storage_errors
def overheat_node(backend: SandboxBackend, node: str, degrees: float) -> None:
    """Make ``node``'s GPUs report ``degrees`` (0 < degrees ≤ 80) more than their load makes, until cooled."""
    if node not in {n.name for n in inventory.nodes(backend.cluster)}:
        raise NotFound(f'nodes "{node}" not found', status=404)
    if not 0 < degrees <= MAX_EXTRA_DEGREES:
        raise ValueError(f"degrees must be more than 0 and at most {MAX_EXTRA_DEGREES:g}")
    SimNodeHeat.objects.update_or_create(cluster=backend.cluster, node=node, defaults={"degrees": degrees})


@storage_errors
def cool_node(backend: SandboxBackend, node: str) -> bool:
    """End :func:`overheat_node`: its GPUs follow their load again; False when it was not overheated."""
    return SimNodeHeat.objects.filter(cluster=backend.cluster, node=node).delete()[0] > 0
