"""Pure reading of observed Kubernetes objects: what every kind's status mapping is made of.

Both backends (the sandbox and a real cluster) return the same Kubernetes-shaped objects
from ``observe()``. Each kind maps its own objects to its states in its app's ``status`` module (a
run's Job or PyTorchJob, an endpoint's Deployments; a Deployment, which more than one kind
runs, in :mod:`cluster.deployments`), all with what this module reads off pods:
the :class:`WorkloadStatus` they return, the most telling signal of the pods, a pull that will
never succeed, the GPU units running, a disruption. It never raises on odd payloads: a missing
field reads as "not reported yet".

Reasons are short sentences a data scientist can act on, built from the most telling
signal of the workload's pods (see :func:`pod_reason`), for example
``"Unschedulable: 0/8 nodes are available: 8 Insufficient nvidia.com/gpu."``,
``"OOMKilled (exit 137): the container ran out of memory — …"``, ``"ImagePullBackOff: Back-off pulling image \"x\""``,
``"CrashLoopBackOff (exit 1)"``, ``"BackoffLimitExceeded: Job has reached the specified backoff limit"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cluster.pods import terminated_reason

Manifest = dict[str, Any]

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
class TrainerProgress:
    """What a Trainer v2 TrainJob's ``status.trainerStatus`` says of its training, when the trainer fills it in:
    how far it is (0-100), the seconds it expects to take still, its latest metrics (name → value, as the CRD's
    strings) and when it said so. None of a field it left out."""

    at: datetime
    percent: int | None = None
    remaining_seconds: int | None = None
    metrics: tuple[tuple[str, str], ...] = ()


def trainer_progress(obj: Manifest | None) -> TrainerProgress | None:
    """``status.trainerStatus`` of a TrainJob as :class:`TrainerProgress`; None when absent or without the
    ``lastUpdatedTime`` the CRD requires of it."""
    found = ((obj or {}).get("status") or {}).get("trainerStatus")
    if not isinstance(found, dict):
        return None
    at = parse_time(found.get("lastUpdatedTime"))
    if at is None:
        return None

    def whole(value: Any, low: int, high: int | None = None) -> int | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return None  # left out (unknown), or not what the CRD allows
        return value if value >= low and (high is None or value <= high) else None

    metrics = tuple((str(m["name"])[:64], str(m["value"])[:64]) for m in found.get("metrics") or []
                    if isinstance(m, dict) and m.get("name") and m.get("value") is not None)
    return TrainerProgress(at, whole(found.get("progressPercentage"), 0, 100),
                           whole(found.get("estimatedRemainingSeconds"), 0), metrics)


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
    #: training runs on Trainer v2: what the trainer says of its progress (``trainerStatus``), None when nothing
    trainer: TrainerProgress | None = None

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


def as_int(value: Any) -> int:
    """An integer field or quantity ("2", 2, None) as int; anything else counts as 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def conditions(obj: Manifest | None) -> dict[str, Manifest]:
    """Conditions by type (the last one of each type wins, as the API server keeps one)."""
    if not obj:
        return {}
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or [] if isinstance(c, dict)}


def is_true(cond: Manifest | None) -> bool:
    return bool(cond) and cond.get("status") == "True"


def with_message(reason: str, message: str) -> str:
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
                    return SEVERITY_FATAL, f"CrashLoopBackOff (exit {as_int(last.get('exitCode'))})"
                return SEVERITY_FATAL, f"CrashLoopBackOff after {_ended_words(last)}"
            return SEVERITY_FATAL, "CrashLoopBackOff"
        if reason in _STARTING_REASONS:
            return SEVERITY_INFO, reason
        if reason:
            return SEVERITY_PROBLEM, with_message(reason, waiting.get("message", ""))
    terminated = state.get("terminated")
    if terminated and (terminated.get("reason") != "Completed" or as_int(terminated.get("exitCode"))):
        return SEVERITY_FATAL, _ended_words(terminated)
    if last and last.get("reason") == "OOMKilled":
        # Restarted in place after an OOM: running again, but the user should know.
        return SEVERITY_PROBLEM, f"restarted after {_ended_words(last)}"
    return SEVERITY_NONE, ""


def pod_reason(pod: Manifest) -> tuple[int, str]:
    """The most telling signal of one pod, with its severity (``(0, "")`` when healthy)."""
    status = pod.get("status") or {}
    best: tuple[int, str] = (SEVERITY_NONE, "")
    scheduled = conditions(pod).get("PodScheduled")
    if scheduled and scheduled.get("status") == "False":
        best = (
            SEVERITY_PROBLEM,
            with_message(scheduled.get("reason") or "Unschedulable", scheduled.get("message", "")),
        )
    if status.get("reason") in ("Evicted", "DeadlineExceeded", "Preempting", "Shutdown", "NodeLost",
                                "UnexpectedAdmissionError"):
        best = max(
            best, (SEVERITY_FATAL, with_message(status["reason"], status.get("message", ""))), key=lambda r: r[0]
        )
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            found = _container_reason(container)
            if found[0] > best[0]:
                best = found
    return best


def pod_since(pod: Manifest) -> datetime | None:
    return parse_time((pod.get("status") or {}).get("startTime")) or parse_time(
        (pod.get("metadata") or {}).get("creationTimestamp"))


def stuck_waiting(pods: list[Manifest]) -> Waiting | None:
    """The live container stuck waiting for a reason other than starting or a crash back-off.

    An image that cannot be pulled comes first (it is what a limit applies to), then the one
    whose pod started first (stuck the longest).
    """
    found: list[Waiting] = []
    for pod in live_pods(pods):
        status = pod.get("status") or {}
        for key in ("initContainerStatuses", "containerStatuses"):
            for container in status.get(key) or []:
                code = ((container.get("state") or {}).get("waiting") or {}).get("reason") or ""
                if code and code not in _STARTING_REASONS and code != "CrashLoopBackOff":
                    found.append(Waiting(code, pod_since(pod), str(container.get("image") or "")))
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
        total += sum(as_int(v) for k, v in amounts.items() if k.startswith(_GPU_PREFIX))
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


def live_pods(pods: list[Manifest]) -> list[Manifest]:
    """Pods not finished: while a run goes on, an earlier attempt's failure is history."""
    return [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]




def disruption(pods: list[Manifest]) -> str:
    """The reason of the first pod condition ``DisruptionTarget`` that is true ("" for none).

    Kubernetes sets it on a pod it is about to delete for reasons outside the pod: its node
    shutting down or gone (``TerminationByKubelet``, ``DeletionByPodGC``), a ``NoExecute`` taint
    (``DeletionByTaintManager``), an eviction (``EvictionByEvictionAPI``) or the scheduler's
    preemption (``PreemptionByScheduler``).
    """
    for pod in pods:
        condition = conditions(pod).get("DisruptionTarget")
        if is_true(condition):
            return condition.get("reason") or "DisruptionTarget"
    return ""
