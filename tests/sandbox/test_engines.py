"""The sandbox's kubelet runs a real engine for each running endpoint replica (sandbox/engines.py): started with
the container and a minimal environment, ready only when its readiness path answers, scraped so that the
pod's GPU utilization and the autoscaler follow its traffic, restarted when it dies, stopped with its pod."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import httpx
import pytest

from cluster.deployments import DeploymentPhase
from core import processes
from inference.manifests import build_endpoint
from inference.specs import EndpointSpec
from inference.status import endpoint_status
from sandbox import engines
from sandbox.models import SimEngine, SimEvent
from tests.e2e.conftest import wait_for
from tests.sandbox.helpers import CONFIG, L4, NS, TEAM, at, observed, ref, team_objects
from workloads.registry import resource_kinds

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture
def sandbox(backend, settings, tmp_path):
    """The sandbox with real engines; every engine stopped after the test."""
    settings.SLIPWAY_SANDBOX_ENGINES = True
    settings.VAR_DIR = tmp_path
    yield backend
    pids = list(SimEngine.objects.values_list("pid", flat=True))
    engines.stop_all(backend.cluster)
    wait_for(lambda: not any(processes.alive(pid, engines.MARKER) for pid in pids), timeout=10, interval=0.05,
             what="the engines to stop")
    processes.reap()


def serving(name: str = "ep-1", *, max_replicas: int = 1, metric: str = "gpu_utilization", target: float = 70.0,
            **knobs: str) -> list[dict]:
    env = {"SLIPWAY_SIM_LOAD_SECONDS": "1", **knobs}
    spec = EndpointSpec(object_name=name, team=TEAM, namespace=NS, name=f"{name} endpoint",
                        image="registry.example.com/ml/serve:2.1", flavor=L4, env=tuple(env.items()),
                        args=("--served-model-name", "tiny-llama"), min_replicas=1, max_replicas=max_replicas,
                        metric=metric, target=target, engine="vllm" if metric == "queue_length" else None)
    return build_endpoint(spec, CONFIG)


class Clock:
    """Simulated time that moves 1 s a tick (the engines' own time is the real one)."""

    def __init__(self, backend) -> None:
        self.backend, self.t = backend, 0.0

    def tick(self, seconds: float = 1.0) -> None:
        self.t += seconds
        self.backend.tick(at(self.t))

    def until(self, predicate, what: str, timeout: float = 30):
        def step():
            self.tick()
            return predicate()
        return wait_for(step, timeout=timeout, interval=0.1, what=what)


def answer_of(url: str) -> int | None:
    """The status ``url`` answers with, None while nothing listens."""
    try:
        return httpx.get(url, timeout=1).status_code
    except httpx.HTTPError:
        return None


def answer_json(url: str) -> dict | None:
    """What ``url`` answers once it answers 200, None before."""
    try:
        answer = httpx.get(url, timeout=1)
    except httpx.HTTPError:
        return None
    return answer.json() if answer.status_code == 200 else None


def pod_of(backend, name: str = "ep-1") -> dict:
    (pod,) = observed(backend, name).pods
    return pod


def ready(backend, name: str = "ep-1") -> bool:
    return pod_of(backend, name)["status"]["containerStatuses"][0]["ready"]


def utilization(backend, name: str = "ep-1") -> int:
    return int(pod_of(backend, name)["metadata"]["annotations"]["sandbox.slipway.dev/gpu-utilization"])


def started(backend, name: str = "ep-1", knobs: dict | None = None) -> tuple[Clock, SimEngine]:
    """Apply the endpoint, tick its pod to a started container; its engine."""
    backend.apply(team_objects() + serving(name, **(knobs or {})), resource_kinds(), now=at(0))
    clock = Clock(backend)
    clock.tick(0)  # its pod is made and scheduled
    clock.tick(11)  # its image pulled, its container started: the engine starts
    return clock, SimEngine.objects.get(workload=name)


def test_a_replica_is_ready_only_once_its_engine_answers(sandbox):
    clock, row = started(sandbox, knobs={"SLIPWAY_SIM_LOAD_SECONDS": "3"})
    assert processes.alive(row.pid, engines.MARKER)
    # Its load delay is over in the simulated time, but the engine still loads its model (3 s of real time).
    assert wait_for(lambda: answer_of(f"{row.address}/health/ready"), timeout=10, interval=0.05,
                    what="the engine to listen") == 503
    clock.tick(10)
    assert not ready(sandbox)
    assert endpoint_status(observed(sandbox, "ep-1")).state == DeploymentPhase.DEPLOYING
    clock.until(lambda: ready(sandbox), "the replica to be ready")
    assert endpoint_status(observed(sandbox, "ep-1")).state == DeploymentPhase.READY
    # It answers the OpenAI API where its row says, under the model name its arguments give.
    answer = httpx.post(f"{row.address}/v1/completions", json={"model": "tiny-llama", "prompt": "hi", "max_tokens": 3})
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 3


def test_without_a_model_argument_it_serves_the_endpoints_name(sandbox):
    spec_objects = serving("ep-2")
    spec_objects[0]["spec"]["template"]["spec"]["containers"][0].pop("args")
    sandbox.apply(team_objects() + spec_objects, resource_kinds(), now=at(0))
    clock = Clock(sandbox)
    clock.tick(0)
    clock.tick(11)
    row = SimEngine.objects.get(workload="ep-2")
    models = wait_for(lambda: answer_json(f"{row.address}/v1/models"), timeout=10, interval=0.1, what="the model")
    assert [m["id"] for m in models["data"]] == ["ep-2 endpoint"]


def test_the_engine_gets_its_revisions_knobs_and_no_secret_of_this_process(sandbox, monkeypatch):
    monkeypatch.setenv("SLIPWAY_TEST_PLATFORM_SECRET", "do-not-leak")
    _, row = started(sandbox, knobs={"SLIPWAY_SIM_TOKEN_MS": "7", "HF_TOKEN": "the-users-own"})
    environ = dict(item.split("=", 1) for item in
                   Path(f"/proc/{row.pid}/environ").read_bytes().decode().split("\0") if "=" in item)
    assert environ["SLIPWAY_SIM_TOKEN_MS"] == "7" and environ["SLIPWAY_SIM_LOAD_SECONDS"] == "1"
    assert "SLIPWAY_TEST_PLATFORM_SECRET" not in environ and "HF_TOKEN" not in environ
    assert "DATABASE_URL" not in environ and "DJANGO_SETTINGS_MODULE" not in environ
    assert set(environ) <= {*processes.INHERITED, "PYTHONUNBUFFERED", "SLIPWAY_SIM_TOKEN_MS", "SLIPWAY_SIM_LOAD_SECONDS"}


def test_its_gpu_utilization_and_autoscaler_follow_its_traffic(sandbox):
    clock, row = started(sandbox, knobs={"SLIPWAY_SIM_TOKEN_MS": "50", "SLIPWAY_SIM_MAX_CONCURRENCY": "2"})
    clock.until(lambda: ready(sandbox), "the replica to be ready")
    clock.tick()
    clock.tick()  # two scrapes without traffic
    assert utilization(sandbox) < 5  # idle: what the idle alerts see
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                client.post(f"{row.address}/v1/completions",
                            json={"model": "tiny-llama", "prompt": "go", "max_tokens": 20})

    callers = [threading.Thread(target=load) for _ in range(3)]
    for caller in callers:
        caller.start()
    try:
        # Both slots busy: the GPU's utilization rises, and the autoscaler (GPU utilization, 70 a replica)
        # asks for a second replica.
        clock.until(lambda: utilization(sandbox) > 80, "the GPU utilization to rise")
        clock.until(lambda: endpoint_status(observed(sandbox, "ep-1")).scaling_limited, "the autoscaler to want more")
        assert endpoint_status(observed(sandbox, "ep-1")).metric_value > 70
        hpa = observed(sandbox, "ep-1").first("HorizontalPodAutoscaler")
        assert hpa["status"]["desiredReplicas"] == 1  # the endpoint's maximum is 1: it wants more, capped
    finally:
        stop.set()
        for caller in callers:
            caller.join(timeout=30)


def test_the_queue_metric_reads_the_engines_waiting_requests(sandbox):
    sandbox.apply(team_objects() + serving("ep-q", max_replicas=3, metric="queue_length", target=2,
                                           SLIPWAY_SIM_TOKEN_MS="125", SLIPWAY_SIM_MAX_CONCURRENCY="1"),
                  resource_kinds(), now=at(0))
    clock = Clock(sandbox)
    clock.tick(0)
    clock.tick(11)
    clock.until(lambda: ready(sandbox, "ep-q"), "the replica to be ready")
    row = SimEngine.objects.get(workload="ep-q")
    callers = [threading.Thread(target=httpx.post, args=(f"{row.address}/v1/completions",),
                                kwargs={"json": {"model": "tiny-llama", "prompt": "x", "max_tokens": 8},
                                        "timeout": 60}) for _ in range(10)]
    for caller in callers:
        caller.start()
    try:
        # A second each, one at a time: 1 running and 5 to 9 waiting for 4 s; ceil(5 / 2) = 3 replicas.
        clock.until(lambda: observed(sandbox, "ep-q").first("Deployment")["spec"]["replicas"] == 3,
                    "the autoscaler to follow the queue")
    finally:
        for caller in callers:
            caller.join(timeout=60)


def test_a_dead_engine_makes_its_replica_unready_until_a_new_one_answers(sandbox):
    clock, row = started(sandbox)
    clock.until(lambda: ready(sandbox), "the replica to be ready")
    clock.tick(700)  # stable for longer than the Deployment's progress deadline (600 s)
    os.kill(row.pid, signal.SIGKILL)  # as a restart of make run leaves every engine dead
    wait_for(lambda: not processes.alive(row.pid, engines.MARKER), timeout=10, interval=0.05, what="the kill")
    clock.tick()
    assert not ready(sandbox)
    assert SimEvent.objects.filter(reason="Unhealthy", object__startswith="Pod/ep-1-").exists()
    # The Deployment sees it a tick later (its new engine loads for 1 s). Progress is measured from the
    # replica's loss, not from its last progress long ago: no failure.
    clock.tick()
    assert not ready(sandbox)
    progressing = {c["type"]: c for c in observed(sandbox, "ep-1").first("Deployment")["status"]["conditions"]}
    assert progressing["Progressing"]["reason"] != "ProgressDeadlineExceeded"
    assert endpoint_status(observed(sandbox, "ep-1")).state != DeploymentPhase.FAILED
    new = SimEngine.objects.get(workload="ep-1")
    assert new.pid != row.pid and processes.alive(new.pid, engines.MARKER)
    clock.until(lambda: ready(sandbox), "the replica to be ready again")


def test_its_engine_stops_with_its_pod(sandbox):
    clock, row = started(sandbox)
    clock.until(lambda: ready(sandbox), "the replica to be ready")
    sandbox.delete(ref("ep-1"), resource_kinds(), now=at(clock.t))
    clock.tick()
    assert not SimEngine.objects.exists()
    wait_for(lambda: not processes.alive(row.pid, engines.MARKER), timeout=10, interval=0.05, what="the engine to stop")


def test_a_reset_stops_the_clusters_engines(sandbox):
    _, row = started(sandbox)
    sandbox.reset()
    assert not SimEngine.objects.exists()
    wait_for(lambda: not processes.alive(row.pid, engines.MARKER), timeout=10, interval=0.05, what="the engine to stop")


def test_without_engines_a_replica_is_ready_by_its_delay_alone(backend, settings):
    settings.SLIPWAY_SANDBOX_ENGINES = False
    backend.apply(team_objects() + serving(), resource_kinds(), now=at(0))
    backend.tick(at(15))
    backend.tick(at(30))
    assert ready(backend) and not SimEngine.objects.exists()


def test_engines_turned_off_after_the_apply_leave_readiness_to_the_delay(backend, settings):
    settings.SLIPWAY_SANDBOX_ENGINES = True
    backend.apply(team_objects() + serving(), resource_kinds(), now=at(0))
    settings.SLIPWAY_SANDBOX_ENGINES = False  # the worker that ticks runs none
    backend.tick(at(15))
    backend.tick(at(30))
    assert ready(backend) and not SimEngine.objects.exists()
