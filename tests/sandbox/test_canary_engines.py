"""An endpoint's candidate on the sandbox runs real engines of its own, with its revision's knobs: a candidate
that answers every request 500 beside a stable revision that answers 200, and its engine stopped with it."""

from __future__ import annotations

import httpx
import pytest

from cluster.deployments import DeploymentPhase
from core import processes
from inference.manifests import build_endpoint
from inference.specs import CanarySpec, EndpointSpec
from inference.status import endpoint_status
from sandbox import engines
from sandbox.models import SimEngine
from tests.e2e.conftest import wait_for
from tests.sandbox.helpers import CONFIG, L4, NS, TEAM, at, observed, team_objects
from tests.sandbox.test_engines import Clock, sandbox  # noqa: F401  (the engines-on sandbox fixture)
from workloads.registry import kind_for, resource_kinds

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def spec(canary: bool) -> EndpointSpec:
    env = (("SLIPWAY_SIM_LOAD_SECONDS", "1"),)
    return EndpointSpec(
        object_name="ep-1", team=TEAM, namespace=NS, name="chat", image="registry.example.com/ml/serve:2.1", flavor=L4,
        env=env, args=("--served-model-name", "tiny-llama"), min_replicas=1, max_replicas=1, revision=1,
        canary=CanarySpec(revision=2, image="registry.example.com/ml/serve:2.2", replicas=1,
                          args=("--served-model-name", "tiny-llama"),
                          env=(*env, ("SLIPWAY_SIM_ERROR_RATE", "1"))) if canary else None)


def answer(row: SimEngine) -> int:
    return httpx.post(f"{row.address}/v1/completions", json={"model": "tiny-llama", "prompt": "hi", "max_tokens": 2},
                      timeout=5).status_code


def test_the_candidate_runs_its_own_engine_with_its_revisions_knobs(sandbox):  # noqa: F811
    sandbox.apply(team_objects() + build_endpoint(spec(canary=True), CONFIG), resource_kinds(), now=at(0))
    clock = Clock(sandbox)

    def both_ready() -> bool:
        status = endpoint_status(observed(sandbox, "ep-1"))
        return status is not None and status.state == DeploymentPhase.READY and status.canary_ready == 1

    clock.until(both_ready, "the stable and the candidate replica to be ready")
    rows = {row.pod.startswith("ep-1-canary-"): row for row in SimEngine.objects.filter(workload="ep-1")}
    assert set(rows) == {True, False}  # one engine each
    assert answer(rows[False]) == 200 and answer(rows[True]) == 500

    # The candidate deleted by name: its engine stops with its pod; the stable one serves on.
    canary = [(r, "ep-1-canary") for r in kind_for("ep").resources if r.kind in ("Deployment", "Service")]
    assert sandbox.delete_objects(NS, canary) == 2
    gone = rows[True].pid
    clock.tick()
    wait_for(lambda: not processes.alive(gone, engines.MARKER), timeout=10, interval=0.05, what="its engine to stop")
    assert list(SimEngine.objects.filter(workload="ep-1").values_list("pod", flat=True)) == [rows[False].pod]
    assert answer(rows[False]) == 200
