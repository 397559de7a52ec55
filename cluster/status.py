"""Pure mapping from observed Kubernetes objects to portal states and plain-words reasons.

Both backends (the sandbox and a real cluster) return the same Kubernetes-shaped objects
from ``observe()``, so this one module decides what a training run or endpoint is doing.
It never raises on odd payloads: a missing field reads as "not reported yet".

Reasons are short sentences a data scientist can act on, built from the most telling
signal of the workload's pods (see :func:`pod_reason`), for example
``"Unschedulable: 0/8 nodes are available: 8 Insufficient nvidia.com/gpu."``,
``"OOMKilled (exit 137): the container ran out of memory — …"``, ``"ImagePullBackOff: Back-off pulling image \"x\""``,
``"CrashLoopBackOff (exit 1)"``, ``"BackoffLimitExceeded: Job has reached the specified backoff limit"``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cluster.backends.base import ObservedWorkload
from cluster.manifests.inference import CANARY_SUFFIX, REVISION_ANNOTATION, TRACK_CANARY, TRACK_LABEL
from cluster.pods import attempt_words, terminated_reason

Manifest = dict[str, Any]


class TrainingPhase:
    """Portal states of a training run as far as the cluster can tell."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class EndpointPhase:
    """Portal states of an inference endpoint as far as the cluster can tell."""

    DEPLOYING = "deploying"
    READY = "ready"
    SCALED_TO_ZERO = "scaled_to_zero"
    DEGRADED = "degraded"
    FAILED = "failed"


@dataclass(frozen=True)
class Waiting:
    """A container stuck waiting (not merely starting), as the kubelet reports it.

    ``code`` is the kubelet's waiting reason code ("ImagePullBackOff", "ErrImagePull",
    "CreateContainerConfigError" …): what decisions look at, never the words of a reason.
    ``since`` is when its pod started on its node (the kubelet reports no start of the waiting
    itself); ``image`` the image the container runs.
    """

    code: str
    since: datetime | None
    image: str


@dataclass(frozen=True)
class WorkloadStatus:
    """What the reconciler needs from one observation."""

    state: str
    reason: str  # plain words, "" when nothing to say
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: GPU units (of the flavor's resource) requested by pods in phase Running right now:
    #: the reconciler bills these.
    running_units: int = 0
    replicas: int = 0  # endpoints: ready replicas
    desired_replicas: int = 0  # endpoints: the Deployment's spec.replicas (KEDA's choice)
    #: endpoints: the autoscaler wants more replicas than the ceiling (HPA ScalingLimited/TooManyReplicas)
    scaling_limited: bool = False
    metric_value: float | None = None  # endpoints: the autoscaling metric's current value, when known
    #: the live container stuck waiting the longest (its pod started first), None when none is
    waiting: Waiting | None = None
    #: the portal gave up on the workload (its image could not be pulled): its cluster objects
    #: hold nodes without ever running, so the reconciler deletes them when it fails it
    abandoned: bool = False
    #: a pod was disrupted by the cluster, not by its own code (condition ``DisruptionTarget``:
    #: its node was reclaimed or shut down, it was evicted or preempted): the reason Kubernetes gives
    disrupted: str = ""
    #: endpoints: the replicas still starting and the stages each reached (:class:`cluster.startup.ReplicaStart`),
    #: which the kind records as cold-start timelines
    replica_starts: tuple = ()
    #: endpoints: the revision the stable Deployment's template serves (its annotation; 0: not told) and
    #: whether that template has rolled out to every replica it wants
    revision: int = 0
    rolled_out: bool = False
    #: endpoints: the candidate's Deployment (``<name>-canary``): None when there is none, else its ready replicas
    canary_ready: int | None = None

    @property
    def lacks_capacity(self) -> bool:
        """Whether the reason is the scheduler's "no node has room": ``Unschedulable`` for ``Insufficient`` resources.

        Kubernetes says so only in the words of the PodScheduled condition, so they are read
        here, in the layer that reads the cluster's payloads; the portal then keeps its own
        reason code (``waiting_for_capacity``) and never reads words again.
        """
        return self.reason.startswith(UNSCHEDULABLE) and INSUFFICIENT in self.reason


#: How the scheduler's reason for a pod it cannot place begins, and how its message names a
#: resource no node has enough of ("0/8 nodes are available: 8 Insufficient nvidia.com/gpu").
UNSCHEDULABLE = "Unschedulable"
INSUFFICIENT = "Insufficient"


# Severity of a pod signal: the highest one across a workload's pods becomes the reason.
SEVERITY_NONE = 0
SEVERITY_INFO = 1  # ContainerCreating, PodInitializing: progress, not a problem
SEVERITY_PROBLEM = 2  # the workload cannot make progress without a change or more capacity
SEVERITY_FATAL = 3  # a container died

#: A Job's ``backoffLimit`` when its spec does not say (the API server's default).
DEFAULT_BACKOFF_LIMIT = 6
#: Waiting reasons that mean "still starting" rather than "stuck".
_STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})
#: Resource names that are GPU units for billing (full GPUs and MIG slices).
_GPU_PREFIX = "nvidia.com/"
#: Waiting reason codes that mean the image cannot be pulled. The kubelet retries them forever,
#: so without a limit the workload would hold its quota (and its pods their nodes) forever.
IMAGE_PULL_CODES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
#: Of those, the codes no retry can cure: the reference itself is malformed. Work fails on sight.
IMAGE_INVALID_CODES = frozenset({"InvalidImageName"})
#: The reason of work given up because its image could not be pulled (after the pull limit). The
#: kubelet's own message may name an auth failure or a registry outage as well as a typo; the
#: usual cause comes first, the rest in parentheses.
IMAGE_PULL_FAILED = ('{code}: image "{image}" not found (or its registry refused the pull) — '
                     'check the image name and tag')
IMAGE_INVALID = '{code}: "{image}" is not a valid image reference — check the image name and tag'
#: What to do about a container the kernel killed for memory, said after "OOMKilled (exit 137)".
OOM_HINT = "the container ran out of memory — raise memory_gb or lower the batch size"


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp from the API server as an aware datetime (None when absent or malformed)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _int(value: Any) -> int:
    """An integer field or quantity ("2", 2, None) as int; anything else counts as 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _conditions(obj: Manifest | None) -> dict[str, Manifest]:
    """Conditions by type (the last one of each type wins, as the API server keeps one)."""
    if not obj:
        return {}
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or [] if isinstance(c, dict)}


def _is_true(cond: Manifest | None) -> bool:
    return bool(cond) and cond.get("status") == "True"


def _with_message(reason: str, message: str) -> str:
    message = (message or "").strip()
    if reason and message:
        return f"{reason}: {message}"
    return reason or message


def _ended_words(terminated: Manifest) -> str:
    """How a container ended: with its termination message when it left one (a shared GPU's OOM
    names the sharing), else with what to do about it when the kubelet's reason code says OOMKilled."""
    words = terminated_reason(terminated)
    message = str(terminated.get("message") or "").strip()
    if message:
        return f"{words}: {message}"
    return f"{words}: {OOM_HINT}" if terminated.get("reason") == "OOMKilled" else words


def _container_reason(status: Manifest) -> tuple[int, str]:
    """The telling signal of one container status (severity, words)."""
    state = status.get("state") or {}
    last = (status.get("lastState") or {}).get("terminated")
    waiting = state.get("waiting")
    if waiting:
        reason = waiting.get("reason") or ""
        if reason == "CrashLoopBackOff":
            # The back-off says nothing; why the container died last time does.
            if last:
                if last.get("reason") in (None, "", "Error"):
                    return SEVERITY_FATAL, f"CrashLoopBackOff (exit {_int(last.get('exitCode'))})"
                return SEVERITY_FATAL, f"CrashLoopBackOff after {_ended_words(last)}"
            return SEVERITY_FATAL, "CrashLoopBackOff"
        if reason in _STARTING_REASONS:
            return SEVERITY_INFO, reason
        if reason:
            return SEVERITY_PROBLEM, _with_message(reason, waiting.get("message", ""))
    terminated = state.get("terminated")
    if terminated and (terminated.get("reason") != "Completed" or _int(terminated.get("exitCode"))):
        return SEVERITY_FATAL, _ended_words(terminated)
    if last and last.get("reason") == "OOMKilled":
        # Restarted in place after an OOM: running again, but the user should know.
        return SEVERITY_PROBLEM, f"restarted after {_ended_words(last)}"
    return SEVERITY_NONE, ""


def pod_reason(pod: Manifest) -> tuple[int, str]:
    """The most telling signal of one pod, with its severity (``(0, "")`` when healthy)."""
    status = pod.get("status") or {}
    best: tuple[int, str] = (SEVERITY_NONE, "")
    scheduled = _conditions(pod).get("PodScheduled")
    if scheduled and scheduled.get("status") == "False":
        best = (
            SEVERITY_PROBLEM,
            _with_message(scheduled.get("reason") or "Unschedulable", scheduled.get("message", "")),
        )
    if status.get("reason") in ("Evicted", "DeadlineExceeded", "Preempting", "Shutdown", "NodeLost",
                                "UnexpectedAdmissionError"):
        best = max(
            best, (SEVERITY_FATAL, _with_message(status["reason"], status.get("message", ""))), key=lambda r: r[0]
        )
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            found = _container_reason(container)
            if found[0] > best[0]:
                best = found
    return best


def _pod_since(pod: Manifest) -> datetime | None:
    return parse_time((pod.get("status") or {}).get("startTime")) or parse_time(
        (pod.get("metadata") or {}).get("creationTimestamp"))


def stuck_waiting(pods: list[Manifest]) -> Waiting | None:
    """The live container stuck waiting for a reason other than starting or a crash back-off.

    An image that cannot be pulled comes first (it is what a limit applies to), then the one
    whose pod started first (stuck the longest).
    """
    found: list[Waiting] = []
    for pod in _live(pods):
        status = pod.get("status") or {}
        for key in ("initContainerStatuses", "containerStatuses"):
            for container in status.get(key) or []:
                code = ((container.get("state") or {}).get("waiting") or {}).get("reason") or ""
                if code and code not in _STARTING_REASONS and code != "CrashLoopBackOff":
                    found.append(Waiting(code, _pod_since(pod), str(container.get("image") or "")))
    never = datetime.max.replace(tzinfo=UTC)
    return min(found, key=lambda w: (w.code not in IMAGE_PULL_CODES, w.since or never), default=None)


def image_pull_reason(waiting: Waiting) -> str:
    """What to tell about work that failed because its image cannot be pulled (by the waiting code)."""
    words = IMAGE_INVALID if waiting.code in IMAGE_INVALID_CODES else IMAGE_PULL_FAILED
    return words.format(code=waiting.code, image=waiting.image)


def pull_given_up(waiting: Waiting | None, now: datetime | None, limit_seconds: float | None) -> str:
    """The reason to fail work whose image could not be pulled for ``limit_seconds``; "" while within it.

    A malformed reference (:data:`IMAGE_INVALID_CODES`) fails at once: the kubelet does not even
    try to pull it, and no retry changes it. Decided on the kubelet's waiting code, never on the
    words of the reason.
    """
    if waiting is None or waiting.code not in IMAGE_PULL_CODES or None in (now, limit_seconds, waiting.since):
        return ""
    if waiting.code not in IMAGE_INVALID_CODES and (now - waiting.since).total_seconds() <= limit_seconds:
        return ""
    return image_pull_reason(waiting)


def pods_reason(pods: list[Manifest]) -> tuple[int, str]:
    """The most severe signal across pods; ties go to the first pod (the Master comes first)."""
    best: tuple[int, str] = (SEVERITY_NONE, "")
    for pod in pods:
        found = pod_reason(pod)
        if found[0] > best[0]:
            best = found
    return best


def gpu_units(pod: Manifest) -> int:
    """GPU units (full GPUs or MIG slices) a pod's containers ask for."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        res = container.get("resources") or {}
        amounts = res.get("limits") or res.get("requests") or {}
        total += sum(_int(v) for k, v in amounts.items() if k.startswith(_GPU_PREFIX))
    return total


def running_units(pods: list[Manifest]) -> int:
    """GPU units held by pods in phase Running (what is billed right now)."""
    return sum(gpu_units(p) for p in pods if (p.get("status") or {}).get("phase") == "Running")


def first_ran_at(pods: list[Manifest]) -> datetime | None:
    """When the first container of ``pods`` started running: when the workload really started.

    Not the Job's ``status.startTime``, which Kubernetes sets when its controller first sees the
    Job: a run that waited 80 s for a node would show 80 s of running that never happened.
    Earlier attempts count (a retried Job keeps its failed pods). None before anything ran.
    """
    times = []
    for pod in pods:
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            state, last = container.get("state") or {}, container.get("lastState") or {}
            for moment in ((state.get("running") or {}).get("startedAt"), (state.get("terminated") or {}).get(
                    "startedAt"), (last.get("terminated") or {}).get("startedAt")):
                parsed = parse_time(moment)
                if parsed is not None:
                    times.append(parsed)
    return min(times) if times else None


def _live(pods: list[Manifest]) -> list[Manifest]:
    """Pods not finished: while a run goes on, an earlier attempt's failure is history."""
    return [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def _current_reason(pods: list[Manifest]) -> tuple[int, str]:
    """What live pods say; when they say nothing, why the last attempt ended (a retry is due)."""
    found = pods_reason(_live(pods))
    if found[0] < SEVERITY_PROBLEM:
        finished = pods_reason(pods)
        if finished[0] > found[0]:
            return finished
    return found


def _running_pods(pods: list[Manifest]) -> int:
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")


def _failure_reason(cond: Manifest, pods: list[Manifest]) -> str:
    """The controller's verdict, plus why the last attempt died when a pod says so."""
    verdict = _with_message(cond.get("reason") or "Failed", cond.get("message", ""))
    severity, detail = pods_reason(pods)
    if severity >= SEVERITY_PROBLEM and detail and detail not in verdict:
        return f"{verdict} (last attempt: {detail})"
    return verdict


def _job_status(job: Manifest, pods: list[Manifest]) -> WorkloadStatus:
    status = job.get("status") or {}
    conds = _conditions(job)
    started = first_ran_at(pods)
    units = running_units(pods)
    if _is_true(conds.get("Complete")):
        finished = parse_time(status.get("completionTime")) or parse_time(conds["Complete"].get("lastTransitionTime"))
        return WorkloadStatus(TrainingPhase.SUCCEEDED, "", started, finished, units)
    if _is_true(conds.get("Failed")):
        finished = parse_time(conds["Failed"].get("lastTransitionTime"))
        return WorkloadStatus(TrainingPhase.FAILED, _failure_reason(conds["Failed"], pods), started, finished, units)
    if _is_true(conds.get("Suspended")):
        return WorkloadStatus(TrainingPhase.PENDING, "Suspended", started, None, units)
    # A retried Job says which attempt it is on, unless a live pod has a problem to tell.
    retries = _int((job.get("spec") or {}).get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
    severity, reason = pods_reason(_live(pods))
    if _running_pods(pods):
        return WorkloadStatus(
            TrainingPhase.RUNNING, reason if severity >= SEVERITY_PROBLEM else attempt_words(pods, retries), started,
            None, units
        )
    if severity < SEVERITY_PROBLEM:
        reason = attempt_words(pods, retries) or _current_reason(pods)[1]
    return WorkloadStatus(TrainingPhase.PENDING, reason, started, None, units)


def _pytorchjob_status(job: Manifest, pods: list[Manifest]) -> WorkloadStatus:
    status = job.get("status") or {}
    conds = _conditions(job)
    started = first_ran_at(pods)
    units = running_units(pods)
    if _is_true(conds.get("Succeeded")):
        finished = parse_time(status.get("completionTime")) or parse_time(conds["Succeeded"].get("lastTransitionTime"))
        return WorkloadStatus(TrainingPhase.SUCCEEDED, "", started, finished, units)
    if _is_true(conds.get("Failed")):
        finished = parse_time(status.get("completionTime")) or parse_time(conds["Failed"].get("lastTransitionTime"))
        return WorkloadStatus(TrainingPhase.FAILED, _failure_reason(conds["Failed"], pods), started, finished, units)
    if _is_true(conds.get("Suspended")):
        return WorkloadStatus(TrainingPhase.PENDING, "Suspended", started, None, units)
    severity, reason = pods_reason(_live(pods))
    if _is_true(conds.get("Restarting")):
        restart = _with_message("Restarting", conds["Restarting"].get("message", ""))
        return WorkloadStatus(
            TrainingPhase.RUNNING, reason if severity >= SEVERITY_PROBLEM else restart, started, None, units
        )
    # "Running" is set once every replica runs; with a gang scheduler nothing runs before.
    if _is_true(conds.get("Running")) or _running_pods(pods):
        return WorkloadStatus(
            TrainingPhase.RUNNING, reason if severity >= SEVERITY_PROBLEM else "", started, None, units
        )
    return WorkloadStatus(TrainingPhase.PENDING, _current_reason(pods)[1], started, None, units)


def disruption(pods: list[Manifest]) -> str:
    """The reason of the first pod condition ``DisruptionTarget`` that is true ("" for none).

    Kubernetes sets it on a pod it is about to delete for reasons outside the pod: its node
    shutting down or gone (``TerminationByKubelet``, ``DeletionByPodGC``), a ``NoExecute`` taint
    (``DeletionByTaintManager``), an eviction (``EvictionByEvictionAPI``) or the scheduler's
    preemption (``PreemptionByScheduler``).
    """
    for pod in pods:
        condition = _conditions(pod).get("DisruptionTarget")
        if _is_true(condition):
            return condition.get("reason") or "DisruptionTarget"
    return ""


def training_status(obs: ObservedWorkload, now: datetime | None = None,
                    image_pull_limit: float | None = None) -> WorkloadStatus | None:
    """The state of a training run, or None when neither its Job nor its PyTorchJob exists.

    A run with a pod whose image could not be pulled for ``image_pull_limit`` seconds (at
    ``now``) has failed: it cannot make progress, and the kubelet would retry forever. Its
    status says so with what to check, and is ``abandoned`` (its objects are deleted).
    """
    job = obs.first("Job")
    pytorchjob = obs.first("PyTorchJob") if job is None else None
    if job is not None:
        status = _job_status(job, obs.pods)
    elif pytorchjob is not None:
        status = _pytorchjob_status(pytorchjob, obs.pods)
    else:
        return None
    if status.state != TrainingPhase.SUCCEEDED:
        # Also when the Job failed for it: a spot node reclaimed is no failure of the run's own.
        disrupted = disruption(obs.pods)
        if disrupted:
            status = dataclasses.replace(status, disrupted=disrupted)
    if status.state in (TrainingPhase.SUCCEEDED, TrainingPhase.FAILED):
        return status
    waiting = stuck_waiting(obs.pods)
    gave_up = pull_given_up(waiting, now, image_pull_limit)
    if gave_up:
        return dataclasses.replace(status, state=TrainingPhase.FAILED, reason=gave_up, finished_at=now,
                                   waiting=waiting, abandoned=True)
    return dataclasses.replace(status, waiting=waiting)


#: How long replicas may stay unready (no pod reporting a problem) before the endpoint is
#: called degraded rather than still starting: a model load is slow, not broken.
DEGRADED_GRACE_SECONDS = 600

_SI = {"m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}


def _quantity(value: Any) -> float | None:
    """A Kubernetes quantity as the HPA reports metrics ("950m", "12", "1.5k") → float; None if absent."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str) or not value:
        return None
    number, suffix = (value[:-1], value[-1]) if value[-1] in _SI and value[-1] != "" else (value, "")
    try:
        # Divide for milli (exact for "950m"); multiply for the rest.
        return float(number) / 1000 if suffix == "m" else float(number) * _SI[suffix]
    except ValueError:
        return None


def _autoscaler(obs: ObservedWorkload) -> tuple[bool, float | None, int | None]:
    """What KEDA's HPA says: (wants more than its maximum, the metric's current value, desired replicas)."""
    hpa = obs.first("HorizontalPodAutoscaler")
    if hpa is None:
        return False, None, None
    limited = _conditions(hpa).get("ScalingLimited")
    wants_more = _is_true(limited) and limited.get("reason") == "TooManyReplicas"
    status = hpa.get("status") or {}
    value = None
    for metric in status.get("currentMetrics") or []:
        current = (metric.get(metric.get("type", "").lower()) or metric.get("external") or {}).get("current") or {}
        value = _quantity(current.get("averageValue", current.get("value")))
        if value is not None:
            break
    desired = status.get("desiredReplicas")
    return wants_more, value, (_int(desired) if desired is not None else None)


def _unready_since(pods: list[Manifest]) -> datetime | None:
    """When the longest-waiting live pod that is not ready started (None when all are ready)."""
    oldest = None
    for pod in _live(pods):
        ready = _conditions(pod).get("Ready")
        if _is_true(ready):
            continue
        since = _pod_since(pod)
        if since is not None and (oldest is None or since < oldest):
            oldest = since
    return oldest


def _tracks(obs: ObservedWorkload) -> tuple[ObservedWorkload, Manifest | None]:
    """The stable part of an endpoint's observation (its own Deployment, Service, ScaledObject, HPA and
    stable pods) and the candidate's Deployment, if any (``<name>-canary``, pods labelled ``canary``)."""
    canary_name = obs.object_name + CANARY_SUFFIX
    canary = None
    objects = []
    for obj in obs.objects:
        if (obj.get("metadata") or {}).get("name") == canary_name:
            if obj.get("kind") == "Deployment":
                canary = obj
            continue
        objects.append(obj)
    pods = [p for p in obs.pods if ((p.get("metadata") or {}).get("labels") or {}).get(TRACK_LABEL) != TRACK_CANARY]
    if canary is None and len(objects) == len(obs.objects) and len(pods) == len(obs.pods):
        return obs, None
    return dataclasses.replace(obs, objects=objects, pods=pods), canary


def _rollout(deployment: Manifest, desired: int, ready: int) -> tuple[int, bool]:
    """The revision the Deployment's template serves, and whether it has rolled out: the controller saw
    the current template (``observedGeneration``) and every replica wanted runs it and is ready (what
    ``kubectl rollout status`` waits for)."""
    meta = deployment.get("metadata") or {}
    status = deployment.get("status") or {}
    try:
        revision = int((meta.get("annotations") or {}).get(REVISION_ANNOTATION) or 0)
    except ValueError:
        revision = 0
    seen = _int(status.get("observedGeneration")) >= _int(meta.get("generation"))
    updated = _int(status.get("updatedReplicas"))
    total = _int(status.get("replicas"))
    rolled_out = seen and updated >= desired and total <= updated and ready >= desired
    return revision, rolled_out


def endpoint_status(obs: ObservedWorkload, now: datetime | None = None,
                    image_pull_limit: float | None = None) -> WorkloadStatus | None:
    """The state of an inference endpoint, or None when its Deployment does not exist.

    * no replica wanted (KEDA scaled to zero) → ``scaled_to_zero``;
    * all wanted replicas ready → ``ready``; some ready → ``ready`` while new replicas are
      merely starting, ``degraded`` when a pod has a problem (crash, image, no capacity) or
      replicas stayed unready past :data:`DEGRADED_GRACE_SECONDS` (with ``now``);
    * none ready → ``deploying``, or ``failed`` once the Deployment controller gives up
      (``ProgressDeadlineExceeded``).

    From KEDA's HPA (when observed): whether the autoscaler wants more than the replica
    ceiling (``ScalingLimited``/``TooManyReplicas``), the metric's value, and desired replicas.

    A replica whose image could not be pulled for ``image_pull_limit`` seconds: with no replica
    ready the endpoint has ``failed`` (``abandoned``: nothing can ever serve, its objects are
    deleted); with some ready it is ``degraded`` and keeps serving, the reason saying what to check.
    """
    stable_obs, canary = _tracks(obs)
    deployment = stable_obs.first("Deployment")
    if deployment is None:
        return None
    # Both Deployments' running pods hold GPUs: both are billed. Everything else is the stable one's.
    units = running_units(obs.pods)
    obs = stable_obs
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    wants_more, metric_value, hpa_desired = _autoscaler(obs)
    # The API server defaults spec.replicas to 1; an absent field means the same.
    desired = _int(spec.get("replicas", 1))
    ready = _int(status.get("readyReplicas"))
    conds = _conditions(deployment)
    available = conds.get("Available")
    started = parse_time(available.get("lastTransitionTime")) if _is_true(available) else None
    severity, pod_words = pods_reason(obs.pods)
    stuck = stuck_waiting(obs.pods)
    gave_up = pull_given_up(stuck, now, image_pull_limit)

    revision, rolled_out = _rollout(deployment, desired, ready)
    canary_ready = _int((canary.get("status") or {}).get("readyReplicas")) if canary is not None else None

    def make(state: str, reason: str, abandoned: bool = False) -> WorkloadStatus:
        return WorkloadStatus(state, reason, started, now if abandoned else None, units, ready, desired, wants_more,
                              metric_value, stuck, abandoned, revision=revision, rolled_out=rolled_out,
                              canary_ready=canary_ready)

    progressing = conds.get("Progressing")
    failure = conds.get("ReplicaFailure")
    scaled = obs.first("ScaledObject")
    scaled_ready = _conditions(scaled).get("Ready")
    if desired == 0 and (hpa_desired or 0) == 0:
        return make(EndpointPhase.SCALED_TO_ZERO, "")
    if ready >= desired:
        return make(EndpointPhase.READY, "")
    problem = ""
    if gave_up:
        problem = gave_up
    elif severity >= SEVERITY_PROBLEM:
        problem = pod_words
    elif _is_true(failure):
        # e.g. "pods ... is forbidden: exceeded quota" when the ResourceQuota rejects a pod.
        problem = _with_message(failure.get("reason", ""), failure.get("message", ""))
    elif scaled_ready and scaled_ready.get("status") == "False":
        problem = _with_message(
            "ScaledObject " + (scaled_ready.get("reason") or "not ready"), scaled_ready.get("message", "")
        )
    waiting = desired - ready
    if ready == 0:
        if gave_up:
            return make(EndpointPhase.FAILED, gave_up, abandoned=True)
        if (
            progressing
            and progressing.get("status") == "False"
            and progressing.get("reason") == "ProgressDeadlineExceeded"
        ):
            if stuck is not None and stuck.code in IMAGE_PULL_CODES:
                # The Deployment controller gave up first: same verdict as the pull limit's.
                return make(EndpointPhase.FAILED, image_pull_reason(stuck), abandoned=True)
            detail = problem or _with_message("ProgressDeadlineExceeded", progressing.get("message", ""))
            return make(EndpointPhase.FAILED, detail)
        return make(EndpointPhase.DEPLOYING, problem or (pod_words if severity else ""))
    counts = f"{ready} of {desired} replicas ready"
    if problem:
        return make(EndpointPhase.DEGRADED, f"{counts}; {waiting} waiting: {problem}")
    since = _unready_since(obs.pods)
    if now is not None and since is not None and (now - since).total_seconds() > DEGRADED_GRACE_SECONDS:
        return make(EndpointPhase.DEGRADED, f"{counts}; {waiting} not ready for over "
                                            f"{DEGRADED_GRACE_SECONDS // 60} minutes")
    return make(EndpointPhase.READY, f"scaling up: {counts}")
