"""Deployments in the sandbox: readiness delay, ScaledObject-driven replicas, scale to zero,
crash loops, quota, and server logs — mapped through ``inference.status.endpoint_status``."""

from __future__ import annotations

from django.core.management import call_command

from cluster.deployments import DeploymentPhase
from inference.status import endpoint_status
from sandbox.models import SimLoad
from tests.sandbox.helpers import A100, L4, MIG_1G, at, endpoint, observed, ref, team_objects
from workloads.registry import resource_kinds


def _status(backend, workload="ep-1"):
    return endpoint_status(observed(backend, workload))


def _deployment(backend, workload="ep-1"):
    return observed(backend, workload).first("Deployment")


def test_it_becomes_ready_after_the_readiness_delay(backend):
    backend.apply(team_objects() + endpoint("ep-1", initial_delay=30), resource_kinds(), now=at(0))
    backend.set_load(ref("ep-1"), 10)
    backend.tick(at(0))
    assert _status(backend).state == DeploymentPhase.DEPLOYING
    backend.tick(at(10))  # container started, readiness probe not passed yet
    (pod,) = observed(backend, "ep-1").pods
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["ready"] is False
    assert _status(backend).state == DeploymentPhase.DEPLOYING
    backend.tick(at(40))
    status = _status(backend)
    assert (status.state, status.replicas, status.desired_replicas, status.running_units) == (
        DeploymentPhase.READY, 1, 1, 1)
    assert _deployment(backend)["status"]["readyReplicas"] == 1


def test_it_scales_with_load_within_the_scaledobject_bounds(backend):
    backend.apply(team_objects() + endpoint("ep-1", flavor=A100, min_replicas=1, max_replicas=4, target=70),
                  resource_kinds(), now=at(0))
    backend.set_load(ref("ep-1"), 200)  # ceil(200 / 70) = 3
    backend.tick(at(0))
    assert _deployment(backend)["spec"]["replicas"] == 3
    assert len(observed(backend, "ep-1").pods) == 3
    assert _status(backend).scaling_limited is False
    backend.set_load(ref("ep-1"), 1000)  # capped at maxReplicaCount
    backend.tick(at(5))
    assert _deployment(backend)["spec"]["replicas"] == 4
    hpa = observed(backend, "ep-1").first("HorizontalPodAutoscaler")
    assert hpa["metadata"]["name"] == "keda-hpa-ep-1" and hpa["status"]["desiredReplicas"] == 4
    assert _status(backend).scaling_limited is True  # it wants 15: more than the ceiling
    assert _status(backend).metric_value == 1000.0
    backend.set_load(ref("ep-1"), 0)  # floor at minReplicaCount (1): no scale to zero...
    backend.tick(at(50))
    assert _deployment(backend)["spec"]["replicas"] == 4  # ...and only after the scale-down delay (300 s)
    backend.tick(at(50 + 300))
    assert _deployment(backend)["spec"]["replicas"] == 1
    assert len(observed(backend, "ep-1").pods) == 1
    assert _status(backend).state == DeploymentPhase.READY
    messages = [e.message for e in backend.events(ref("ep-1")) if e.reason == "ScalingReplicaSet"]
    assert [m.split(" from ")[1] for m in messages] == ["0 to 3", "3 to 4", "4 to 1"]
    assert messages[0].startswith("Scaled up replica set ep-1-")


def test_it_scales_to_zero_and_back(backend):
    backend.apply(team_objects() + endpoint("ep-1", min_replicas=0, max_replicas=2, metric="requests_per_second",
                                            target=5), resource_kinds(), now=at(0))
    backend.set_load(ref("ep-1"), 0)
    backend.tick(at(0))
    assert _deployment(backend)["spec"]["replicas"] == 0
    assert observed(backend, "ep-1").pods == []
    assert _status(backend).state == DeploymentPhase.SCALED_TO_ZERO
    scaled = observed(backend, "ep-1").first("ScaledObject")
    assert {c["type"]: c["status"] for c in scaled["status"]["conditions"]}["Active"] == "False"
    backend.set_load(ref("ep-1"), 3)
    backend.tick(at(10))
    assert _deployment(backend)["spec"]["replicas"] == 1
    backend.tick(at(60))
    assert _status(backend).state == DeploymentPhase.READY


def test_it_follows_a_default_curve_without_a_pinned_load(backend):
    backend.apply(team_objects() + endpoint("ep-1", min_replicas=1, max_replicas=2), resource_kinds(), now=at(0))
    assert not SimLoad.objects.exists()
    backend.tick(at(0))
    replicas = _deployment(backend)["spec"]["replicas"]
    assert 1 <= replicas <= 2
    scaled = observed(backend, "ep-1").first("ScaledObject")
    assert float(scaled["metadata"]["annotations"]["sandbox.slipway.dev/load"]) > 0


def test_it_crash_loops_a_failing_server(backend):
    backend.apply(team_objects() + endpoint("ep-1", outcome="crashloop", duration="15s"), resource_kinds(), now=at(0))
    backend.set_load(ref("ep-1"), 10)
    backend.tick(at(0))
    backend.tick(at(10))
    backend.tick(at(30))  # ran 15s, crashed at 25s, back-off 10s
    (pod,) = observed(backend, "ep-1").pods
    container = pod["status"]["containerStatuses"][0]
    assert pod["status"]["phase"] == "Running"
    assert container["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert container["lastState"]["terminated"]["reason"] == "Error"
    assert container["lastState"]["terminated"]["exitCode"] == 1
    status = _status(backend)
    assert (status.state, status.reason) == (DeploymentPhase.DEPLOYING, "CrashLoopBackOff (exit 1)")
    assert "BackOff" in [e.reason for e in backend.events(ref("ep-1"))]
    backend.tick(at(700))  # no progress for longer than progressDeadlineSeconds
    assert _status(backend).state == DeploymentPhase.FAILED
    assert observed(backend, "ep-1").pods[0]["status"]["containerStatuses"][0]["restartCount"] >= 4


def test_it_places_mig_endpoints_on_mig_slices(backend):
    backend.apply(team_objects() + endpoint("ep-1", flavor=MIG_1G, min_replicas=2, max_replicas=2), resource_kinds(), now=at(0))
    backend.tick(at(0))
    assert {p["spec"]["nodeName"] for p in observed(backend, "ep-1").pods} == {"gpu-a100-mig-0"}


def test_it_reports_quota_denials_on_the_deployment(backend):
    backend.apply(team_objects((("nvidia.com/gpu", 1),)) + endpoint("ep-1", min_replicas=2, max_replicas=2),
                  resource_kinds(), now=at(0))
    backend.tick(at(0))
    backend.tick(at(45))
    assert len(observed(backend, "ep-1").pods) == 1
    deployment = _deployment(backend)
    failure = next(c for c in deployment["status"]["conditions"] if c["type"] == "ReplicaFailure")
    assert failure["reason"] == "FailedCreate"
    assert "exceeded quota: slipway-gpu-quota" in failure["message"]
    events = [e for e in backend.events(ref("ep-1")) if e.reason == "FailedCreate"]
    assert events and events[0].object.startswith("ReplicaSet/ep-1-")
    status = _status(backend)
    assert status.state == DeploymentPhase.DEGRADED
    assert "exceeded quota" in status.reason


def test_it_writes_access_logs_for_servers(backend):
    backend.apply(team_objects() + endpoint("ep-1", flavor=L4), resource_kinds(), now=at(0))
    backend.set_load(ref("ep-1"), 50)
    backend.tick(at(0))
    backend.tick(at(10))
    [pod] = [p["metadata"]["name"] for p in backend.pods(ref("ep-1"))]
    lines = backend.logs(ref("ep-1"), pod, tail=3, now=at(300))
    assert len(lines) == 3
    assert all('"POST /v1/' in line and "HTTP/1.1" in line for line in lines)


def test_the_server_log_says_the_port_the_endpoint_declares(backend):
    backend.apply(team_objects() + endpoint("ep-1", port=9000), resource_kinds(), now=at(0))
    backend.tick(at(0))
    backend.tick(at(10))
    [pod] = [p["metadata"]["name"] for p in backend.pods(ref("ep-1"))]
    lines = backend.logs(ref("ep-1"), pod, tail=50, now=at(20))
    assert any("Uvicorn running on http://0.0.0.0:9000" in line for line in lines)


def test_it_sets_load_from_the_management_command(backend, capsys):
    backend.apply(team_objects() + endpoint("ep-1", min_replicas=1, max_replicas=3), resource_kinds(), now=at(0))
    call_command("sandbox", "load", "team-ml/ep-1", "150")
    backend.tick(at(0))
    assert _deployment(backend)["spec"]["replicas"] == 3
    call_command("sandbox", "load", "team-ml/ep-1", "auto")
    assert not SimLoad.objects.exists()
    assert "load of team-ml/ep-1 set to auto" in capsys.readouterr().out
