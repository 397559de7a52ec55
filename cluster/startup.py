"""How far each replica of a workload got in its start, read from what the cluster shows (pure).

A replica's cold start passes stages (docs/serving.md "Cold starts"); the cluster records the instant
of each but the first (Slipway's own decision) and the last (the gateway's first answer):

* ``scheduled`` — the pod was bound to a node: its ``PodScheduled`` condition turned True
  (``lastTransitionTime``);
* ``image_pulled`` — the kubelet's ``Pulled`` event about the pod (its pull ended, or the image was
  on the node already: "already present on machine"); when no such event is seen (events expire
  after an hour), the container's start stands for it;
* ``container_started`` — its container's ``startedAt`` (the first run's, if it restarted since);
* ``model_loaded`` — its ``ContainersReady`` condition turned True: the container's readiness probe
  passed, which a serving engine answers only once its model is loaded (vLLM's and TGI's ``/health``);
* ``ready`` — its ``Ready`` condition turned True: the pod as a whole is ready (readiness gates
  included), and joins its Service's endpoints.

On a real cluster the last two usually share their instant; the sandbox scripts them apart
(``sandbox/pods.py``). Only the pods still **starting** are read (:func:`starting`), so a steady
endpoint costs nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from cluster.backends.base import STARTUP_EVENT_REASONS, ClusterEvent, Manifest, ObservedWorkload
from cluster.status import parse_time

#: The pod label naming the endpoint revision a replica serves (absent: the caller decides).
REVISION_LABEL = "slipway.dev/revision"
#: A ready replica is still read this long after it became ready: a cycle that came late still sees
#: its last stages (the reconcile cycle runs every few seconds).
READ_AFTER_READY = timedelta(minutes=10)
#: A replica that never became ready is followed this long after its creation: past the longest
#: startup timeout an endpoint may set (3 h), its start has failed and its timeline stays as it is.
FOLLOW_UNREADY = timedelta(hours=4)
#: The stages this module reads, in their order (a subset of inference's COLD_START_STAGES).
OBSERVED_STAGES = ("scheduled", "image_pulled", "container_started", "model_loaded", "ready")


@dataclass(frozen=True)
class ReplicaStart:
    """One replica (pod) and the instants of the stages it reached so far."""

    pod: str
    created: datetime | None
    revision: int | None
    stages: dict[str, datetime] = field(default_factory=dict, hash=False)


def _conditions(pod: Manifest) -> dict[str, Manifest]:
    return {c.get("type", ""): c for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict)}


def _true_since(conditions: dict[str, Manifest], kind: str) -> datetime | None:
    cond = conditions.get(kind)
    if not cond or cond.get("status") != "True":
        return None
    return parse_time(cond.get("lastTransitionTime"))


@lru_cache(maxsize=8)
def _limits(now: datetime) -> tuple[datetime, datetime, str, str]:
    """The oldest ready and creation instants still followed at ``now``, and the same as the API server
    writes them (whole seconds, ``Z``), which compare as strings."""
    now = now.astimezone(UTC)
    ready, created = now - READ_AFTER_READY, now - FOLLOW_UNREADY
    return ready, created, ready.strftime(_STAMP), created.strftime(_STAMP)


_STAMP = "%Y-%m-%dT%H:%M:%SZ"


def _since(value: object, limit: datetime, limit_stamp: str) -> bool:
    """Whether the timestamp ``value`` is at or after ``limit``: a string compare for the API server's own
    format (every cycle asks it of every pod: parsing each cost more than the rest of the check), else parsed."""
    if isinstance(value, str) and len(value) == 20 and value.endswith("Z"):
        return value >= limit_stamp
    parsed = parse_time(value)
    return parsed is None or parsed >= limit


def starting(pod: Manifest, now: datetime | None) -> bool:
    """Whether ``pod``'s start is still followed: not finished nor being deleted, and either ready for
    less than :data:`READ_AFTER_READY` or not ready yet and created less than :data:`FOLLOW_UNREADY` ago.
    ``now`` None: every live pod is."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return False
    if now is None:
        return True
    ready_limit, created_limit, ready_stamp, created_stamp = _limits(now)
    for cond in status.get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == "Ready" and cond.get("status") == "True":
            return _since(cond.get("lastTransitionTime"), ready_limit, ready_stamp)
    return _since(meta.get("creationTimestamp"), created_limit, created_stamp)


def any_starting(pods: Iterable[Manifest], now: datetime | None) -> bool:
    """Whether some of ``pods`` is starting: a backend lists startup events only then."""
    return any(starting(pod, now) for pod in pods)


def event_time(event: Manifest) -> str:
    """When an event (as the API server returns it) first happened: ``firstTimestamp``, or ``eventTime`` for
    events written through events.k8s.io (which leave the former empty), else ``lastTimestamp``."""
    return event.get("firstTimestamp") or event.get("eventTime") or event.get("lastTimestamp") or ""


def startup_event(event: Manifest) -> ClusterEvent | None:
    """A raw event flattened when it is a startup event about a pod (:data:`STARTUP_EVENT_REASONS`), else None."""
    involved = event.get("involvedObject") or {}
    if involved.get("kind") != "Pod" or event.get("reason") not in STARTUP_EVENT_REASONS:
        return None
    return ClusterEvent(type=event.get("type", "Normal"), reason=event.get("reason", ""),
                        message=event.get("message", ""), object=f"Pod/{involved.get('name', '')}",
                        time=event_time(event), count=int(event.get("count") or 1))


def _container_started(pod: Manifest) -> datetime | None:
    """The first run's start of the pod's (first) container: a restarted one's last run began later."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    if not statuses:
        return None
    status = statuses[0]
    found = []
    for state in (status.get("state") or {}, status.get("lastState") or {}):
        for phase in ("running", "terminated"):
            started = parse_time((state.get(phase) or {}).get("startedAt"))
            if started is not None:
                found.append(started)
    return min(found) if found else None


def _revision(meta: Manifest) -> int | None:
    value = (meta.get("labels") or {}).get(REVISION_LABEL, "")
    return int(value) if value.isdigit() else None


def replica_start(pod: Manifest, pulled: datetime | None) -> ReplicaStart:
    """The stages ``pod`` reached; ``pulled``: the time of its first ``Pulled`` event, if one was seen."""
    meta = pod.get("metadata") or {}
    conditions = _conditions(pod)
    started = _container_started(pod)
    stages = {
        "scheduled": _true_since(conditions, "PodScheduled"),
        "image_pulled": pulled or started,
        "container_started": started,
        "model_loaded": _true_since(conditions, "ContainersReady"),
        "ready": _true_since(conditions, "Ready"),
    }
    return ReplicaStart(pod=meta.get("name", ""), created=parse_time(meta.get("creationTimestamp")),
                        revision=_revision(meta), stages={k: v for k, v in stages.items() if v is not None})


def replica_starts(observed: ObservedWorkload, now: datetime | None) -> tuple[ReplicaStart, ...]:
    """The starting replicas of ``observed`` (:func:`starting`) and the stages each reached, oldest first."""
    pods = [pod for pod in observed.pods if starting(pod, now)]
    if not pods:
        return ()
    pulled: dict[str, datetime] = {}
    for event in observed.pod_events:
        if event.reason != "Pulled":
            continue
        at = parse_time(event.time)
        name = event.object.removeprefix("Pod/")
        if at is not None and (name not in pulled or at < pulled[name]):
            pulled[name] = at  # the first pull: a restart's "already present" comes later
    starts = [replica_start(pod, pulled.get((pod.get("metadata") or {}).get("name", ""))) for pod in pods]
    return tuple(sorted(starts, key=lambda s: (s.created is None, s.created.timestamp() if s.created else 0.0, s.pod)))
