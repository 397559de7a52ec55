"""The status of a Deployment, the object more than one kind serves from: an endpoint's replicas, a
workspace's one pod. Pure and Django-free, on the pod reading of :mod:`cluster.status`.

One observation of the workload (its Deployment, the pods it selects, KEDA's ScaledObject and HPA
when it scales) becomes a :class:`DeploymentPhase` with words to act on. A kind that runs more
than one Deployment hands in the part this mapping reads, and adds its own (an endpoint's
candidate revision, in that kind's status mapping).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cluster.backends.base import ObservedWorkload
from cluster.status import (
    IMAGE_PULL_CODES,
    SEVERITY_PROBLEM,
    Manifest,
    WorkloadStatus,
    as_int,
    conditions,
    image_pull_reason,
    is_true,
    live_pods,
    parse_time,
    pod_since,
    pods_reason,
    pull_given_up,
    running_units,
    stuck_waiting,
    with_message,
)


class DeploymentPhase:
    """States of a workload served by a Deployment as far as the cluster can tell."""

    DEPLOYING = "deploying"
    READY = "ready"
    SCALED_TO_ZERO = "scaled_to_zero"
    DEGRADED = "degraded"
    FAILED = "failed"


#: How long replicas may stay unready (no pod reporting a problem) before the workload is
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
    limited = conditions(hpa).get("ScalingLimited")
    wants_more = is_true(limited) and limited.get("reason") == "TooManyReplicas"
    status = hpa.get("status") or {}
    value = None
    for metric in status.get("currentMetrics") or []:
        current = (metric.get(metric.get("type", "").lower()) or metric.get("external") or {}).get("current") or {}
        value = _quantity(current.get("averageValue", current.get("value")))
        if value is not None:
            break
    desired = status.get("desiredReplicas")
    return wants_more, value, (as_int(desired) if desired is not None else None)


def _unready_since(pods: list[Manifest]) -> datetime | None:
    """When the longest-waiting live pod that is not ready started (None when all are ready)."""
    oldest = None
    for pod in live_pods(pods):
        ready = conditions(pod).get("Ready")
        if is_true(ready):
            continue
        since = pod_since(pod)
        if since is not None and (oldest is None or since < oldest):
            oldest = since
    return oldest


def _rolled_out(deployment: Manifest, desired: int, ready: int) -> bool:
    """Whether the Deployment's template has rolled out: the controller saw the current template
    (``observedGeneration``) and every replica wanted runs it and is ready (what ``kubectl rollout
    status`` waits for)."""
    meta = deployment.get("metadata") or {}
    status = deployment.get("status") or {}
    seen = as_int(status.get("observedGeneration")) >= as_int(meta.get("generation"))
    updated = as_int(status.get("updatedReplicas"))
    total = as_int(status.get("replicas"))
    return seen and updated >= desired and total <= updated and ready >= desired


def deployment_status(obs: ObservedWorkload, now: datetime | None = None,
                      image_pull_limit: float | None = None) -> WorkloadStatus | None:
    """The state of a workload served by its Deployment, or None when the Deployment does not exist.

    * no replica wanted (KEDA scaled to zero) → ``scaled_to_zero``;
    * all wanted replicas ready → ``ready``; some ready → ``ready`` while new replicas are
      merely starting, ``degraded`` when a pod has a problem (crash, image, no capacity) or
      replicas stayed unready past :data:`DEGRADED_GRACE_SECONDS` (with ``now``);
    * none ready → ``deploying``, or ``failed`` once the Deployment controller gives up
      (``ProgressDeadlineExceeded``).

    From KEDA's HPA (when observed): whether the autoscaler wants more than the replica
    ceiling (``ScalingLimited``/``TooManyReplicas``), the metric's value, and desired replicas;
    from the Deployment, whether its template has rolled out.

    A replica whose image could not be pulled for ``image_pull_limit`` seconds: with no replica
    ready the workload has ``failed`` (``abandoned``: nothing can ever serve, its objects are
    deleted); with some ready it is ``degraded`` and keeps serving, the reason saying what to check.
    """
    deployment = obs.first("Deployment")
    if deployment is None:
        return None
    units = running_units(obs.pods)
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    wants_more, metric_value, hpa_desired = _autoscaler(obs)
    # The API server defaults spec.replicas to 1; an absent field means the same.
    desired = as_int(spec.get("replicas", 1))
    ready = as_int(status.get("readyReplicas"))
    conds = conditions(deployment)
    available = conds.get("Available")
    started = parse_time(available.get("lastTransitionTime")) if is_true(available) else None
    severity, pod_words = pods_reason(obs.pods)
    stuck = stuck_waiting(obs.pods)
    gave_up = pull_given_up(stuck, now, image_pull_limit)
    rolled_out = _rolled_out(deployment, desired, ready)

    def make(state: str, reason: str, abandoned: bool = False) -> WorkloadStatus:
        return WorkloadStatus(state, reason, started, now if abandoned else None, units, ready, desired, wants_more,
                              metric_value, stuck, abandoned, rolled_out=rolled_out)

    progressing = conds.get("Progressing")
    failure = conds.get("ReplicaFailure")
    scaled = obs.first("ScaledObject")
    scaled_ready = conditions(scaled).get("Ready")
    if desired == 0 and (hpa_desired or 0) == 0:
        return make(DeploymentPhase.SCALED_TO_ZERO, "")
    if ready >= desired:
        return make(DeploymentPhase.READY, "")
    problem = ""
    if gave_up:
        problem = gave_up
    elif severity >= SEVERITY_PROBLEM:
        problem = pod_words
    elif is_true(failure):
        # e.g. "pods ... is forbidden: exceeded quota" when the ResourceQuota rejects a pod.
        problem = with_message(failure.get("reason", ""), failure.get("message", ""))
    elif scaled_ready and scaled_ready.get("status") == "False":
        problem = with_message(
            "ScaledObject " + (scaled_ready.get("reason") or "not ready"), scaled_ready.get("message", "")
        )
    waiting = desired - ready
    if ready == 0:
        if gave_up:
            return make(DeploymentPhase.FAILED, gave_up, abandoned=True)
        if (
            progressing
            and progressing.get("status") == "False"
            and progressing.get("reason") == "ProgressDeadlineExceeded"
        ):
            if stuck is not None and stuck.code in IMAGE_PULL_CODES:
                # The Deployment controller gave up first: same verdict as the pull limit's.
                return make(DeploymentPhase.FAILED, image_pull_reason(stuck), abandoned=True)
            detail = problem or with_message("ProgressDeadlineExceeded", progressing.get("message", ""))
            return make(DeploymentPhase.FAILED, detail)
        return make(DeploymentPhase.DEPLOYING, problem or (pod_words if severity else ""))
    counts = f"{ready} of {desired} replicas ready"
    if problem:
        return make(DeploymentPhase.DEGRADED, f"{counts}; {waiting} waiting: {problem}")
    since = _unready_since(obs.pods)
    if now is not None and since is not None and (now - since).total_seconds() > DEGRADED_GRACE_SECONDS:
        return make(DeploymentPhase.DEGRADED, f"{counts}; {waiting} not ready for over "
                                            f"{DEGRADED_GRACE_SECONDS // 60} minutes")
    return make(DeploymentPhase.READY, f"scaling up: {counts}")
