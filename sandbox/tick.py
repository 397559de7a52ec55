"""One tick of one sandbox cluster: the kubelet, the controllers and the scheduler, in memory.

:func:`run_tick` is the one entry point: it loads every live object and pod of the cluster
(:class:`sandbox.world.World`; the other clusters' rows are never read), advances them to
``now`` with the controllers of :mod:`sandbox.controllers`, and writes back only what changed. The caller
(:meth:`sandbox.backend.SandboxBackend.tick`) holds the cluster's clock row lock, so ticks of one
cluster never overlap.

Order within a tick (each step sees the previous one's results):

0. shared GPUs: time-slicing and MPS decide how far each pod on a shared GPU got and whose
   memory does not fit (:mod:`sandbox.controllers.gpus`);
1. kubelet: bound pods move ContainerCreating → Running → Succeeded/Failed by their times;
2. controllers: Jobs, PyTorchJobs, TrainJobs and Deployments (scaled by their ScaledObjects) react to
   finished pods, deadlines and replica counts, and create pods within the ResourceQuota;
2b. the elastic pools' autoscaler and ProvisioningRequests (:mod:`sandbox.controllers.autoscaler`): nodes
   come up (or fail), requests book them, pools of mode ``any`` grow for unschedulable pods, idle nodes go;
3. scheduler: unbound pods are bound by fit (a PyTorchJob's or a TrainJob's pods as one gang) or get a
   FailedScheduling message;
4. the ResourceQuotas' status reports what their namespace now uses;
5. the endpoints' real engines (:mod:`sandbox.engines`): started for running replicas, stopped for
   the others, scraped for the autoscaler of the next tick and the pods' GPU utilization.

Before all that, graceful deletes that are over (:func:`finish_deletions`) remove their objects.
An owner being deleted gracefully gets no controller step: its pods run on (the kubelet step),
but nothing replaces or restarts them.

Quiet workloads cost almost nothing: a controller whose pods did not change this tick, and
that has nothing due (deadline, missing pods, a new replica target), returns before even
decoding its status.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, OuterRef, Q

from cluster.backends.base import DemandReader
from sandbox import engines
from sandbox.controllers import autoscaler, deployment, gpus, job, kubelet, pytorchjob, quota, trainjob
from sandbox.controllers.scheduling import schedule
from sandbox.models import SimLoad, SimObject, SimPod
from sandbox.world import World

#: The controller of each kind that owns pods.
CONTROLLERS = {"Job": job.reconcile, "PyTorchJob": pytorchjob.reconcile, "TrainJob": trainjob.reconcile,
               "Deployment": deployment.reconcile}


def run_tick(now: datetime, cluster: str, demand: DemandReader | None = None) -> dict[str, int]:
    """Advance ``cluster`` to ``now``; returns counts of what changed (pods, objects, events). ``demand``: what
    the gateways see of endpoints (the backend's reader; None: nothing is known of them)."""
    finish_deletions(now, cluster)
    world = World(now, cluster, demand)
    world.load()
    gpus.share(world)
    for owner_id, pods in world.pods_by_owner.items():
        owner = world.owners[owner_id]
        for pod in pods:
            kubelet.advance(world, pod, owner)
    quota.compute_usage(world)
    for owner in list(world.owners.values()):
        if owner.delete_at is None:
            CONTROLLERS[owner.resource_kind](world, owner)
    autoscaler.scale(world)
    schedule(world)
    quota.report_status(world)
    engines.sync(world)
    return world.save()


def finish_deletions(now: datetime, cluster: str) -> int:
    """Remove the objects of graceful deletes whose pods have all exited or whose grace period
    ended (their pods go with them, whatever they were doing; pods never bound do not hold it
    up); how many objects."""
    live = SimPod.objects.filter(owner=OuterRef("pk"), active=True).exclude(node="")
    over = SimObject.objects.filter(cluster=cluster, delete_at__isnull=False).filter(
        Q(delete_at__lte=now) | ~Exists(live))
    workloads = set(over.values_list("namespace", "workload"))
    if not workloads:
        return 0
    count = over.delete()[1].get(SimObject._meta.label, 0)
    for namespace, workload in workloads:
        if not SimObject.objects.filter(cluster=cluster, namespace=namespace, workload=workload).exists():
            SimLoad.objects.filter(cluster=cluster, namespace=namespace, workload=workload).delete()
    return count
