"""One tick of the sandbox cluster: the kubelet, the controllers and the scheduler, in memory.

:func:`run_tick` is the one entry point: it loads every live object and pod
(:class:`sandbox.world.World`), advances them to ``now`` with the controllers of
:mod:`sandbox.controllers`, and writes back only what changed. The caller
(:meth:`sandbox.backend.SandboxBackend.tick`) holds the clock row's lock, so ticks never overlap.

Order within a tick (each step sees the previous one's results):

1. kubelet: bound pods move ContainerCreating → Running → Succeeded/Failed by their times;
2. controllers: Jobs, PyTorchJobs and Deployments (scaled by their ScaledObjects) react to
   finished pods, deadlines and replica counts, and create pods within the ResourceQuota;
3. scheduler: unbound pods are bound by fit (PyTorchJob pods as one gang) or get a
   FailedScheduling message;
4. the ResourceQuotas' status reports what their namespace now uses.

Quiet workloads cost almost nothing: a controller whose pods did not change this tick, and
that has nothing due (deadline, missing pods, a new replica target), returns before even
decoding its status.
"""

from __future__ import annotations

from datetime import datetime

from sandbox.controllers import deployment, job, kubelet, pytorchjob, quota
from sandbox.controllers.scheduling import schedule
from sandbox.world import World

#: The controller of each kind that owns pods.
CONTROLLERS = {"Job": job.reconcile, "PyTorchJob": pytorchjob.reconcile, "Deployment": deployment.reconcile}


def run_tick(now: datetime) -> dict[str, int]:
    """Advance the cluster to ``now``; returns counts of what changed (pods, objects, events)."""
    world = World(now)
    world.load()
    for owner_id, pods in world.pods_by_owner.items():
        owner = world.owners[owner_id]
        for pod in pods:
            kubelet.advance(world, pod, owner)
    quota.compute_usage(world)
    for owner in list(world.owners.values()):
        CONTROLLERS[owner.kind](world, owner)
    schedule(world)
    quota.report_status(world)
    return world.save()
