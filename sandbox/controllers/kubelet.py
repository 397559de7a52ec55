"""The kubelet: bound pods move ContainerCreating → Running → Succeeded/Failed by their times
(servers become ready, or crash-loop in place), and pods are stopped (a gang's restart) or
deleted (scale down, template change, a finished workload) with the events a node emits.

A pod's outcome, durations and readiness delay come from its plan (:mod:`sandbox.simulation`);
the stages it passes are :data:`sandbox.world.STAGE_CREATED` and the following constants.

On a shared GPU (:mod:`sandbox.sharing`) a run ends at its last progress checkpoint plus the work
left (:func:`sandbox.sharing.run_end`), and the device plugin refuses a pod that asks for more than
one replica (``failRequestsGreaterThanOne``): it fails at admission, ``UnexpectedAdmissionError``.

Two stops come from outside: a preemption notice, which a pod that honours it answers by
checkpointing and exiting (:mod:`sandbox.checkpoints`), and its node's shutdown (a reclaimed
spot node, :func:`sandbox.faults.reclaim_node`), which stops it with the
``DisruptionTarget`` condition.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sandbox import engines
from sandbox.checkpoints import NOTICE_EXIT_CODE, notice_exit
from sandbox.controllers.quota import release
from sandbox.registry import INVALID_IMAGE_NAME, invalid_image_message
from sandbox.sharing import MEMORY_GROW_SECONDS, OOM_KILLED, run_end
from sandbox.simulation import TERMINATION, pod_outcome, pull_failure, pull_seconds, start_after_binding
from sandbox.world import (
    STAGE_BOUND,
    STAGE_CRASHING,
    STAGE_DONE,
    STAGE_READY,
    STAGE_STARTED,
    ObjRow,
    PodRow,
    World,
)

CRASH_OUTCOMES = ("fail", "oom", "crashloop")
#: The DisruptionTarget reason the kubelet gives the pods it stops for a node shutdown.
NODE_SHUTDOWN_REASON = "TerminationByKubelet"
#: The exit code of a container stopped by SIGTERM (a PyTorchJob gang's restart kills the rest).
KILLED_EXIT_CODE = 143
#: The pod's reason when the kubelet's admission fails (here: the device plugin's Allocate).
ADMISSION_ERROR = "UnexpectedAdmissionError"


def admission_message(resource: str, units: int) -> str:
    """The kubelet's words when a shared GPU's device plugin refuses a request above one replica."""
    return (f"Allocate failed due to rpc error: code = Unknown desc = request for '{resource}: {units}' too large: "
            "maximum request size for shared resources is 1, which is unexpected")


def advance(world: World, pod: PodRow, owner: ObjRow) -> None:
    """Move one pod to the stage its times reach by ``world.now``."""
    if not pod.node or pod.scheduled_at is None or not pod.active:
        return
    down = world.down.get(pod.node)
    if down is not None and world.now >= down:
        disrupt(world, pod, owner, max(down, pod.scheduled_at))
        return
    plan = world.plan_of(pod)
    if pod.stage == STAGE_BOUND and _refused(world, pod, plan):
        return
    start = pod.scheduled_at + timedelta(seconds=start_after_binding(plan))
    outcome = pod_outcome(plan, owner.resource_kind, pod.index)
    pod_ref = f"Pod/{pod.name}"
    pull = pull_failure(plan)
    if pull == INVALID_IMAGE_NAME:
        # Nothing to pull: the kubelet cannot even parse the reference, and says so at once.
        if pod.stage < STAGE_STARTED:
            pod.stage = STAGE_STARTED
            world.event(pod, pod_ref, "Warning", "InspectFailed", invalid_image_message(plan["img"]),
                        pod.scheduled_at)
            world.event(pod, pod_ref, "Warning", "Failed", f"Error: {INVALID_IMAGE_NAME}", pod.scheduled_at)
            world.touch(pod)
        return
    if pull:
        if pod.stage < STAGE_STARTED and world.now >= start:
            pod.stage = STAGE_STARTED
            world.event(pod, pod_ref, "Warning", "Failed", f'Failed to pull image "{plan["img"]}": rpc error: code = '
                        f'NotFound desc = failed to pull and unpack image "{plan["img"]}": not found', start)
            world.event(pod, pod_ref, "Warning", "Failed", "Error: ErrImagePull", start)
            world.event(pod, pod_ref, "Normal", "BackOff", f'Back-off pulling image "{plan["img"]}"',
                        start + timedelta(seconds=1))
            world.touch(pod)
        return
    if pod.stage < STAGE_STARTED and world.now >= start:
        start_container(world, pod, plan, start)
    if pod.phase != "Running" or pod.started_at is None:
        return
    if owner.resource_kind == "Deployment":
        end = pod.started_at + timedelta(seconds=plan["dur"])
        if (pod.stage == STAGE_STARTED and outcome not in CRASH_OUTCOMES and loaded(pod, plan, world.now)
                and ("engine" not in plan or engines.ready(world, pod, plan))):
            pod.stage = STAGE_READY  # no event: the readiness probe passing is silent
            # When: a real engine's probe passed in this tick; without one, the load delay's end itself.
            pod.ready_at = world.now if "engine" in plan else model_loaded_at(pod, plan)
            world.touch(pod)
        # restartPolicy Always: a crashing server is restarted in place, forever.
        if outcome in CRASH_OUTCOMES and pod.stage < STAGE_CRASHING and world.now >= end:
            pod.stage = STAGE_CRASHING
            if outcome == "oom":
                world.event(pod, pod_ref, "Warning", "OOMKilling",
                            f"Memory cgroup out of memory: Killed process in container {plan['ctr']}", end)
            world.event(pod, pod_ref, "Warning", "BackOff",
                        f"Back-off restarting failed container {plan['ctr']} in pod {pod.name}_{pod.namespace}",
                        end + timedelta(seconds=1))
            world.touch(pod)
        return
    end = run_end(pod.started_at, plan["dur"], pod.progress, pod.progress_at)  # a shared GPU may slow it
    stop = notice_exit(plan, pod.started_at, pod.notice_at)
    if stop is not None and stop < end:
        if world.now >= stop:  # it saw the notice: last checkpoint saved, it exits early
            terminate(world, pod, "Failed", "Error", NOTICE_EXIT_CODE, stop)
        return
    if world.now >= end:
        reason, code = TERMINATION.get(outcome, ("Error", 1))
        terminate(world, pod, "Succeeded" if outcome == "succeed" else "Failed", reason, code, end)
        if outcome == "oom":
            world.event(pod, pod_ref, "Warning", "OOMKilling",
                        f"Memory cgroup out of memory: Killed process in container {plan['ctr']}", end)


def start_container(world: World, pod: PodRow, plan: dict, at: datetime) -> None:
    """The container starts at ``at``; its image was pulled ``SLIPWAY_SIM_PULL_SECONDS`` after the pod's
    binding (the ``Pulled`` event's time: the cold-start timeline's ``image_pulled``)."""
    pod_ref = f"Pod/{pod.name}"
    pod.stage, pod.phase, pod.started_at, pod.ready_at = STAGE_STARTED, "Running", at, None
    pulling = pull_seconds(plan)
    world.event(pod, pod_ref, "Normal", "Pulled",
                f'Successfully pulled image "{plan["img"]}" in {pulling}.0s',
                min(pod.scheduled_at + timedelta(seconds=pulling), at))
    world.event(pod, pod_ref, "Normal", "Created", f"Created container {plan['ctr']}", at)
    world.event(pod, pod_ref, "Normal", "Started", f"Started container {plan['ctr']}", at)
    world.touch(pod)


def _refused(world: World, pod: PodRow, plan: dict) -> bool:
    """A shared GPU's device plugin refuses more than one replica per container (its
    ``failRequestsGreaterThanOne``): the kubelet fails the pod at admission, and it stays failed."""
    sharing = world.sharing.get(pod.node)
    units = plan["req"].get(sharing.resource, 0) if sharing is not None else 0
    if units <= 1:
        return False
    message = admission_message(sharing.resource, units)
    world.event(pod, f"Pod/{pod.name}", "Warning", ADMISSION_ERROR, message)
    terminate(world, pod, "Failed", ADMISSION_ERROR, 0, world.now)
    pod.message, pod.exit_code = message, None
    return True


def terminate(world: World, pod: PodRow, phase: str, reason: str, code: int, at: datetime) -> None:
    pod.phase, pod.reason, pod.exit_code, pod.finished_at = phase, reason, code, at
    release(world, pod)
    pod.active, pod.stage = False, STAGE_DONE
    world.finished[pod.owner_id].append(pod)
    world.touch(pod)


def kill(world: World, pod: PodRow, owner: ObjRow, reason: str = "Error") -> None:
    """Stop a pod whose gang is restarted: SIGTERM, exit 143 (the rows go before the new gang is created)."""
    plan = world.plan_of(pod)
    if pod.phase == "Running":
        world.event(pod, f"Pod/{pod.name}", "Normal", "Killing", f"Stopping container {plan['ctr']}")
    pod.phase, pod.reason, pod.exit_code, pod.finished_at = "Failed", reason, KILLED_EXIT_CODE, world.now
    release(world, pod)
    pod.active, pod.stage = False, STAGE_DONE
    world.touch(pod)


def disrupt(world: World, pod: PodRow, owner: ObjRow, at: datetime) -> None:
    """Its node shuts down (a reclaimed spot node): the kubelet stops the container (SIGTERM) and
    marks the pod Failed with the DisruptionTarget condition, which a Job's ``podFailurePolicy``
    may ignore. A Deployment's pod is deleted instead: its ReplicaSet makes a new one elsewhere."""
    if pod.phase == "Running":
        world.event(pod, f"Pod/{pod.name}", "Normal", "Killing", f"Stopping container {world.plan_of(pod)['ctr']}", at)
    if owner.resource_kind == "Deployment":
        remove(world, pod, owner)
        return
    pod.disruption = NODE_SHUTDOWN_REASON
    terminate(world, pod, "Failed", "Error", KILLED_EXIT_CODE, at)


def remove(world: World, pod: PodRow, owner: ObjRow) -> None:
    """Delete a pod (scale down, template change)."""
    if pod.phase == "Running":
        world.event(pod, f"Pod/{pod.name}", "Normal", "Killing", f"Stopping container {world.plan_of(pod)['ctr']}")
    release(world, pod)
    pod.active = False
    if pod.pk is not None:
        world.deleted_pods.add(pod.pk)
        world.changed_pods.pop(pod.pk, None)
    else:
        world.new_pods.remove(pod)


def crash_loop(pod: PodRow, plan: dict) -> tuple[str, int] | None:
    """How a server's container crash-loops: (its outcome, seconds each run lasts); None when it does not.

    Its spec's crash outcome (``SLIPWAY_SIM_OUTCOME``), or a shared GPU's memory that killed it
    (:mod:`sandbox.sharing`): each restart dies allocating it again.
    """
    if pod.reason == OOM_KILLED and pod.phase == "Running":
        return "oom", MEMORY_GROW_SECONDS
    if plan["out"] in CRASH_OUTCOMES:
        return plan["out"], plan["dur"]
    return None


def loaded(pod: PodRow, plan: dict, now: datetime) -> bool:
    """Running, past its readiness delay (its model loaded), and not a server that crashes."""
    if pod.phase != "Running" or pod.started_at is None or crash_loop(pod, plan) is not None:
        return False
    return now >= pod.started_at + timedelta(seconds=plan.get("ready", 0))


def model_loaded_at(pod: PodRow, plan: dict) -> datetime | None:
    """When a server's model is loaded: its container's start plus its load delay (``SLIPWAY_SIM_LOAD_SECONDS``)."""
    if pod.started_at is None:
        return None
    return pod.started_at + timedelta(seconds=plan.get("ready", 0))


def pod_ready(pod: PodRow, plan: dict, now: datetime) -> bool:
    """Whether the pod is ready: :func:`loaded`, and a pod with a real engine (:mod:`sandbox.engines`) once
    its readiness probe passed in a tick (its stage says so: the probe is the tick's, never a reader's)."""
    return loaded(pod, plan, now) and ("engine" not in plan or pod.stage == STAGE_READY)
