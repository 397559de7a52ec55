"""The kubelet's engines: a real inference engine process (:mod:`sandbox.engine`) for each running endpoint replica.

A simulated cluster runs no container. For a Deployment's pod whose plan has an ``engine`` (every
endpoint's, while ``SLIPWAY_SANDBOX_ENGINES`` is on: :func:`plan`), the tick stands in for the
container runtime and the kubelet's probes:

* **start**: once the pod's container has started (:data:`~sandbox.world.STAGE_STARTED`), :func:`sync`
  starts its engine on 127.0.0.1 and a free port, with the container's ``SLIPWAY_SIM_*`` env (its
  revision's knobs) and nothing else of this process's environment (:func:`core.processes.minimal_env`),
  and records where it listens (:class:`sandbox.models.SimEngine`);
* **readiness**: the pod becomes ready only when its readiness path (the Deployment's
  ``readinessProbe``) answers 200 (:func:`ready`, asked by the kubelet step once the pod's load delay
  is over): the engine answers 503 until its model is loaded (``SLIPWAY_SIM_LOAD_SECONDS``);
* **liveness**: an engine that died is started again and its pod is unready until it answers
  (with the kubelet's ``Unhealthy`` event);
* **stop**: an engine whose pod is gone or no longer runs (scale down, a template change, a delete,
  a reset) is sent SIGTERM; the process that started it reaps it;
* **scrape**: each tick reads the ready engines' ``/metrics`` (:func:`scrape`; at most every
  :data:`SCRAPE_SECONDS`): requests running and
  waiting, and from the counters since the last scrape the busy fraction of its slots (``load``) and
  the requests a second. The pod's simulated GPU utilization follows that load
  (:func:`utilization_shares`, read by :mod:`sandbox.pods`), and the endpoint's autoscaler reads its
  trigger's figure from them (:func:`traffic`): GPU utilization, vLLM's queue, requests a second.

The tick holds its cluster's clock-row lock, so the engines of one cluster are started and stopped by
one process at a time; each probe and scrape waits :data:`PROBE_TIMEOUT` seconds at most, on loopback.
Engines run on the machine whose worker ticks: the sandbox is one machine's simulation.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx
from django.conf import settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from core import processes
from sandbox import engine
from sandbox.bulk import fast_update
from sandbox.models import SimEngine
from sandbox.world import STAGE_READY, STAGE_STARTED, ObjRow, PodRow, World

#: What the engine's command line holds: how a process id is known to be an engine still.
MARKER = b"sandbox.engine"
#: Seconds a readiness probe or a scrape may take.
PROBE_TIMEOUT = 0.5
#: Seconds between two scrapes of an engine, at least (Prometheus scrapes every 15 to 30 s; the reconcile
#: cycle ticks every 5 s).
SCRAPE_SECONDS = 2.0
#: The env names a pod passes to its engine: the simulator's knobs, nothing else of the container's.
SIM_PREFIX = "SLIPWAY_SIM_"

#: The engines this process started, by process id: their cluster (a process may tick several).
_STARTED: dict[int, str] = {}
#: The probes' and scrapes' HTTP client, and the process that made it.
_CLIENT: httpx.Client | None = None
_CLIENT_PID = 0


def enabled() -> bool:
    return bool(settings.SLIPWAY_SANDBOX_ENGINES)


def plan(container: Mapping, env: Mapping[str, str], name: str) -> dict | None:
    """A Deployment pod's engine plan (None: it runs none): its readiness path, served model (``name``, the
    endpoint's, unless its env or arguments name one) and knobs.

    Decided when the Deployment is applied, so that every process agrees on which pods wait for an
    engine's answer before they are ready, whatever its own settings.
    """
    probe = ((container.get("readinessProbe") or {}).get("httpGet") or {}).get("path")
    if not enabled() or not probe:
        return None
    args = [str(a) for a in container.get("args") or []]
    return {"probe": str(probe), "model": engine.served_model(env, args, name),
            "env": {name: value for name, value in env.items() if name.startswith(SIM_PREFIX)}}


def rows(world: World) -> dict[tuple[str, str], SimEngine]:
    """The cluster's engines by (namespace, pod), read once a tick."""
    found = world.engines
    if found is None:
        found = world.engines = {(row.namespace, row.pod): row for row in SimEngine.objects.filter(
            cluster=world.cluster)}
    return found


def _client() -> httpx.Client:
    """One client a process, its connections kept alive (a new client a call costs ~90 ms of TLS set-up)."""
    global _CLIENT
    if _CLIENT is None or os.getpid() != _CLIENT_PID:  # not a client inherited from a forking parent
        _set_client(httpx.Client(timeout=PROBE_TIMEOUT, trust_env=False))
    return _CLIENT


def _set_client(client: httpx.Client) -> None:
    global _CLIENT, _CLIENT_PID
    _CLIENT, _CLIENT_PID = client, os.getpid()


def _get(url: str) -> httpx.Response | None:
    try:
        return _client().get(url)
    except httpx.HTTPError:
        return None


def ready(world: World, pod: PodRow, pod_plan: dict) -> bool:
    """The readiness probe: the pod's engine runs and its readiness path answers 200. A process that runs no
    engines (they were turned off since the endpoint was applied) has no probe: ready by the delay alone."""
    if not enabled():
        return True
    row = rows(world).get((pod.namespace, pod.name))
    if row is None or not processes.alive(row.pid, MARKER):
        return False
    answer = _get(f"{row.address}{pod_plan['engine']['probe']}")
    return answer is not None and answer.status_code == 200


def _wanted(world: World) -> dict[tuple[str, str], tuple[PodRow, ObjRow]]:
    """The pods that should have an engine now: running Deployment pods with an engine plan, not crashing."""
    wanted = {}
    for owner_id, pods in world.pods_by_owner.items():
        owner = world.owners[owner_id]
        if owner.resource_kind != "Deployment" or not owner.plan["pods"][0].get("engine"):
            continue
        for pod in pods:
            if pod.active and pod.phase == "Running" and pod.stage in (STAGE_STARTED, STAGE_READY):
                wanted[(pod.namespace, pod.name)] = (pod, owner)
    return wanted


def sync(world: World) -> None:
    """Start the engines that should run, stop the others, and scrape the ready ones (see the module).
    Nothing at all, not a query, while engines are off."""
    if not enabled():
        return
    wanted = _wanted(world)
    processes.reap()  # the engines this process started that exited (another worker's tick may have stopped them)
    found = rows(world)
    for key in [key for key in found if key not in wanted]:
        stop(found.pop(key))
    known = {row.pid for row in found.values()}
    for pid, cluster in list(_STARTED.items()):  # ours, with no row (a rolled-back tick's): stopped
        if cluster == world.cluster and pid not in known:
            processes.stop(pid, MARKER)
            del _STARTED[pid]
    scraped = []
    for key, (pod, owner) in wanted.items():
        row = found.get(key)
        if row is not None and not processes.alive(row.pid, MARKER):
            _died(world, pod, row)
            del found[key]
            row = None
        if row is None:
            found[key] = start(world, pod, owner)
        elif pod.stage == STAGE_READY and due(row) and scrape(row):
            scraped.append(row)
    fast_update(SimEngine, scraped, ["scraped_at", "running", "waiting", "requests", "occupancy", "load", "rate"])


def due(row: SimEngine) -> bool:
    """Whether the engine's last scrape is :data:`SCRAPE_SECONDS` old (ticks may come closer than that)."""
    return row.scraped_at is None or time.time() - row.scraped_at >= SCRAPE_SECONDS


def start(world: World, pod: PodRow, owner: ObjRow) -> SimEngine:
    """Start the engine of ``pod`` and record where it listens."""
    engine_plan = owner.plan["pods"][0]["engine"]
    port = processes.free_port()
    log = Path(settings.VAR_DIR) / "sandbox" / "engines" / f"{world.cluster}-{pod.namespace}-{pod.name}.log"
    pid = processes.start(
        [sys.executable, "-m", "sandbox.engine", "--port", str(port), "--model", engine_plan["model"],
         "--name", pod.name, "--readiness-path", engine_plan["probe"], "--parent", str(os.getpid())],
        env=processes.minimal_env(engine_plan["env"]), cwd=settings.BASE_DIR, log=log)
    _STARTED[pid] = world.cluster
    return SimEngine.objects.create(cluster=world.cluster, namespace=pod.namespace, workload=pod.workload,
                                    pod=pod.name, pid=pid, port=port, started_at=timezone.now())


def stop(row: SimEngine) -> None:
    processes.stop(row.pid, MARKER)
    _STARTED.pop(row.pid, None)
    row.delete()


def stop_all(cluster: str) -> None:
    """Stop every engine of ``cluster`` (its reset)."""
    for row in SimEngine.objects.filter(cluster=cluster):
        stop(row)


def _died(world: World, pod: PodRow, row: SimEngine) -> None:
    """Its engine is gone: the pod is unready until the new one answers, as a failing readiness probe makes it."""
    row.delete()
    _STARTED.pop(row.pid, None)
    if pod.stage == STAGE_READY:
        pod.stage, pod.ready_at = STAGE_STARTED, None
        world.touch(pod)
        probe = world.owners[pod.owner_id].plan["pods"][0]["engine"]["probe"]
        world.event(pod, f"Pod/{pod.name}", "Warning", "Unhealthy",
                    f'Readiness probe failed: Get "http://127.0.0.1:{row.port}{probe}": connection refused')


def scrape(row: SimEngine) -> bool:
    """Read the engine's /metrics into ``row`` (False: it did not answer): its gauges, and since the last scrape
    the busy fraction of its slots and the requests a second."""
    answer = _get(f"{row.address}/metrics")
    if answer is None or answer.status_code != 200:
        return False
    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(answer.text):
            for sample in family.samples:
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    except ValueError:
        return False
    now = time.time()
    requests = values.get(f"{engine.SUCCESS}_total", 0.0) + values.get(f"{engine.ERRORS}_total", 0.0)
    occupancy = values.get(f"{engine.OCCUPANCY}_total", 0.0)
    elapsed = now - row.scraped_at if row.scraped_at is not None else 0.0
    if elapsed > 0 and occupancy >= row.occupancy and requests >= row.requests:
        row.load = min(max((occupancy - row.occupancy) / elapsed, 0.0), 1.0)
        row.rate = (requests - row.requests) / elapsed
    else:  # its first scrape (or it restarted): the instant's figure
        row.load, row.rate = min(max(values.get(engine.CACHE, 0.0), 0.0), 1.0), 0.0
    row.running, row.waiting = int(values.get(engine.RUNNING, 0)), int(values.get(engine.WAITING, 0))
    row.requests, row.occupancy, row.scraped_at = requests, occupancy, now
    return True


#: The autoscaler's trigger names (the ScaledObject plan's ``metric``) whose figure the engines give.
TRIGGER_FIGURES = {
    "gpu-utilization": lambda row: 100.0 * row.load,  # the query sums the replicas' utilization
    "queue-length": lambda row: float(row.waiting),  # vLLM's: sum(vllm:num_requests_waiting)
    "requests-per-second": lambda row: row.rate,
}


def traffic(world: World, dep: ObjRow, scaled_plan: dict) -> float | None:
    """The figure of the endpoint's trigger (``scaled_plan["metric"]``) from its engines' last scrapes.

    None — the caller falls back to the demo curve — when its replicas run no engine, or for a trigger
    the engines cannot answer (a user's Prometheus query, the gateway's series). No engine read yet is no
    traffic (0): an endpoint asleep at zero replicas stays asleep until a request is held for it at a gateway
    (:mod:`sandbox.controllers.scaledobject`, docs/serving.md "Autoscaling on traffic, waking from zero").
    """
    figure = TRIGGER_FIGURES.get(scaled_plan.get("metric", ""))
    if figure is None or not dep.plan["pods"][0].get("engine") or not enabled():
        return None
    return round(sum(figure(row) for row in rows(world).values() if row.namespace == dep.namespace
                     and row.workload == dep.workload and row.scraped_at is not None), 3)


def utilization_shares(cluster: str) -> dict[tuple[str, str], float]:
    """The busy fraction of each scraped engine of ``cluster``, by (namespace, pod): what its GPU's
    utilization follows. One query; none while engines are off and none ran."""
    if not enabled() and not _STARTED:
        return {}
    return {(namespace, pod): load for namespace, pod, load in SimEngine.objects.filter(
        cluster=cluster, scraped_at__isnull=False).values_list("namespace", "pod", "load")}
