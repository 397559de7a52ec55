"""cluster.status: observed Kubernetes objects -> portal states and plain-words reasons.

Payloads are trimmed copies of what the API server returns for the situations a GPU
platform meets every day (no capacity, bad image, OOM, crash loops, deadlines).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cluster.backends.base import ObservedWorkload
from cluster.status import (
    DEGRADED_GRACE_SECONDS,
    IMAGE_PULL_CODES,
    EndpointPhase,
    TrainingPhase,
    WorkloadStatus,
    endpoint_status,
    parse_time,
    training_status,
)
from tests.cluster.samples import UNSCHEDULABLE, pod, running_container, terminated, waiting

T0 = "2026-01-01T10:00:00Z"
T1 = "2026-01-01T11:30:00Z"


def _obs(
    objects: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None, workload: str = "run-42"
) -> ObservedWorkload:
    return ObservedWorkload("team-vision", workload, "vision", objects=objects, pods=pods or [])


def _job(status: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "run-42"}, "spec": {}, "status": status}


def _cond(type_: str, reason: str = "", message: str = "", status: str = "True", when: str = T1) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": when}


def _pytorchjob(conditions: list[dict[str, Any]], **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "run-42"},
        "spec": {},
        "status": {"conditions": conditions, "startTime": T0, **status},
    }


def test_it_reports_nothing_when_the_job_is_gone() -> None:
    assert training_status(_obs([], [pod("run-42-x", "run-42")])) is None
    assert endpoint_status(_obs([], workload="ep-7")) is None


def test_it_explains_an_unschedulable_job() -> None:
    stuck = pod("run-42-abcde", "run-42", phase="Pending", node=None, conditions=[UNSCHEDULABLE])
    status = training_status(_obs([_job({"active": 1, "startTime": T0})], [stuck]))
    # Nothing ran yet: no start, whatever the Job's startTime says (billing cannot begin).
    assert status == WorkloadStatus(
        TrainingPhase.PENDING,
        "Unschedulable: 0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
        started_at=None,
    )


def test_it_explains_an_image_pull_failure() -> None:
    message = 'Back-off pulling image "registry.example.com/vision/train:typo"'
    pulling = pod("run-42-abcde", "run-42", phase="Pending", container_statuses=[waiting("ImagePullBackOff", message)])
    status = training_status(_obs([_job({"active": 1, "startTime": T0})], [pulling]))
    assert status.state == TrainingPhase.PENDING
    assert status.reason == f"ImagePullBackOff: {message}"
    assert status.running_units == 0


PULL_LIMIT = 600
PULL_HINT = ('ImagePullBackOff: image "img" not found (or its registry refused the pull) — '
             'check the image name and tag')


def _pulling(name: str = "run-42-abcde", workload: str = "run-42", code: str = "ImagePullBackOff",
             message: str = 'Back-off pulling image "img"', started: str = T0) -> dict[str, Any]:
    stuck = pod(name, workload, phase="Pending", container_statuses=[waiting(code, message)])
    stuck["status"]["startTime"] = started
    return stuck


def test_it_fails_a_run_whose_image_cannot_be_pulled_past_the_limit() -> None:
    obs = _obs([_job({"active": 1, "startTime": T0})], [_pulling()])
    t0 = parse_time(T0)
    within = training_status(obs, t0 + timedelta(seconds=PULL_LIMIT), PULL_LIMIT)
    assert (within.state, within.abandoned) == (TrainingPhase.PENDING, False)
    assert (within.waiting.code, within.waiting.since, within.waiting.image) == ("ImagePullBackOff", t0, "img")
    past = t0 + timedelta(seconds=PULL_LIMIT + 1)
    status = training_status(obs, past, PULL_LIMIT)
    assert (status.state, status.reason, status.finished_at) == (TrainingPhase.FAILED, PULL_HINT, past)
    assert status.abandoned  # its pod holds a node and retries forever: the reconciler deletes it
    # Without a limit (or a time to measure it at) nothing is given up.
    assert training_status(obs).state == TrainingPhase.PENDING
    assert "ErrImagePull" in IMAGE_PULL_CODES


def test_it_fails_a_run_with_an_invalid_image_name_on_sight() -> None:
    # A malformed reference: the kubelet never pulls, and no retry cures it — no limit to wait for.
    message = 'Failed to apply default image tag "Img": couldn\'t parse image name "Img": invalid reference format'
    obs = _obs([_job({"active": 1, "startTime": T0})], [_pulling(code="InvalidImageName", message=message)])
    t0 = parse_time(T0)
    status = training_status(obs, t0, PULL_LIMIT)
    assert (status.state, status.abandoned, status.finished_at) == (TrainingPhase.FAILED, True, t0)
    assert status.reason == 'InvalidImageName: "img" is not a valid image reference — check the image name and tag'
    # The same pod read with no clock to judge by stays pending with the kubelet's words.
    assert training_status(obs).reason == f"InvalidImageName: {message}"


def test_a_stuck_pull_of_one_pytorchjob_worker_fails_the_run() -> None:
    master = pod("run-42-master-0", "run-42", container_statuses=[running_container()])
    worker = _pulling("run-42-worker-0", code="ErrImagePull", message="manifest unknown")
    status = training_status(_obs([_pytorchjob([_cond("Created")])], [master, worker]),
                             parse_time(T1), PULL_LIMIT)
    assert (status.state, status.abandoned) == (TrainingPhase.FAILED, True)
    assert status.reason.startswith('ErrImagePull: image "img" not found')


def test_the_pull_limit_goes_by_the_waiting_code_not_the_words() -> None:
    # Stuck for hours on a missing Secret: not a pull failure, whatever its message says.
    config = _pulling(code="CreateContainerConfigError", message="ImagePullBackOff? no: secret not found")
    status = training_status(_obs([_job({"active": 1, "startTime": T0})], [config]), parse_time(T1), PULL_LIMIT)
    assert (status.state, status.abandoned) == (TrainingPhase.PENDING, False)
    assert status.waiting.code == "CreateContainerConfigError"
    # An older pod stuck on something else does not hide a pull that is past the limit.
    pulling = _pulling("run-42-b", started="2026-01-01T10:30:00Z")
    status = training_status(_obs([_job({"active": 2, "startTime": T0})], [config, pulling]), parse_time(T1),
                             PULL_LIMIT)
    assert (status.state, status.waiting.code) == (TrainingPhase.FAILED, "ImagePullBackOff")
    # A finished run stays what it was, whatever an old pod says.
    done = _job({"succeeded": 1, "conditions": [_cond("Complete")]})
    assert training_status(_obs([done], [_pulling()]), parse_time(T1), PULL_LIMIT).state == TrainingPhase.SUCCEEDED


def test_an_endpoint_fails_or_degrades_on_a_replica_whose_image_cannot_be_pulled() -> None:
    later = parse_time(T1)
    # No replica ready: nothing can ever serve — failed, abandoned.
    status = endpoint_status(_obs([_deployment(1), _scaled()], [_pulling("ep-7-a", "ep-7")], workload="ep-7"),
                             later, PULL_LIMIT)
    assert (status.state, status.reason, status.finished_at, status.abandoned) == (
        EndpointPhase.FAILED, PULL_HINT, later, True)
    # One ready, a new replica cannot pull: it keeps serving, degraded, saying what to check.
    ok = pod("ep-7-b", "ep-7", container_statuses=[running_container()])
    status = endpoint_status(_obs([_deployment(2, 1), _scaled()], [ok, _pulling("ep-7-a", "ep-7")], workload="ep-7"),
                             later, PULL_LIMIT)
    assert (status.state, status.reason, status.abandoned) == (
        EndpointPhase.DEGRADED, f"1 of 2 replicas ready; 1 waiting: {PULL_HINT}", False)
    # Within the limit: still deploying, with the kubelet's words.
    status = endpoint_status(_obs([_deployment(1), _scaled()], [_pulling("ep-7-a", "ep-7")], workload="ep-7"),
                             parse_time(T0) + timedelta(seconds=60), PULL_LIMIT)
    assert (status.state, status.reason) == (EndpointPhase.DEPLOYING, 'ImagePullBackOff: Back-off pulling image "img"')


def test_it_says_a_starting_container_is_being_created() -> None:
    creating = pod("run-42-abcde", "run-42", phase="Pending", container_statuses=[waiting("ContainerCreating")])
    assert training_status(_obs([_job({"active": 1})], [creating])).reason == "ContainerCreating"


def test_it_bills_the_gpus_of_running_pods() -> None:
    running = pod("run-42-abcde", "run-42", gpus=4, container_statuses=[running_container()])
    status = training_status(_obs([_job({"active": 1, "startTime": T0})], [running]))
    assert (status.state, status.reason, status.running_units) == (TrainingPhase.RUNNING, "", 4)


def test_it_reports_a_completed_job() -> None:
    done = pod("run-42-abcde", "run-42", phase="Succeeded", gpus=4, container_statuses=[terminated("Completed", 0)])
    job = _job(
        {
            "succeeded": 1,
            "startTime": T0,
            "completionTime": T1,
            "conditions": [_cond("SuccessCriteriaMet"), _cond("Complete")],
        }
    )
    status = training_status(_obs([job], [done]))
    assert status.state == TrainingPhase.SUCCEEDED
    # It started when its container did (10:01), not at the Job's startTime (10:00).
    assert (status.started_at, status.finished_at) == (parse_time("2026-01-01T10:01:00Z"), parse_time(T1))
    assert status.running_units == 0  # finished pods hold no GPU


def test_it_names_oom_as_the_cause_of_a_failed_job() -> None:
    oom = pod("run-42-abcde", "run-42", phase="Failed", container_statuses=[terminated("OOMKilled", 137)])
    job = _job(
        {
            "failed": 3,
            "startTime": T0,
            "conditions": [
                _cond("FailureTarget", "BackoffLimitExceeded"),
                _cond("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
            ],
        }
    )
    status = training_status(_obs([job], [oom]))
    assert status.state == TrainingPhase.FAILED
    assert (
        status.reason
        == "BackoffLimitExceeded: Job has reached the specified backoff limit (last attempt: OOMKilled (exit 137): "
        "the container ran out of memory — raise memory_gb or lower the batch size)"
    )
    assert status.finished_at == parse_time(T1)


def test_a_termination_message_says_why_instead_of_the_generic_oom_hint() -> None:
    """A shared GPU's OOM is not the container's own memory: the words it left say what happened."""
    shared = terminated("OOMKilled", 137)
    shared["state"]["terminated"]["message"] = "GPU memory is shared with 3 other pods on this time-sliced GPU"
    oom = pod("run-42-abcde", "run-42", phase="Failed", container_statuses=[shared])
    job = _job({"failed": 1, "startTime": T0, "conditions": [
        _cond("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")]})
    assert training_status(_obs([job], [oom])).reason == (
        "BackoffLimitExceeded: Job has reached the specified backoff limit (last attempt: OOMKilled (exit 137): "
        "GPU memory is shared with 3 other pods on this time-sliced GPU)")


def test_it_names_a_pod_the_kubelet_refused_at_admission() -> None:
    refused = pod("run-42-abcde", "run-42", phase="Failed")
    refused["status"].update(reason="UnexpectedAdmissionError", message="Allocate failed due to …")
    job = _job({"startTime": T0})
    assert training_status(_obs([job], [refused])).reason == "UnexpectedAdmissionError: Allocate failed due to …"


def test_it_reports_a_deadline_exceeded_job() -> None:
    job = _job(
        {
            "startTime": T0,
            "conditions": [_cond("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")],
        }
    )
    status = training_status(_obs([job]))
    assert (status.state, status.reason) == (
        TrainingPhase.FAILED,
        "DeadlineExceeded: Job was active longer than specified deadline",
    )


def test_it_reports_a_non_zero_exit() -> None:
    failed = pod("run-42-abcde", "run-42", phase="Failed", container_statuses=[terminated("Error", 1)])
    job = _job({"failed": 1, "active": 1, "startTime": T0})  # a retry is on its way
    status = training_status(_obs([job], [failed]))
    assert (status.state, status.reason) == (TrainingPhase.PENDING, "Error (exit 1)")


def test_it_forgets_an_earlier_attempts_failure_once_a_retry_runs() -> None:
    failed = pod("run-42-aaaaa", "run-42", phase="Failed", container_statuses=[terminated("Error", 1)])
    retry = pod("run-42-bbbbb", "run-42", container_statuses=[running_container()])
    status = training_status(_obs([_job({"failed": 1, "active": 1, "startTime": T0})], [failed, retry]))
    assert (status.state, status.reason, status.running_units) == (TrainingPhase.RUNNING, "", 1)


def test_it_reports_a_suspended_job_as_pending() -> None:
    job = _job({"conditions": [_cond("Suspended", "JobSuspended", "Job suspended")]})
    assert training_status(_obs([job])).state == TrainingPhase.PENDING


def test_it_maps_pytorchjob_conditions() -> None:
    created = _pytorchjob([_cond("Created", "PyTorchJobCreated")])
    assert training_status(_obs([created])).state == TrainingPhase.PENDING

    master = pod("run-42-master-0", "run-42", gpus=8, container_statuses=[running_container()])
    worker = pod("run-42-worker-0", "run-42", gpus=8, container_statuses=[running_container()])
    running = _pytorchjob([_cond("Created", when=T0), _cond("Running", "PyTorchJobRunning")])
    status = training_status(_obs([running], [master, worker]))
    assert (status.state, status.running_units) == (TrainingPhase.RUNNING, 16)

    succeeded = _pytorchjob(
        [_cond("Created"), _cond("Running", status="False"), _cond("Succeeded", "PyTorchJobSucceeded")],
        completionTime=T1,
    )
    status = training_status(_obs([succeeded]))
    assert (status.state, status.finished_at) == (TrainingPhase.SUCCEEDED, parse_time(T1))


def test_it_explains_a_failed_pytorchjob_with_its_pods() -> None:
    master = pod("run-42-master-0", "run-42", phase="Failed", container_statuses=[terminated("Error", 1)])
    failed = _pytorchjob(
        [
            _cond("Created"),
            _cond("Failed", "PyTorchJobFailed", "PyTorchJob run-42 is failed because 1 Master replica(s) failed."),
        ]
    )
    status = training_status(_obs([failed], [master]))
    assert status.state == TrainingPhase.FAILED
    assert (
        status.reason
        == "PyTorchJobFailed: PyTorchJob run-42 is failed because 1 Master replica(s) failed. (last attempt: Error (exit 1))"
    )


def test_it_reports_a_crash_looping_pytorchjob_with_the_exit_code() -> None:
    crashing = pod(
        "run-42-master-0",
        "run-42",
        container_statuses=[
            waiting("CrashLoopBackOff", "back-off 40s", last=terminated("Error", 1)["state"]["terminated"], restarts=3)
        ],
    )
    restarting = _pytorchjob(
        [_cond("Created"), _cond("Restarting", "PyTorchJobRestarting", "replica master restarted")]
    )
    status = training_status(_obs([restarting], [crashing]))
    assert (status.state, status.reason) == (TrainingPhase.RUNNING, "CrashLoopBackOff (exit 1)")
    assert status.running_units == 1  # the crashing pod still holds its GPU


def test_it_keeps_oom_visible_after_a_restart_in_place() -> None:
    oom = terminated("OOMKilled", 137)["state"]["terminated"]
    crashing = pod("run-42-master-0", "run-42", container_statuses=[waiting("CrashLoopBackOff", last=oom, restarts=1)])
    running = _pytorchjob([_cond("Running")])
    assert training_status(_obs([running], [crashing])).reason == (
        "CrashLoopBackOff after OOMKilled (exit 137): the container ran out of memory — raise memory_gb or lower "
        "the batch size")


def test_it_waits_for_the_gang_with_the_schedulers_words() -> None:
    waiting_pods = [
        pod(f"run-42-worker-{i}", "run-42", phase="Pending", node=None, conditions=[UNSCHEDULABLE]) for i in range(2)
    ]
    status = training_status(_obs([_pytorchjob([_cond("Created")])], waiting_pods))
    assert status.state == TrainingPhase.PENDING
    assert status.reason.startswith("Unschedulable: 0/8 nodes")


def _deployment(desired: int | None, ready: int = 0, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {} if desired is None else {"replicas": desired}
    status: dict[str, Any] = {"replicas": max(desired or 0, ready), "conditions": conditions or []}
    if ready:
        status["readyReplicas"] = ready
        status["availableReplicas"] = ready
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ep-7"}, "spec": spec, "status": status}


def _scaled(ready: str = "True", reason: str = "ScaledObjectReady", message: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "ep-7"},
        "status": {"conditions": [_cond("Ready", reason, message, status=ready), _cond("Active", status="True")]},
    }


def _endpoint(
    deployment: dict[str, Any], pods: list[dict[str, Any]] | None = None, scaled: dict[str, Any] | None = None
) -> WorkloadStatus:
    status = endpoint_status(_obs([deployment, scaled or _scaled()], pods, workload="ep-7"))
    assert status is not None
    return status


def test_it_reports_a_ready_endpoint() -> None:
    pods = [
        pod(f"ep-7-5d9c-{i}", "ep-7", resource="nvidia.com/mig-1g.10gb", container_statuses=[running_container()])
        for i in range(2)
    ]
    status = _endpoint(_deployment(2, 2, [_cond("Available", "MinimumReplicasAvailable", when=T0)]), pods)
    assert status == WorkloadStatus(
        EndpointPhase.READY, "", parse_time(T0), None, running_units=2, replicas=2, desired_replicas=2
    )


def test_it_reports_an_endpoint_scaled_to_zero() -> None:
    status = _endpoint(_deployment(0))
    assert (status.state, status.running_units, status.desired_replicas) == (EndpointPhase.SCALED_TO_ZERO, 0, 0)


def test_it_reports_a_deploying_endpoint_with_the_pod_reason() -> None:
    loading = pod("ep-7-5d9c-a", "ep-7", container_statuses=[{**running_container(), "ready": False}])
    assert _endpoint(_deployment(1), [loading]).state == EndpointPhase.DEPLOYING  # loading weights
    stuck = pod("ep-7-5d9c-a", "ep-7", phase="Pending", node=None, conditions=[UNSCHEDULABLE])
    status = _endpoint(_deployment(None), [stuck])  # spec.replicas defaulted by the server
    assert (status.state, status.desired_replicas) == (EndpointPhase.DEPLOYING, 1)
    assert status.reason == "Unschedulable: 0/8 nodes are available: 8 Insufficient nvidia.com/gpu."


def test_it_calls_a_partial_endpoint_degraded_only_when_pods_have_a_problem() -> None:
    ok = pod("ep-7-a", "ep-7", container_statuses=[running_container()])
    crashing = pod(
        "ep-7-b",
        "ep-7",
        container_statuses=[
            waiting("CrashLoopBackOff", last=terminated("Error", 2)["state"]["terminated"], restarts=5)
        ],
    )
    starting = pod("ep-7-c", "ep-7", phase="Pending", container_statuses=[waiting("ContainerCreating")])
    degraded = _endpoint(_deployment(2, 1), [ok, crashing])
    assert (degraded.state, degraded.reason) == (
        EndpointPhase.DEGRADED,
        "1 of 2 replicas ready; 1 waiting: CrashLoopBackOff (exit 2)",
    )
    scaling = _endpoint(_deployment(2, 1), [ok, starting])
    assert (scaling.state, scaling.reason) == (EndpointPhase.READY, "scaling up: 1 of 2 replicas ready")


def test_it_reports_a_quota_rejection_from_the_replicaset() -> None:
    failure = _cond(
        "ReplicaFailure", "FailedCreate", 'pods "ep-7-5d9c-x" is forbidden: exceeded quota: slipway-gpu-quota'
    )
    status = _endpoint(_deployment(3, 2, [failure]), [pod("ep-7-a", "ep-7"), pod("ep-7-b", "ep-7")])
    assert status.state == EndpointPhase.DEGRADED
    assert status.reason.endswith("exceeded quota: slipway-gpu-quota")


def test_it_fails_an_endpoint_once_the_rollout_gives_up() -> None:
    progress = _cond(
        "Progressing", "ProgressDeadlineExceeded", 'ReplicaSet "ep-7-5d9c" has timed out progressing.', status="False"
    )
    pulling = pod("ep-7-a", "ep-7", phase="Pending", container_statuses=[waiting("ErrImagePull", "manifest unknown")])
    status = _endpoint(_deployment(1, 0, [progress]), [pulling])
    # The controller gave up on a pull before Slipway's limit: the same verdict, with what to check.
    assert (status.state, status.reason, status.abandoned) == (
        EndpointPhase.FAILED, PULL_HINT.replace("ImagePullBackOff", "ErrImagePull"), True)
    status = _endpoint(_deployment(1, 0, [progress]))
    assert status.reason == 'ProgressDeadlineExceeded: ReplicaSet "ep-7-5d9c" has timed out progressing.'


def test_it_mentions_a_broken_scaledobject() -> None:
    scaled = _scaled("False", "ScaledObjectCheckFailed", "ScaledObject doesn't have correct triggers specification")
    status = _endpoint(_deployment(2, 1), [pod("ep-7-a", "ep-7")], scaled)
    assert status.state == EndpointPhase.DEGRADED
    assert "ScaledObjectCheckFailed" in status.reason


@pytest.mark.parametrize("value", [None, "", "yesterday", 12])
def test_it_reads_missing_or_odd_timestamps_as_none(value: Any) -> None:
    assert parse_time(value) is None


def test_it_survives_empty_payloads() -> None:
    status = training_status(_obs([{"kind": "Job"}], [{"kind": "Pod"}]))
    assert status == WorkloadStatus(TrainingPhase.PENDING, "")
    assert endpoint_status(_obs([{"kind": "Deployment"}], workload="ep-7")).state == EndpointPhase.DEPLOYING


def _hpa(limited: bool, value: str | None = "95", desired: int = 2) -> dict[str, Any]:
    status: dict[str, Any] = {"desiredReplicas": desired, "conditions": [
        _cond("ScalingLimited", "TooManyReplicas" if limited else "DesiredWithinRange",
              status="True" if limited else "False")]}
    if value is not None:
        status["currentMetrics"] = [{"type": "External", "external": {
            "metric": {"name": "s0-gpu-utilization"}, "current": {"averageValue": value}}}]
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "keda-hpa-ep-7"}, "status": status}


@pytest.mark.parametrize(("hpa", "limited", "value"), [
    (_hpa(True, "95"), True, 95.0),
    (_hpa(False, "950m"), False, 0.95),
    (_hpa(True, None), True, None),
    (None, False, None),
])
def test_it_reads_whether_the_autoscaler_wants_more_than_the_ceiling(hpa, limited, value) -> None:
    objects = [_deployment(2, ready=2), _scaled()] + ([hpa] if hpa else [])
    status = endpoint_status(_obs(objects, workload="ep-7"))
    assert (status.scaling_limited, status.metric_value) == (limited, value)


def test_replicas_unready_past_the_grace_period_make_the_endpoint_degraded() -> None:
    started = "2026-11-22T10:00:00Z"
    loading = pod("ep-7-5d9c-1", "ep-7", container_statuses=[running_container()])
    loading["status"]["startTime"] = started
    loading["status"]["conditions"] = [_cond("Ready", status="False")]
    obs = _obs([_deployment(2, ready=1), _scaled()], [loading], workload="ep-7")
    soon = parse_time(started) + timedelta(seconds=DEGRADED_GRACE_SECONDS - 1)
    assert endpoint_status(obs, soon).state == EndpointPhase.READY  # still loading its model
    late = parse_time(started) + timedelta(seconds=DEGRADED_GRACE_SECONDS + 1)
    status = endpoint_status(obs, late)
    assert (status.state, status.reason) == (EndpointPhase.DEGRADED,
                                             "1 of 2 replicas ready; 1 not ready for over 10 minutes")


def _canary_deployment(ready: int) -> dict[str, Any]:
    deployment = _deployment(1, ready)
    deployment["metadata"] = {"name": "ep-7-canary", "annotations": {"slipway.dev/revision": "3"}}
    return deployment


def test_a_canary_beside_an_endpoint_is_billed_but_its_state_is_the_stable_deployments() -> None:
    stable = [pod(f"ep-7-5d9c-{i}", "ep-7", container_statuses=[running_container()],
                  extra_labels={"slipway.dev/track": "stable"}) for i in range(2)]
    # The candidate's one pod is still loading: the endpoint is ready all the same (its stable replicas are).
    loading = pod("ep-7-canary-77f-0", "ep-7", conditions=[_cond("Ready", status="False")],
                  extra_labels={"slipway.dev/track": "canary"})
    status = endpoint_status(_obs([_canary_deployment(0), _deployment(2, 2, [_cond("Available", when=T0)]), _scaled()],
                                  [*stable, loading], workload="ep-7"))
    assert (status.state, status.replicas, status.desired_replicas) == (EndpointPhase.READY, 2, 2)
    assert status.running_units == 3  # both Deployments' running pods hold GPUs
    assert status.canary_ready == 0
    assert endpoint_status(_obs([_canary_deployment(1), _deployment(2, 2), _scaled()], stable,
                                workload="ep-7")).canary_ready == 1
    assert endpoint_status(_obs([_deployment(2, 2), _scaled()], stable, workload="ep-7")).canary_ready is None


@pytest.mark.parametrize(("meta", "status", "rolled_out"), [
    ({"generation": 4}, {"observedGeneration": 4, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}, True),
    ({"generation": 5}, {"observedGeneration": 4, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}, False),
    ({"generation": 4}, {"observedGeneration": 4, "replicas": 3, "updatedReplicas": 1, "readyReplicas": 2}, False),
    ({"generation": 4}, {"observedGeneration": 4, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1}, False),
])
def test_it_reads_the_revision_a_deployment_serves_and_whether_it_rolled_out(meta, status, rolled_out) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 2}, "status": status,
                  "metadata": {"name": "ep-7", "annotations": {"slipway.dev/revision": "3"}, **meta}}
    seen = endpoint_status(_obs([deployment, _scaled()], workload="ep-7"))
    assert (seen.revision, seen.rolled_out) == (3, rolled_out)
