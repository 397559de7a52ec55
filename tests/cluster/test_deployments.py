"""cluster.deployments: a Deployment (an endpoint's replicas, a workspace's pod), the pods it selects and
KEDA's objects -> the workload's state and plain-words reasons.

Payloads are trimmed copies of what the API server returns (tests/cluster/observations.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cluster.deployments import DEGRADED_GRACE_SECONDS, DeploymentPhase, deployment_status
from cluster.status import WorkloadStatus, parse_time
from tests.cluster.observations import PULL_HINT, PULL_LIMIT, T0, T1
from tests.cluster.observations import condition as _cond
from tests.cluster.observations import deployment as _deployment
from tests.cluster.observations import observed as _obs
from tests.cluster.observations import pulling as _pulling
from tests.cluster.observations import scaled_object as _scaled
from tests.cluster.samples import UNSCHEDULABLE, pod, running_container, terminated, waiting


def _status(
    deployment: dict[str, Any], pods: list[dict[str, Any]] | None = None, scaled: dict[str, Any] | None = None
) -> WorkloadStatus:
    status = deployment_status(_obs([deployment, scaled or _scaled()], pods, workload="ep-7"))
    assert status is not None
    return status


def test_it_reports_nothing_when_the_deployment_is_gone() -> None:
    assert deployment_status(_obs([], workload="ep-7")) is None


def test_an_endpoint_fails_or_degrades_on_a_replica_whose_image_cannot_be_pulled() -> None:
    later = parse_time(T1)
    # No replica ready: nothing can ever serve — failed, abandoned.
    status = deployment_status(_obs([_deployment(1), _scaled()], [_pulling("ep-7-a", "ep-7")], workload="ep-7"),
                             later, PULL_LIMIT)
    assert (status.state, status.reason, status.finished_at, status.abandoned) == (
        DeploymentPhase.FAILED, PULL_HINT, later, True)
    # One ready, a new replica cannot pull: it keeps serving, degraded, saying what to check.
    ok = pod("ep-7-b", "ep-7", container_statuses=[running_container()])
    status = deployment_status(_obs([_deployment(2, 1), _scaled()], [ok, _pulling("ep-7-a", "ep-7")], workload="ep-7"),
                             later, PULL_LIMIT)
    assert (status.state, status.reason, status.abandoned) == (
        DeploymentPhase.DEGRADED, f"1 of 2 replicas ready; 1 waiting: {PULL_HINT}", False)
    # Within the limit: still deploying, with the kubelet's words.
    status = deployment_status(_obs([_deployment(1), _scaled()], [_pulling("ep-7-a", "ep-7")], workload="ep-7"),
                             parse_time(T0) + timedelta(seconds=60), PULL_LIMIT)
    assert (status.state, status.reason) == (DeploymentPhase.DEPLOYING, 'ImagePullBackOff: Back-off pulling image "img"')


def test_it_reports_a_ready_status() -> None:
    pods = [
        pod(f"ep-7-5d9c-{i}", "ep-7", resource="nvidia.com/mig-1g.10gb", container_statuses=[running_container()])
        for i in range(2)
    ]
    status = _status(_deployment(2, 2, [_cond("Available", "MinimumReplicasAvailable", when=T0)]), pods)
    assert status == WorkloadStatus(
        DeploymentPhase.READY, "", parse_time(T0), None, running_units=2, replicas=2, desired_replicas=2
    )


def test_it_reports_an_endpoint_scaled_to_zero() -> None:
    status = _status(_deployment(0))
    assert (status.state, status.running_units, status.desired_replicas) == (DeploymentPhase.SCALED_TO_ZERO, 0, 0)


def test_it_reports_a_deploying_endpoint_with_the_pod_reason() -> None:
    loading = pod("ep-7-5d9c-a", "ep-7", container_statuses=[{**running_container(), "ready": False}])
    assert _status(_deployment(1), [loading]).state == DeploymentPhase.DEPLOYING  # loading weights
    stuck = pod("ep-7-5d9c-a", "ep-7", phase="Pending", node=None, conditions=[UNSCHEDULABLE])
    status = _status(_deployment(None), [stuck])  # spec.replicas defaulted by the server
    assert (status.state, status.desired_replicas) == (DeploymentPhase.DEPLOYING, 1)
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
    degraded = _status(_deployment(2, 1), [ok, crashing])
    assert (degraded.state, degraded.reason) == (
        DeploymentPhase.DEGRADED,
        "1 of 2 replicas ready; 1 waiting: CrashLoopBackOff (exit 2)",
    )
    scaling = _status(_deployment(2, 1), [ok, starting])
    assert (scaling.state, scaling.reason) == (DeploymentPhase.READY, "scaling up: 1 of 2 replicas ready")


def test_it_reports_a_quota_rejection_from_the_replicaset() -> None:
    failure = _cond(
        "ReplicaFailure", "FailedCreate", 'pods "ep-7-5d9c-x" is forbidden: exceeded quota: slipway-gpu-quota'
    )
    status = _status(_deployment(3, 2, [failure]), [pod("ep-7-a", "ep-7"), pod("ep-7-b", "ep-7")])
    assert status.state == DeploymentPhase.DEGRADED
    assert status.reason.endswith("exceeded quota: slipway-gpu-quota")


def test_it_fails_an_endpoint_once_the_rollout_gives_up() -> None:
    progress = _cond(
        "Progressing", "ProgressDeadlineExceeded", 'ReplicaSet "ep-7-5d9c" has timed out progressing.', status="False"
    )
    pulling = pod("ep-7-a", "ep-7", phase="Pending", container_statuses=[waiting("ErrImagePull", "manifest unknown")])
    status = _status(_deployment(1, 0, [progress]), [pulling])
    # The controller gave up on a pull before Slipway's limit: the same verdict, with what to check.
    assert (status.state, status.reason, status.abandoned) == (
        DeploymentPhase.FAILED, PULL_HINT.replace("ImagePullBackOff", "ErrImagePull"), True)
    status = _status(_deployment(1, 0, [progress]))
    assert status.reason == 'ProgressDeadlineExceeded: ReplicaSet "ep-7-5d9c" has timed out progressing.'


def test_it_mentions_a_broken_scaledobject() -> None:
    scaled = _scaled("False", "ScaledObjectCheckFailed", "ScaledObject doesn't have correct triggers specification")
    status = _status(_deployment(2, 1), [pod("ep-7-a", "ep-7")], scaled)
    assert status.state == DeploymentPhase.DEGRADED
    assert "ScaledObjectCheckFailed" in status.reason


def test_it_survives_empty_payloads() -> None:
    assert deployment_status(_obs([{"kind": "Deployment"}], workload="ep-7")).state == DeploymentPhase.DEPLOYING


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
    status = deployment_status(_obs(objects, workload="ep-7"))
    assert (status.scaling_limited, status.metric_value) == (limited, value)


def test_replicas_unready_past_the_grace_period_make_the_endpoint_degraded() -> None:
    started = "2026-11-22T10:00:00Z"
    loading = pod("ep-7-5d9c-1", "ep-7", container_statuses=[running_container()])
    loading["status"]["startTime"] = started
    loading["status"]["conditions"] = [_cond("Ready", status="False")]
    obs = _obs([_deployment(2, ready=1), _scaled()], [loading], workload="ep-7")
    soon = parse_time(started) + timedelta(seconds=DEGRADED_GRACE_SECONDS - 1)
    assert deployment_status(obs, soon).state == DeploymentPhase.READY  # still loading its model
    late = parse_time(started) + timedelta(seconds=DEGRADED_GRACE_SECONDS + 1)
    status = deployment_status(obs, late)
    assert (status.state, status.reason) == (DeploymentPhase.DEGRADED,
                                             "1 of 2 replicas ready; 1 not ready for over 10 minutes")
