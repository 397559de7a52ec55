"""The sandbox scripts each stage of a replica's start from its revision's env (sandbox/simulation.py
``start_delays``): the scheduler's delay, the image's pull, the container's start and the model's load, each
shown as a real cluster shows it — the pod's conditions, its container's ``startedAt`` and the kubelet's
``Pulled`` event, which the observation carries while the pod starts (cluster/startup.py reads them)."""

from __future__ import annotations

import pytest

from cluster.startup import replica_starts
from inference.manifests import build_endpoint
from inference.specs import EndpointSpec
from sandbox.simulation import DEFAULT_PULL_SECONDS, DEFAULT_START_SECONDS, MAX_START_DELAY_SECONDS, start_delays
from sandbox.timestamps import rfc3339
from tests.sandbox.helpers import CONFIG, L4, NS, TEAM, at, observed, team_objects
from tests.sandbox.test_engines import ready, sandbox, started  # noqa: F401 - sandbox: the fixture with real engines
from workloads.registry import resource_kinds

pytestmark = pytest.mark.django_db


def serving(**knobs: str) -> list[dict]:
    spec = EndpointSpec(object_name="ep-1", team=TEAM, namespace=NS, name="ep-1 endpoint",
                        image="registry.example.com/ml/serve:2.1", flavor=L4, env=tuple(knobs.items()),
                        min_replicas=1, max_replicas=1)
    return build_endpoint(spec, CONFIG)


def stages_at(backend, seconds: float) -> dict[str, float]:
    backend.tick(at(seconds))
    obs = observed(backend, "ep-1")
    (start,) = replica_starts(obs, at(seconds))
    return {stage: (t - at(0)).total_seconds() for stage, t in start.stages.items()}


def test_each_stage_comes_when_the_revisions_env_says(backend):
    backend.apply(team_objects() + serving(SLIPWAY_SIM_SCHEDULE_SECONDS="12", SLIPWAY_SIM_PULL_SECONDS="45s",
                                           SLIPWAY_SIM_START_SECONDS="3", SLIPWAY_SIM_LOAD_SECONDS="1m"),
                  resource_kinds(), now=at(0))
    assert stages_at(backend, 0) == {}  # created, not bound: its scheduling delay runs
    assert stages_at(backend, 10) == {}
    assert stages_at(backend, 15) == {"scheduled": 15}  # the first tick past 12 s binds it
    # Until the container starts, the pull's end is not known (a real kubelet's Pulled comes with it).
    assert stages_at(backend, 61) == {"scheduled": 15}
    assert stages_at(backend, 65) == {"scheduled": 15, "image_pulled": 60, "container_started": 63}
    assert stages_at(backend, 120) == {"scheduled": 15, "image_pulled": 60, "container_started": 63}
    assert stages_at(backend, 125) == {"scheduled": 15, "image_pulled": 60, "container_started": 63,
                                       "model_loaded": 123, "ready": 123}
    pod = observed(backend, "ep-1").pods[0]
    events = [(e.reason, e.time) for e in observed(backend, "ep-1").pod_events]
    assert events == [("Pulled", rfc3339(at(60)))]
    assert pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] == rfc3339(at(63))


def test_without_knobs_a_pod_starts_as_before_and_a_bad_value_is_its_default():
    assert start_delays({}) == (0, DEFAULT_PULL_SECONDS, DEFAULT_START_SECONDS) == (0, 9, 1)
    assert start_delays({"SLIPWAY_SIM_PULL_SECONDS": "soon", "SLIPWAY_SIM_START_SECONDS": "-2"}) == (0, 9, 1)
    assert start_delays({"SLIPWAY_SIM_SCHEDULE_SECONDS": "2h", "SLIPWAY_SIM_PULL_SECONDS": "1m30s"}) == (
        MAX_START_DELAY_SECONDS, 90, 1)


@pytest.mark.slow
def test_with_a_real_engine_ready_is_when_the_kubelets_probe_saw_it_answer(sandbox):  # noqa: F811
    """The model is loaded ``SLIPWAY_SIM_LOAD_SECONDS`` after the container's start (ContainersReady); the pod
    is Ready at the tick whose probe got the engine's 200 (the engine loads in real seconds), never before."""
    clock, _row = started(sandbox, knobs={"SLIPWAY_SIM_LOAD_SECONDS": "1", "SLIPWAY_SIM_PULL_SECONDS": "8"})
    clock.until(lambda: ready(sandbox), "the replica to be ready")
    (start,) = replica_starts(observed(sandbox, "ep-1"), at(clock.t))
    offsets = {stage: (t - at(0)).total_seconds() for stage, t in start.stages.items()}
    assert list(offsets) == ["scheduled", "image_pulled", "container_started", "model_loaded", "ready"]
    assert (offsets["scheduled"], offsets["image_pulled"], offsets["container_started"]) == (0, 8, 9)
    assert offsets["model_loaded"] == 10  # its load's end in the simulated time
    assert 11 <= offsets["ready"] <= clock.t  # the first tick after it whose probe passed
