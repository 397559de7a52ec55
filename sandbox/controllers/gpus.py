"""The shared GPUs' step of a tick: what time-slicing and MPS do to the pods on each physical GPU.

Runs before the kubelet step: it groups the live pods of the shared nodes by the physical GPU
the scheduler step gave them (``SimPod.gpu``), asks :mod:`sandbox.sharing` what happens on each
by ``now``, and applies it: new progress checkpoints (the kubelet then ends a slowed run later),
OOM kills (a run fails ``OOMKilled`` with the sharing's message; a server crash-loops in place)
and servers whose memory fits again. Costs nothing on a cluster without shared nodes.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from cluster.specs import SHARING_MPS
from sandbox.controllers.kubelet import start_container, terminate
from sandbox.sharing import OOM_EXIT_CODE, OOM_KILLED, Tenant, Verdict, is_busy, mps, time_sliced
from sandbox.simulation import pull_failure, start_after_binding
from sandbox.world import STAGE_CRASHING, STAGE_STARTED, PodRow, World


def share(world: World) -> None:
    """Apply time-slicing and MPS to every shared GPU of the cluster that has pods."""
    if not world.sharing:
        return
    by_gpu: dict[tuple[str, int], list[PodRow]] = defaultdict(list)
    for pods in world.pods_by_owner.values():
        for pod in pods:
            if pod.active and pod.gpu is not None and pod.node in world.sharing:
                by_gpu[(pod.node, pod.gpu)].append(pod)
    for (node, _), pods in sorted(by_gpu.items()):
        sharing = world.sharing[node]
        tenants = {pod.name: _tenant(world, pod) for pod in pods}
        if sharing.strategy == SHARING_MPS:
            verdicts = mps(list(tenants.values()), sharing.memory_gib, sharing.replicas, world.now)
        else:
            verdicts = time_sliced(list(tenants.values()), sharing.memory_gib, world.now)
        for pod in pods:
            verdict = verdicts.get(pod.name)
            if verdict is not None:
                _apply(world, pod, tenants[pod.name], verdict)


def _tenant(world: World, pod: PodRow) -> Tenant:
    plan = world.plan_of(pod)
    start = pod.started_at
    if start is None and pod.scheduled_at is not None and not pull_failure(plan):
        start = pod.scheduled_at + timedelta(seconds=start_after_binding(plan))  # it starts within this tick, or later
    server = world.owners[pod.owner_id].resource_kind == "Deployment"
    return Tenant(key=pod.name, start=start, work=None if server else float(plan["dur"]),
                  memory_gib=float(plan.get("mem") or 0.0), busy=is_busy(plan) and pod.stage != STAGE_CRASHING,
                  progress=pod.progress,
                  since=pod.progress_at, crashed=pod.stage == STAGE_CRASHING and pod.reason == OOM_KILLED)


def _apply(world: World, pod: PodRow, tenant: Tenant, verdict: Verdict) -> None:
    plan = world.plan_of(pod)
    if verdict.revive:
        # Its restart finds the memory free: a clean run from now (a time-sliced GPU's neighbours left).
        pod.stage, pod.reason, pod.exit_code, pod.message = STAGE_STARTED, "", None, ""
        pod.started_at, pod.progress, pod.progress_at, pod.pace, pod.ready_at = world.now, 0.0, None, [], None
        world.event(pod, f"Pod/{pod.name}", "Normal", "Started", f"Started container {plan['ctr']}")
        world.touch(pod)
        return
    if verdict.oom_at is not None:
        if verdict.oom_at <= world.now:
            _kill(world, pod, plan, tenant, verdict)
        return  # not yet: decided again next tick, from the same facts
    pod.progress, pod.progress_at = verdict.progress, verdict.progress_at
    pod.pace = merged_marks(pod.pace, verdict.marks)
    world.progressed.append(pod)


def merged_marks(stored: list, marks) -> list:
    """``stored`` (``[[unix seconds, work, rate], …]``) with the step's pace changes that are changes:
    a step replays from the last checkpoint, so its first mark often repeats the pace it had."""
    merged = list(stored)
    for at, work, rate in marks:
        if merged and (merged[-1][2] == rate or at.timestamp() <= merged[-1][0]):
            continue
        merged.append([at.timestamp(), work, rate])
    return merged


def _kill(world: World, pod: PodRow, plan: dict, tenant: Tenant, verdict: Verdict) -> None:
    """The pod's allocation failed: a run's pod fails OOMKilled; a server's container crash-loops."""
    if pod.started_at is None:
        start_container(world, pod, plan, tenant.start)
    pod_ref = f"Pod/{pod.name}"
    if world.owners[pod.owner_id].resource_kind == "Deployment":
        pod.stage, pod.reason, pod.exit_code, pod.message = STAGE_CRASHING, OOM_KILLED, OOM_EXIT_CODE, \
            verdict.oom_message
        world.event(pod, pod_ref, "Warning", "BackOff",
                    f"Back-off restarting failed container {plan['ctr']} in pod {pod.name}_{pod.namespace}",
                    verdict.oom_at + timedelta(seconds=1))
        world.touch(pod)
        return
    terminate(world, pod, "Failed", OOM_KILLED, OOM_EXIT_CODE, verdict.oom_at)
    pod.message = verdict.oom_message
