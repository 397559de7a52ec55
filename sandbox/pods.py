"""What the API server shows of a pod: its manifest, rebuilt from its row and its owner, and its log.

The sandbox stores only a pod's lifecycle facts (:class:`sandbox.models.SimPod`); its full
Kubernetes shape — labels and owner reference as each controller sets them, node and IPs, the
container's state (waiting, running, crash-looping, terminated), restarts, conditions — and its
log lines are derived here, at the time asked, from the row, the owner's template and plan, and
:mod:`sandbox.simulation`. :class:`sandbox.backend.SandboxBackend` serves them from ``observe``,
``pods`` and ``logs``.

The simulated DCGM exporter's figures ride on the pods as annotations: a running pod's GPU
utilisation, and on a shared GPU (:mod:`sandbox.sharing`) which physical GPU it has and the memory
it holds there; its utilisation is then its part of that GPU (``busy`` counts, per GPU, the pods
taking turns on a time-sliced one: :func:`busy_per_gpu`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from cluster.backends.base import Manifest
from cluster.status import parse_time
from sandbox import checkpoints, training_metrics
from sandbox.controllers.kubelet import ADMISSION_ERROR, KILLED_EXIT_CODE, crash_loop, model_loaded_at, pod_ready
from sandbox.controllers.scaledobject import endpoint_load
from sandbox.controllers.trainjob import job_name
from sandbox.inventory import GpuSharing, nodes
from sandbox.models import SimLoad, SimObject, SimPod
from sandbox.names import replicaset_name
from sandbox.registry import INVALID_IMAGE_NAME, invalid_image_message
from sandbox.sharing import OOM_KILLED, Pace, is_busy, pace
from sandbox.sharing import utilization as shared_utilization
from sandbox.simulation import (
    TERMINATION,
    crash_state,
    gpu_memory_mib,
    gpu_utilization,
    phase,
    pod_outcome,
    pull_failure,
    pull_seconds,
    server_log,
    stable_int,
    start_after_binding,
    training_log,
)
from sandbox.timestamps import rfc3339
from sandbox.trainer import COMPLETION_INDEX
from sandbox.world import STAGE_CRASHING

#: Pod annotation carrying the synthetic GPU utilisation (percent) of a running pod.
GPU_UTILIZATION_ANNOTATION = "sandbox.slipway.dev/gpu-utilization"
#: Which physical GPU of a shared node the pod has; the GPU memory (MiB) it holds (per GPU).
GPU_ANNOTATION = "sandbox.slipway.dev/gpu"
GPU_MEMORY_ANNOTATION = "sandbox.slipway.dev/gpu-memory-mib"
#: A whole log (``tail=None``) stops at this many lines, as a kubelet rotates a container's log.
LOG_LINES_MAX = 100_000
#: What the kubelet says of a pod stopped by its node's shutdown (a reclaimed spot node):
#: the DisruptionTarget condition's reason and the pod's status message.
NODE_SHUTDOWN = ("TerminationByKubelet", "Pod was terminated in response to imminent node shutdown.")


def _template(owner: SimObject, role_name: str) -> Manifest:
    if owner.resource_kind == "TrainJob":  # the JobSet the Trainer built at admission (sandbox.trainer)
        return owner.plan["templates"][role_name]
    spec = owner.manifest.get("spec", {})
    if owner.resource_kind == "PyTorchJob":
        return spec["pytorchReplicaSpecs"][role_name]["template"]
    return spec["template"]


def _jobset_pod(pod: SimPod, owner: SimObject, plan: dict, labels: dict) -> tuple[Manifest, dict]:
    """What JobSet and its indexed Job put on a TrainJob's pod: their labels (the replicated job, the job
    and completion index, the gang's pod group), the completion index annotation ``PET_NODE_RANK`` reads,
    and the Job as its owner."""
    job = job_name(owner.name, plan["role"])
    job_uid = f"{owner.uid[:24]}{stable_int(job) % 10**12:012d}"
    labels.update({
        "jobset.sigs.k8s.io/jobset-name": owner.name, "jobset.sigs.k8s.io/replicatedjob-name": plan["role"],
        "jobset.sigs.k8s.io/replicatedjob-replicas": "1", "jobset.sigs.k8s.io/job-index": "0",
        "jobset.sigs.k8s.io/restart-attempt": str(int(owner.memo.get("restarts", 0))),
        "batch.kubernetes.io/job-name": job, "job-name": job, "batch.kubernetes.io/controller-uid": job_uid,
        "controller-uid": job_uid, COMPLETION_INDEX: str(pod.index),
    })
    if owner.plan.get("gang"):
        labels["scheduling.x-k8s.io/pod-group"] = owner.name
    owner_ref = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid, "controller": True,
                 "blockOwnerDeletion": True}
    return owner_ref, {COMPLETION_INDEX: str(pod.index)}


def sharing_of(pod: SimPod) -> GpuSharing | None:
    """The sharing of the GPU a pod of a shared resource has (None: not such a pod)."""
    if pod.gpu is None:
        return None
    return next((node.sharing for node in nodes(pod.cluster) if node.name == pod.node), None)


def _taking_turns(pod: SimPod, plan: dict, at: datetime) -> bool:
    """Whether the pod is busy on its GPU at ``at``: running (not crash-looping) and not pinned idle."""
    return (pod.active and pod.phase == "Running" and pod.started_at is not None and pod.started_at <= at
            and pod.stage != STAGE_CRASHING and is_busy(plan))


def busy_per_gpu(pods: Iterable[tuple[SimPod, dict]], at: datetime) -> Counter[tuple[str, int]]:
    """How many of ``pods`` (each with its plan) are busy on each physical GPU ``(node, index)``."""
    return Counter((pod.node, pod.gpu) for pod, plan in pods if pod.gpu is not None and _taking_turns(pod, plan, at))


def pod_manifest(pod: SimPod, owner: SimObject, at: datetime,
                 busy: Counter[tuple[str, int]] | None = None,
                 engine_loads: Mapping[tuple[str, str], float] | None = None) -> Manifest:
    """The pod as the API server would return it, rebuilt from its row and its owner's template.

    ``busy``: the busy pods per shared GPU (:func:`busy_per_gpu`), which its utilisation on a
    time-sliced GPU depends on; None: it is alone there. ``engine_loads``: the busy fraction of each
    endpoint replica's real engine by (namespace, pod) (:func:`sandbox.engines.utilization_shares`):
    such a replica's GPU is as busy as its engine.
    """
    plan = owner.plan["pods"][pod.role]
    template = _template(owner, plan["role"])
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    owner_ref = {"apiVersion": owner.api_version, "kind": owner.resource_kind, "name": owner.name, "uid": owner.uid,
                 "controller": True, "blockOwnerDeletion": True}
    if owner.resource_kind == "Job":
        labels.update({"batch.kubernetes.io/job-name": owner.name, "job-name": owner.name,
                       "batch.kubernetes.io/controller-uid": owner.uid, "controller-uid": owner.uid})
    elif owner.resource_kind == "PyTorchJob":
        labels.update({"training.kubeflow.org/job-name": owner.name, "training.kubeflow.org/operator-name":
                       "pytorchjob-controller", "training.kubeflow.org/replica-type": plan["role"].lower(),
                       "training.kubeflow.org/replica-index": str(pod.index)})
        if plan["role"] == "Master":
            labels["training.kubeflow.org/job-role"] = "master"
    elif owner.resource_kind == "TrainJob":
        owner_ref, indexed = _jobset_pod(pod, owner, plan, labels)
    else:
        rs = replicaset_name(owner.name, pod.template_hash)
        labels["pod-template-hash"] = rs.rsplit("-", 1)[1]
        owner_ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                     "uid": f"{owner.uid[:24]}{stable_int(rs) % 10**12:012d}", "controller": True,
                     "blockOwnerDeletion": True}
    meta: Manifest = {
        "name": pod.name, "namespace": pod.namespace, "uid": f"{owner.uid[:24]}{stable_int(pod.name) % 10**12:012d}",
        "labels": labels, "ownerReferences": [owner_ref], "creationTimestamp": rfc3339(pod.created_at),
        **deletion(owner),
    }
    if owner.resource_kind == "TrainJob":
        meta["annotations"] = indexed
    if pod.annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **pod.annotations}
    spec = dict(template.get("spec") or {})
    if pod.node:
        spec["nodeName"] = pod.node
    status = _pod_status(pod, owner, plan, at)
    if status.get("phase") == "Running":
        load = None
        if owner.resource_kind == "Deployment":
            served = (engine_loads or {}).get((pod.namespace, pod.name))
            # Each replica serves its share; utilisation is that share, capped at 100% (its engine's
            # busy fraction when it runs one).
            load = (100.0 * served if served is not None
                    else min(float(getattr(owner, "load", 50.0)) / max(owner.replicas, 1), 100.0))
        elapsed = (at - pod.started_at).total_seconds() if pod.started_at is not None else 0.0
        utilization = gpu_utilization(pod.name, plan.get("util"), serving_load=load, now=at,
                                      phase_now=phase(plan, owner.resource_kind == "Deployment", elapsed))
        held = gpu_memory_mib(plan, elapsed)
        annotations = {GPU_MEMORY_ANNOTATION: str(held)}
        sharing = sharing_of(pod)
        if sharing is not None:  # its part of a physical GPU
            turns = _taking_turns(pod, plan, at)
            if pod.stage == STAGE_CRASHING:  # in back-off, mostly: its GPU sees nothing of it
                utilization = 0
            utilization = shared_utilization(utilization, sharing.strategy, (busy or {}).get((pod.node, pod.gpu), 1),
                                             sharing.replicas, turns)
            held = 0 if pod.reason == OOM_KILLED else held
            annotations = {GPU_ANNOTATION: str(pod.gpu), GPU_MEMORY_ANNOTATION: str(held)}
        meta["annotations"] = {**(meta.get("annotations") or {}), GPU_UTILIZATION_ANNOTATION: str(utilization),
                               **annotations}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _previous_run(pod: SimPod, owner: SimObject) -> dict | None:
    """How a PyTorchJob replica's run before its last restart went, else None.

    Kept by :func:`sandbox.controllers.pytorchjob.keep_previous_runs`.
    """
    if owner.resource_kind != "PyTorchJob":
        return None
    return (owner.memo.get("previous") or {}).get(pod.name)


def _disruption_conditions(pod: SimPod) -> list[Manifest]:
    """The ``DisruptionTarget`` condition of a pod its node's shutdown stopped (and the pod's
    ``reason``/``message``, set by :func:`_pod_status`), as the kubelet writes them."""
    if not pod.disruption:
        return []
    return [{"type": "DisruptionTarget", "status": "True", "reason": pod.disruption, "message": NODE_SHUTDOWN[1],
             "lastProbeTime": None, "lastTransitionTime": rfc3339(pod.finished_at)}]


def _pod_status(pod: SimPod, owner: SimObject, plan: dict, at: datetime) -> Manifest:
    status: Manifest = {"phase": pod.phase, "qosClass": "Burstable"}
    container = plan["ctr"]
    image = plan["img"]
    if not pod.node:
        if pod.message:
            status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "message": pod.message, "lastProbeTime": None,
                                     "lastTransitionTime": rfc3339(pod.created_at)}]
        return status
    scheduled = rfc3339(pod.scheduled_at)
    if pod.reason == ADMISSION_ERROR:  # the kubelet refused it before creating its container
        status.update(reason=pod.reason, message=pod.message, startTime=scheduled)
        status["conditions"] = [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                 "lastTransitionTime": scheduled}]
        return status
    status["hostIP"] = f"10.0.{stable_int(pod.node) % 250}.{stable_int(pod.node, 1) % 250 + 2}"
    status["podIP"] = f"10.244.{stable_int(pod.node) % 250}.{stable_int(pod.name) % 250 + 2}"
    status["startTime"] = scheduled
    ready = pod_ready(pod, plan, at) if owner.resource_kind == "Deployment" else pod.phase == "Running"
    cstatus: Manifest = {"name": container, "image": image, "imageID": "", "ready": ready, "restartCount": 0,
                         "started": pod.phase == "Running"}
    crash = crash_loop(pod, plan) if owner.resource_kind == "Deployment" else None
    if pod.phase in ("Succeeded", "Failed"):
        cstatus["state"] = {"terminated": {"reason": pod.reason or "Error", "exitCode": pod.exit_code or 0,
                                           "startedAt": rfc3339(pod.started_at or pod.scheduled_at),
                                           "finishedAt": rfc3339(pod.finished_at)}}
        if pod.message:  # what the container left in its termination log (a shared GPU's OOM)
            cstatus["state"]["terminated"]["message"] = pod.message
        cstatus["started"] = False
        if pod.disruption:
            status["reason"], status["message"] = "Terminated", NODE_SHUTDOWN[1]
        if pod.reason == "DeadlineExceeded":
            status["reason"] = "DeadlineExceeded"
            status["message"] = "Pod was active on the node longer than the specified deadline"
            cstatus["state"]["terminated"]["reason"] = "Error"
    elif pod.started_at is None:
        start = pod.scheduled_at + timedelta(seconds=start_after_binding(plan))
        pull = pull_failure(plan)
        if pull == INVALID_IMAGE_NAME:
            cstatus["state"] = {"waiting": {"reason": pull, "message": invalid_image_message(image)}}
        elif pull and at >= start:
            first = at < start + timedelta(seconds=max(pull_seconds(plan), 1))
            cstatus["state"] = {"waiting": {
                "reason": "ErrImagePull" if first else "ImagePullBackOff",
                "message": (f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": not found'
                            if first else f'Back-off pulling image "{image}"'),
            }}
        else:
            cstatus["state"] = {"waiting": {"reason": "ContainerCreating"}}
    elif crash is not None:
        outcome, run_seconds = crash
        state = crash_state(pod.started_at, run_seconds, at)
        reason, code = TERMINATION[outcome]
        cstatus["restartCount"] = state.restarts
        if state.running:
            cstatus["state"] = {"running": {"startedAt": rfc3339(state.run_started)}}
        else:
            cstatus["started"] = False
            cstatus["state"] = {"waiting": {"reason": "CrashLoopBackOff",
                                            "message": f"back-off {state.backoff}s restarting failed "
                                                       f"container={container} pod={pod.name}_{pod.namespace}"}}
        if state.last_exit is not None:
            previous_start = state.last_exit - timedelta(seconds=run_seconds)
            cstatus["lastState"] = {"terminated": {"reason": reason, "exitCode": code,
                                                   "startedAt": rfc3339(previous_start),
                                                   "finishedAt": rfc3339(state.last_exit)}}
            if pod.message:
                cstatus["lastState"]["terminated"]["message"] = pod.message
    else:
        cstatus["state"] = {"running": {"startedAt": rfc3339(pod.started_at)}}
    run = _previous_run(pod, owner)
    if run is not None:  # a PyTorchJob replica restarted: what the kubelet says of its previous run
        cstatus["restartCount"] = run["restarts"]
        cstatus["lastState"] = {"terminated": {"reason": run["reason"], "exitCode": run["code"],
                                               "startedAt": run["started"], "finishedAt": run["finished"]}}
    status["containerStatuses"] = [cstatus]
    loaded_at, ready_at = _ready_times(pod, owner, plan, ready)
    status["conditions"] = [
        *_disruption_conditions(pod),
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": scheduled},
        {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": scheduled},
        {"type": "ContainersReady", "status": str(ready), "lastProbeTime": None, "lastTransitionTime": loaded_at},
        {"type": "Ready", "status": str(ready), "lastProbeTime": None, "lastTransitionTime": ready_at},
    ]
    return status


def _ready_times(pod: SimPod, owner: SimObject, plan: dict, ready: bool) -> tuple[str | None, str | None]:
    """The transition times of the ContainersReady and Ready conditions.

    Unready: since the container started (or the pod was bound). Ready: a server's ContainersReady at its
    model's load end (``SLIPWAY_SIM_LOAD_SECONDS`` after its start: the cold start's ``model_loaded``) and
    Ready when the kubelet's probe saw it answer (``ready_at``: with a real engine, the tick whose probe
    passed — the ``ready`` stage); a run's pod is ready as it starts. A real kubelet flips both at once;
    the sandbox scripts the two stages apart (docs/serving.md "Cold starts").
    """
    since = rfc3339(pod.started_at) if pod.phase == "Running" else rfc3339(pod.scheduled_at)
    if not ready or owner.resource_kind != "Deployment":
        return since, since
    loaded = model_loaded_at(pod, plan)
    became = pod.ready_at or loaded
    if loaded is not None and became is not None and loaded > became:
        loaded = became  # a probe never passes before the load ends; held to it all the same
    return rfc3339(loaded) or since, rfc3339(became) or since


def deletion(owner) -> dict:
    """``deletionTimestamp`` (the grace period's end) and ``deletionGracePeriodSeconds`` of an
    object being deleted gracefully, and of its pods; {} otherwise."""
    deadline = getattr(owner, "delete_at", None)
    if deadline is None:
        return {}
    return {"deletionTimestamp": rfc3339(deadline), "deletionGracePeriodSeconds": owner.delete_grace or 0}


def pod_log(row: SimPod, at: datetime, tail: int | None, previous: bool,
            busy: Counter[tuple[str, int]] | None = None) -> list[str]:
    """The log of the pod ``row`` (its owner loaded) at ``at``: its last ``tail`` lines (None: all,
    up to :data:`LOG_LINES_MAX`), or with ``previous`` its run before the last restart. ``busy``: the
    busy pods on its shared GPU (:func:`busy_per_gpu`), whose turns set how fast its steps go now."""
    tail = LOG_LINES_MAX if tail is None else tail
    plan = row.owner.plan["pods"][row.role]
    if previous:
        return _previous_log(row, plan, tail)
    if row.started_at is None:
        return []  # "container is waiting to start": nothing logged yet
    if row.owner.resource_kind == "Deployment":
        until = at
        crash = crash_loop(row, plan)
        if crash is not None:
            outcome, run_seconds = crash
            state = crash_state(row.started_at, run_seconds, at)
            lines = server_log(row.name, image=plan["img"], started=state.run_started,
                               until=min(at, state.run_started + timedelta(seconds=run_seconds)), load=1.0,
                               tail=tail, port=plan.get("port"), args=plan.get("args", ()))
            reason = TERMINATION[outcome][0]
            if not state.running:
                if row.message:
                    lines.append(f"{rfc3339(state.last_exit)} ERROR torch.OutOfMemoryError: CUDA out of memory. "
                                 f"{row.message}")
                lines.append(f"{rfc3339(state.last_exit)} ERROR server exited: {reason}")
            return lines[-tail:]
        return server_log(row.name, image=plan["img"], started=row.started_at, until=until,
                          load=_endpoint_load(row.owner, at) / max(row.owner.replicas, 1),
                          tail=tail, port=plan.get("port"), args=plan.get("args", ()))
    return _run_log(row, row.owner, plan, at, tail, busy)


def _run_log(row: SimPod, owner: SimObject, plan: dict, at: datetime, tail: int,
             busy: Counter[tuple[str, int]] | None) -> list[str]:
    """A run's pod's current log (:func:`pod_log`), its ``owner`` given."""
    until = row.finished_at or at
    workers = sum(p["count"] for p in owner.plan["pods"])
    noticed = (row.finished_at is not None and not row.disruption and row.exit_code == checkpoints.NOTICE_EXIT_CODE
               and checkpoints.notice_exit(plan, row.started_at, row.notice_at) == row.finished_at)
    shared_oom = row.reason == OOM_KILLED and bool(row.message)  # its shared GPU's memory killed it
    return training_log(row.name, image=plan["img"], started=row.started_at, until=until,
                        outcome="oom" if shared_oom else pod_outcome(plan, owner.resource_kind, row.index),
                        finished=(row.finished_at is not None and row.reason != "DeadlineExceeded"
                                  and not row.disruption),
                        workers=workers, tail=tail, args=plan.get("args", ()),
                        ckpt=_checkpointing(plan, row.index), noticed=noticed,
                        oom_detail=row.message if shared_oom else "",
                        every=plan.get("log"), planned=plan["dur"], pace=_pace(row, plan, at, busy),
                        curve=plan.get("curve"))


def trainer_status(row: SimPod, owner: SimObject, at: datetime,
                   busy: Counter[tuple[str, int]] | None = None) -> Manifest | None:
    """A TrainJob's ``trainerStatus``: what rank 0's run (``row``) last reported by ``at`` — its newest
    training line's step against the run's total (the scale of its ``SLIPWAY_PROGRESS`` lines), the time
    left at its pace, and the line's metrics. None before its first training line (nothing reported yet)."""
    plan = owner.plan["pods"][row.role]
    if row.started_at is None or not plan.get("rank0") or row.index != 0:
        return None
    every = plan.get("log") or training_metrics.DEFAULT_EVERY
    report = training_metrics.last_report(_run_log(row, owner, plan, at, training_metrics.PROGRESS_EVERY + 2, busy))
    if report is None:
        return None
    when, step, metrics = report
    ckpt = _checkpointing(plan, row.index)
    total = training_metrics.total_steps((ckpt.done_before if ckpt else 0) + plan["dur"], every)
    step = min(step, total)
    return {"progressPercentage": int(100 * step / total) if total else 100,
            "estimatedRemainingSeconds": round((total - step) / training_metrics.STEPS_PER_LINE * every),
            "metrics": [{"name": name, "value": value} for name, value in metrics],
            "lastUpdatedTime": when}


def _pace(row: SimPod, plan: dict, at: datetime, busy: Counter[tuple[str, int]] | None) -> Pace | None:
    """How fast a run's pod on a shared GPU has worked (:func:`sandbox.sharing.pace`); None: at the clock's speed."""
    sharing = sharing_of(row)
    if sharing is None:
        return None
    return pace(row.pace, row.progress, row.progress_at, row.started_at, (busy or {}).get((row.node, row.gpu), 1),
                _taking_turns(row, plan, at), sharing.strategy)


def _previous_log(row: SimPod, plan: dict, tail: int) -> list[str]:
    """A PyTorchJob replica's run before its last restart
    (:func:`sandbox.controllers.pytorchjob.keep_previous_runs`); [] when it has not restarted,
    as the API answers ``previous=true`` of a container that never did."""
    run = _previous_run(row, row.owner)
    if run is None:
        return []
    killed = run["code"] == KILLED_EXIT_CODE  # stopped by the gang's restart: its log just stops
    return training_log(row.name, image=plan["img"], started=parse_time(run["started"]),
                        until=parse_time(run["finished"]), outcome=pod_outcome(plan, row.owner.resource_kind, row.index),
                        finished=not killed, workers=sum(p["count"] for p in row.owner.plan["pods"]), tail=tail,
                        args=plan.get("args", ()), ckpt=_checkpointing(plan, row.index), every=plan.get("log"),
                        planned=plan["dur"], curve=plan.get("curve"))


def _endpoint_load(deployment: SimObject, at: datetime) -> float:
    """The synthetic load of the endpoint a Deployment serves, as its ScaledObject sees it (1.0: none)."""
    scaled = SimObject.objects.filter(cluster=deployment.cluster, resource_kind="ScaledObject",
                                      namespace=deployment.namespace, workload=deployment.workload).first()
    if scaled is None:
        return 1.0
    loads = {(ns, wl): v for ns, wl, v in SimLoad.objects.filter(
        cluster=deployment.cluster, namespace=deployment.namespace, workload=deployment.workload,
    ).values_list("namespace", "workload", "value")}
    return endpoint_load(loads, deployment.namespace, deployment.workload, scaled.plan, at)


def _checkpointing(plan: dict, index: int) -> checkpoints.Checkpointing | None:
    """The pod's checkpoint settings, for the one replica that saves them: a Job's pod, a
    PyTorchJob's Master, a TrainJob's node 0 (rank 0 saves, the others do not)."""
    rank0 = plan.get("role", "") in ("", "Master") or (plan.get("rank0", False) and index == 0)
    return checkpoints.from_plan(plan) if rank0 else None
