"""The gateway against calling the engine directly, in the same run, on loopback; and a key's revocation.

Run ``.venv/bin/python bench/gateway.py [--seconds 3] [--rounds 3] [--clients 8,64]``. It creates a scratch
database next to ``DATABASE_URL`` (or ``postgres://postgres@127.0.0.1:5432/test``) with one team, one ready
endpoint and its keys, starts a real engine (``python -m sandbox.engine``: 5 ms to the first token, 1 ms a
token, 4 tokens an answer, 256 requests at once) recorded as the endpoint's ready replica as the sandbox's tick
records it, and two gateway processes (``manage.py gateway``) on it, with Redis (``SLIPWAY_BENCH_REDIS_URL``).

For each number of concurrent clients (keep-alive connections, one request at a time each), ``--rounds``
rounds of two phases — the engine directly, then through the gateway, the order alternating from round to
round — of ``--seconds`` each: requests a second and p50/p95 latency. It prints the medians over the rounds of
the added latency (gateway − direct, p50 and p95) and of the throughput ratio (gateway / direct), against the
targets (added p50 ≤ 2 ms and p95 ≤ 5 ms at 8 clients, throughput ≥ 0.5 of direct). Then it revokes a key
``--revocations`` times and measures how long until both gateways answer 401 (target ≤ 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from admission import DEFAULT_URL, TEMPLATE_ENV, recreate_database, scratch_dir  # noqa: E402

REDIS = os.environ.get("SLIPWAY_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
MODEL = "bench-model"
BODY = {"model": MODEL, "prompt": "Measure the gateway", "max_tokens": 4, "seed": 1}
TARGETS = {"added p50 ms": 2.0, "added p95 ms": 5.0, "throughput ratio": 0.5, "revocation s": 5.0}


def scratch_url(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/') or 'postgres'}_bench_gateway"
    return urlunsplit(parts._replace(path=f"/{name}")), name


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(predicate, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def status_of(url: str, headers: dict | None = None) -> int | None:
    import httpx

    try:
        return httpx.get(url, headers=headers, timeout=2).status_code
    except httpx.HTTPError:
        return None


def seed(engine_port: int) -> tuple[str, str]:
    """A team, a ready endpoint served by the engine (its sandbox rows as the tick writes them), and a key."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from cluster.manifests.common import labels
    from fleet.services import default_cluster
    from inference.models import ApiKey, InferenceEndpoint
    from quotas.demo import seed_flavors
    from sandbox.models import SimEngine, SimObject, SimPod
    from sandbox.world import STAGE_READY
    from teams.models import Team, hash_token

    flavor = seed_flavors()[0]
    team = Team.objects.create(slug="bench", name="Bench", namespace="team-bench")
    endpoint = InferenceEndpoint.objects.create(team=team, created_by=get_user_model().objects.create_user("bench"), name="chat", flavor=flavor,
                                                state="ready", image="registry.example.com/serve:1")
    cluster, now, name = default_cluster().name, timezone.now(), endpoint.object_name
    selector = labels(team.slug, name)
    SimObject.objects.create(cluster=cluster, resource_kind="Service", api_version="v1", namespace=team.namespace, name=name,
                             workload=name, team=team.slug, uid=secrets.token_hex(8), created_at=now,
                             manifest={"spec": {"selector": selector}})
    deployment = SimObject.objects.create(
        cluster=cluster, resource_kind="Deployment", api_version="apps/v1", namespace=team.namespace, name=name, workload=name,
        team=team.slug, uid=secrets.token_hex(8), created_at=now,
        manifest={"spec": {"template": {"metadata": {"labels": selector}}}})
    SimPod.objects.create(cluster=cluster, owner=deployment, namespace=team.namespace, name=f"{name}-0", workload=name,
                          phase="Running", stage=STAGE_READY, created_at=now)
    SimEngine.objects.create(cluster=cluster, namespace=team.namespace, workload=name, pod=f"{name}-0", pid=os.getpid(),
                             port=engine_port, started_at=now)
    raw = "sw-" + secrets.token_urlsafe(32)
    ApiKey.objects.create(team=team, endpoint=endpoint, name="bench", prefix=raw[:12], digest=hash_token(raw),
                          created_at=now, updated_at=now)
    return f"/{team.slug}/{endpoint.name}", raw


def new_key() -> tuple[str, int]:
    from django.utils import timezone

    from inference.models import ApiKey
    from teams.models import Team, hash_token

    raw, now = "sw-" + secrets.token_urlsafe(32), timezone.now()
    key = ApiKey.objects.create(team=Team.objects.get(slug="bench"), name="revoked", prefix=raw[:12],
                                digest=hash_token(raw), created_at=now, updated_at=now)
    return raw, key.pk


def revoke(pk: int) -> None:
    from django.utils import timezone

    from inference.models import ApiKey

    ApiKey.objects.filter(pk=pk).update(revoked_at=timezone.now(), updated_at=timezone.now())


async def phase(url: str, headers: dict, clients: int, seconds: float) -> tuple[float, list[float]]:
    """``clients`` keep-alive connections posting :data:`BODY` for ``seconds``; (requests/s, latencies in ms)."""
    import aiohttp

    latencies: list[float] = []
    failures = 0
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def one() -> None:
            nonlocal failures
            async with session.post(url, json=BODY, headers=headers) as answer:
                await answer.read()
                if answer.status != 200:
                    failures += 1

        await asyncio.gather(*(one() for _ in range(clients)))  # warm the connections
        stop = time.perf_counter() + seconds

        async def client() -> None:
            while True:  # one request at least, however short the phase
                started = time.perf_counter()
                await one()
                latencies.append((time.perf_counter() - started) * 1000)
                if time.perf_counter() >= stop:
                    break

        began = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        elapsed = time.perf_counter() - began
    if failures:
        raise SystemExit(f"{failures} requests failed against {url}")
    return len(latencies) / elapsed, latencies


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", default="8,64")
    parser.add_argument("--revocations", type=int, default=3)
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]

    url, name = scratch_url(os.environ.get("DATABASE_URL", "") if os.environ.get("DATABASE_URL", "").startswith(
        ("postgres://", "postgresql://")) else DEFAULT_URL)
    recreate_database(url, name)
    tmp = scratch_dir("slipway-bench-gateway-")
    env = {key: value for key, value in os.environ.items() if key not in ("DJANGO_SETTINGS_MODULE", "DEBUG")}
    env.update(DATABASE_URL=url, REDIS_URL=REDIS, DJANGO_SETTINGS_MODULE="portal.settings", SLIPWAY_VAR_DIR=str(tmp))
    os.environ.update(env)
    if not os.environ.get(TEMPLATE_ENV):
        subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    import redis

    redis.Redis.from_url(REDIS).flushdb()
    children: list[subprocess.Popen] = []
    try:
        engine_port = free_port()
        children.append(subprocess.Popen(
            [sys.executable, "-m", "sandbox.engine", "--port", str(engine_port), "--model", MODEL],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            env={"PATH": os.environ.get("PATH", ""), "SLIPWAY_SIM_LOAD_SECONDS": "0", "SLIPWAY_SIM_TTFT_MS": "5",
                 "SLIPWAY_SIM_TOKEN_MS": "1", "SLIPWAY_SIM_MAX_CONCURRENCY": "256"}))
        direct = f"http://127.0.0.1:{engine_port}"
        wait_until(lambda: status_of(f"{direct}/health") == 200, "the engine")
        path, raw = seed(engine_port)
        gateways = []
        for index in range(2):
            port = free_port()
            log = open(tmp / f"gateway-{index}.log", "wb")  # noqa: SIM115 - closed with the process
            children.append(subprocess.Popen([sys.executable, "manage.py", "gateway", "--bind", f"127.0.0.1:{port}"],
                                             cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
            gateways.append(f"http://127.0.0.1:{port}")
        auth = {"Authorization": f"Bearer {raw}"}
        for base in gateways:
            wait_until(lambda base=base: status_of(f"{base}{path}/v1/models", auth) == 200, f"gateway {base}")

        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"engine: 5 ms to the first token, 1 ms a token, {BODY['max_tokens']} tokens; {args.rounds} rounds of "
              f"{args.seconds:g} s a phase")
        results = {}
        for clients in counts:
            added50, added95, ratios, rates, cpu_ms = [], [], [], {"direct": [], "gateway": []}, []
            for round_ in range(args.rounds):
                order = ("direct", "gateway") if round_ % 2 == 0 else ("gateway", "direct")
                figures = {}
                for which in order:
                    target = f"{direct}/v1/completions" if which == "direct" else f"{gateways[0]}{path}/v1/completions"
                    cpu = cpu_seconds(children[1].pid)
                    rate, latencies = asyncio.run(phase(target, auth if which == "gateway" else {}, clients,
                                                        args.seconds))
                    if which == "gateway":
                        cpu_ms.append((cpu_seconds(children[1].pid) - cpu) * 1000 / len(latencies))
                    figures[which] = (rate, percentile(latencies, 0.5), percentile(latencies, 0.95))
                    rates[which].append(rate)
                added50.append(figures["gateway"][1] - figures["direct"][1])
                added95.append(figures["gateway"][2] - figures["direct"][2])
                ratios.append(figures["gateway"][0] / figures["direct"][0])
            results[clients] = (statistics.median(added50), statistics.median(added95), statistics.median(ratios))
            print(f"{clients:3d} clients: direct {statistics.median(rates['direct']):7.0f} req/s, gateway "
                  f"{statistics.median(rates['gateway']):7.0f} req/s; added p50 {results[clients][0]:.2f} ms, "
                  f"added p95 {results[clients][1]:.2f} ms, throughput ratio {results[clients][2]:.2f} "
                  f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)}); the gateway's CPU "
                  f"{statistics.median(cpu_ms):.2f} ms a request")

        seen = []
        for _ in range(args.revocations):
            key_raw, pk = new_key()
            headers = {"Authorization": f"Bearer {key_raw}"}
            for base in gateways:
                wait_until(lambda base=base, headers=headers: status_of(f"{base}{path}/v1/models", headers) == 200,
                           "the new key")
            revoke(pk)
            start = time.monotonic()
            for base in gateways:
                wait_until(lambda base=base, headers=headers: status_of(f"{base}{path}/v1/models", headers) == 401,
                           "the revocation", 30)
            seen.append(time.monotonic() - start)
        print(f"revocation seen by both gateways: median {statistics.median(seen):.2f} s, worst {max(seen):.2f} s "
              f"({len(seen)} revocations)")
        first = results[counts[0]]
        print(f"targets: at {counts[0]} clients added p50 {first[0]:.2f} ms (≤ {TARGETS['added p50 ms']}), "
              f"added p95 {first[1]:.2f} ms (≤ {TARGETS['added p95 ms']}); throughput ratio "
              + ", ".join(f"{results[c][2]:.2f} at {c}" for c in counts)
              + f" (≥ {TARGETS['throughput ratio']}); revocation worst {max(seen):.2f} s (≤ {TARGETS['revocation s']})")
    finally:
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
        from django.db import connections

        connections.close_all()
        recreate_database(url, name, drop_only=True)


if __name__ == "__main__":
    main()
