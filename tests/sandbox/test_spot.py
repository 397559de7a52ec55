"""Spot interruptions: a reclaimed node takes its pods down with the DisruptionTarget condition the
kubelet's node shutdown sets, disappears from the cluster, and can be restored."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from cluster.errors import NotFound
from sandbox import faults
from tests.sandbox.helpers import at, endpoint, observed, ref, run_until, team_objects, training
from workloads.registry import resource_kinds

pytestmark = pytest.mark.django_db

IGNORE_DISRUPTIONS = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def _run(name: str, *, ignore_disruptions: bool) -> list[dict]:
    objects = training(name, duration="300s")  # Slipway's Jobs ignore disruptions (jobs.manifests)
    for obj in objects:
        if obj["kind"] == "Job":
            if ignore_disruptions:
                obj["spec"]["podFailurePolicy"] = IGNORE_DISRUPTIONS
            else:
                obj["spec"].pop("podFailurePolicy", None)
    return objects


def _nodes(backend) -> set[str]:
    return {row.node for row in backend.capacity()}


def test_a_reclaimed_node_stops_its_pods_with_disruption_target_and_disappears(backend):
    backend.apply(team_objects() + _run("run-1", ignore_disruptions=True), resource_kinds(), now=at(0))
    run_until(backend, 0, 30)
    node = backend.pods(ref("run-1"))[0]["spec"]["nodeName"]
    assert faults.reclaim_node(backend, node, now=at(31)) == 1
    backend.tick(at(32))

    assert node not in _nodes(backend)
    first, replacement = sorted(observed(backend, "run-1").pods, key=lambda p: p["metadata"]["creationTimestamp"])
    assert first["status"]["phase"] == "Failed"
    assert (first["status"]["reason"], first["status"]["message"]) == (
        "Terminated", "Pod was terminated in response to imminent node shutdown.")
    disruption = next(c for c in first["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (disruption["status"], disruption["reason"], disruption["lastTransitionTime"]) == (
        "True", "TerminationByKubelet", "2026-11-22T10:00:31Z")
    assert first["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
    # The podFailurePolicy ignores it: no retry spent, no back-off, a new pod at once, elsewhere.
    job = observed(backend, "run-1").first("Job")
    assert "failed" not in job["status"]
    assert replacement["spec"]["nodeName"] != node


def test_without_the_policy_a_disruption_spends_a_retry(backend):
    backend.apply(team_objects() + _run("run-1", ignore_disruptions=False), resource_kinds(), now=at(0))
    run_until(backend, 0, 30)
    faults.reclaim_node(backend, backend.pods(ref("run-1"))[0]["spec"]["nodeName"], now=at(31))
    backend.tick(at(32))
    assert observed(backend, "run-1").first("Job")["status"]["failed"] == 1


def test_an_endpoints_pod_on_a_reclaimed_node_is_replaced_elsewhere(backend):
    backend.apply(team_objects() + endpoint("ep-1"), resource_kinds(), now=at(0))
    run_until(backend, 0, 20)
    [pod] = backend.pods(ref("ep-1"))
    faults.reclaim_node(backend, pod["spec"]["nodeName"], now=at(21))
    backend.tick(at(22))
    [replacement] = backend.pods(ref("ep-1"))
    assert replacement["metadata"]["name"] != pod["metadata"]["name"]
    assert replacement["spec"]["nodeName"] not in ("", pod["spec"]["nodeName"])


def test_a_restored_node_comes_back_and_unknown_nodes_are_refused(backend):
    backend.tick(at(0))
    faults.reclaim_node(backend, "gpu-l4-spot-0", now=at(1))
    backend.tick(at(2))
    assert "gpu-l4-spot-0" not in _nodes(backend)
    assert faults.restore_node(backend, "gpu-l4-spot-0") is True
    assert "gpu-l4-spot-0" in _nodes(backend)
    assert faults.restore_node(backend, "gpu-l4-spot-0") is False
    with pytest.raises(NotFound):
        faults.reclaim_node(backend, "no-such-node", now=at(3))


def test_the_commands_reclaim_and_restore_a_node(backend, capsys):
    call_command("sandbox", "reclaim-node", "gpu-l4-spot-1")
    assert "node gpu-l4-spot-1 reclaimed: 0 pod(s) stopped" in capsys.readouterr().out
    call_command("sandbox", "status")
    assert "gpu-l4-spot-1      reclaimed since" in capsys.readouterr().out
    call_command("sandbox", "restore-node", "gpu-l4-spot-1")
    assert "node gpu-l4-spot-1 restored" in capsys.readouterr().out
    with pytest.raises(CommandError):
        call_command("sandbox", "reclaim-node", "gpu-nowhere-0")
