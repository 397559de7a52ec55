"""inference.status: an endpoint's stable Deployment's state (cluster.deployments), billed with its candidate's
pods, with the revision it serves and the candidate's ready replicas.

Payloads are trimmed copies of what the API server returns (tests/cluster/observations.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from cluster.deployments import DeploymentPhase
from inference.status import endpoint_status
from tests.cluster.observations import T0
from tests.cluster.observations import condition as _cond
from tests.cluster.observations import deployment as _deployment
from tests.cluster.observations import observed as _obs
from tests.cluster.observations import scaled_object as _scaled
from tests.cluster.samples import pod, running_container


def test_it_reports_nothing_when_the_stable_deployment_is_gone() -> None:
    assert endpoint_status(_obs([], workload="ep-7")) is None


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
    assert (status.state, status.replicas, status.desired_replicas) == (DeploymentPhase.READY, 2, 2)
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
