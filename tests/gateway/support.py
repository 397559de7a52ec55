"""Real gateway processes (``manage.py gateway``) and real upstreams for the gateway's tests: the sandbox's engine
(``python -m sandbox.engine``) and an echo server, registered as an endpoint's ready replicas the way the sandbox's
tick records them (a Service, its Deployment, a ready pod and the pod's engine row)."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import httpx
from aiohttp import web
from aiohttp.test_utils import TestServer
from django.conf import settings
from django.db import connection
from django.utils import timezone

from cluster.manifests.common import labels
from core import processes
from fleet import services as fleet
from fleet.models import GpuFlavor
from gateway.server import Gateway
from inference.models import ApiKey, InferenceEndpoint
from inference.routing import Route, Target
from sandbox.models import SimEngine, SimObject, SimPod
from sandbox.world import STAGE_READY
from teams.models import hash_token
from tests.conftest import redis_url
from tests.e2e.conftest import wait_for
from tests.factories import make_user

ROOT = Path(__file__).resolve().parents[2]
MODEL = "tiny-llama"


def test_database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class Process:
    """A child process with its log; stopped by SIGTERM (then SIGKILL)."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode


def answers(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=1).status_code
    except httpx.HTTPError:
        return None


def start_gateway(tmp_path: Path, name: str, **env: str) -> tuple[Process, str]:
    """``manage.py gateway`` on a free port against the test database and Redis; (process, base URL)."""
    port = processes.free_port()
    full = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "DATABASE_URL": test_database_url(),
            "REDIS_URL": redis_url(), "SLIPWAY_VAR_DIR": str(tmp_path),
            "SLIPWAY_SANDBOX_INVENTORY": settings.SLIPWAY_SANDBOX_INVENTORY, **env}
    full.pop("SLIPWAY_TEST_DB_NAME", None)
    process = Process([sys.executable, "manage.py", "gateway", "--bind", f"127.0.0.1:{port}"], full,
                      tmp_path / f"gateway-{name}.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: answers(f"{base}/healthz") == 200 or process.proc.poll() is not None, timeout=60,
                 what=f"gateway {name} to serve")
        assert process.proc.poll() is None, process.text()
    except BaseException:
        process.stop()  # not handed to the caller, so stopped here: a gateway left running holds the test database
        raise
    return process, base


def start_engine(tmp_path: Path, name: str = "engine", **knobs: str) -> tuple[Process, int]:
    """The sandbox's engine serving :data:`MODEL` on a free port, loaded; (process, port)."""
    port = processes.free_port()
    process = Process([sys.executable, "-m", "sandbox.engine", "--port", str(port), "--model", MODEL, "--name", name],
                      processes.minimal_env({"SLIPWAY_SIM_LOAD_SECONDS": "0", **knobs}), tmp_path / f"{name}.log")
    wait_for(lambda: answers(f"http://127.0.0.1:{port}/health") == 200 or process.proc.poll() is not None,
             timeout=30, what="the engine to listen")
    assert process.proc.poll() is None, process.text()
    return process, port


class Echo:
    """An upstream that answers every request with what it received (method, raw path and query, headers, body),
    served on a thread of the test's process."""

    def __init__(self) -> None:
        self.port = processes.free_port()
        self.loop = None
        started = threading.Event()

        async def echo(request: web.Request) -> web.StreamResponse:
            if request.path == "/cut":  # says 1,000 bytes, sends 10 and closes: a replica dying mid-answer
                cut = web.StreamResponse(headers={"Content-Type": "application/json"})
                cut.content_length = 1000
                await cut.prepare(request)
                await cut.write(b'{"usage": ')
                request.transport.close()
                return cut
            if request.path == "/big":  # ?bytes=N of JSON
                return web.json_response({"filler": "x" * int(request.query["bytes"])})
            return web.json_response({"method": request.method, "path": request.raw_path,
                                      "headers": dict(request.headers), "body": (await request.read()).decode()})

        def run() -> None:
            import asyncio

            self.loop = asyncio.new_event_loop()
            application = web.Application()
            application.router.add_route("*", "/{tail:.*}", echo)
            runner = web.AppRunner(application)
            self.loop.run_until_complete(runner.setup())
            self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
            self.runner = runner
            started.set()
            self.loop.run_forever()
            self.loop.run_until_complete(runner.cleanup())

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def make_endpoint(team, name: str = "chat", state: str = "ready") -> InferenceEndpoint:
    user = make_user(f"{team.slug}-{name}-owner")
    flavor = GpuFlavor.objects.order_by("pk").first()
    return InferenceEndpoint.objects.create(team=team, created_by=user, name=name, flavor=flavor, state=state,
                                            image="registry.example.com/serve:1", min_replicas=1, max_replicas=1)


def serve(endpoint: InferenceEndpoint, *ports: int) -> None:
    """Record ``ports`` as the endpoint's ready replicas in its sandbox cluster, as the tick would: its Service,
    its Deployment, one ready pod per port and that pod's engine."""
    cluster = fleet.placed_on(endpoint.cluster_id).name
    namespace, name, team = endpoint.namespace, endpoint.object_name, endpoint.team.slug
    now = timezone.now()
    selector = labels(team, name)
    SimObject.objects.get_or_create(cluster=cluster, resource_kind="Service", namespace=namespace, name=name, defaults={
        "api_version": "v1", "workload": name, "team": team, "uid": secrets.token_hex(8), "created_at": now,
        "manifest": {"kind": "Service", "spec": {"selector": selector}}})
    deployment, _ = SimObject.objects.get_or_create(
        cluster=cluster, resource_kind="Deployment", namespace=namespace, name=name, defaults={
            "api_version": "apps/v1", "workload": name, "team": team, "uid": secrets.token_hex(8), "created_at": now,
            "manifest": {"kind": "Deployment", "spec": {"template": {"metadata": {"labels": selector}}}}})
    for port in ports:
        pod = f"{name}-{port}"
        SimPod.objects.create(cluster=cluster, owner=deployment, namespace=namespace, name=pod, workload=name,
                              phase="Running", stage=STAGE_READY, active=True, created_at=now)
        SimEngine.objects.create(cluster=cluster, namespace=namespace, workload=name, pod=pod, pid=os.getpid(),
                                 port=port, started_at=now)



def make_key(team, endpoint: InferenceEndpoint | None = None, **fields) -> tuple[str, ApiKey]:
    """A key as helper B's service makes one ("sw-" + 32 random bytes); (the raw key, its row)."""
    raw = "sw-" + secrets.token_urlsafe(32)
    now = timezone.now()
    key = ApiKey.objects.create(team=team, endpoint=endpoint, name="test", prefix=raw[:12], digest=hash_token(raw),
                                created_at=now, updated_at=now, **fields)
    return raw, key


def change_key(key: ApiKey, **fields) -> None:
    """Change a key as the key services do: ``updated_at`` moves with it."""
    ApiKey.objects.filter(pk=key.pk).update(updated_at=timezone.now(), **fields)


def bearer(raw: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {raw}"}


def until_status(url: str, status: int, timeout: float = 10, **request) -> httpx.Response:
    """Poll ``url`` (GET, or ``method``/``json`` given) until it answers ``status``; that answer."""
    method = request.pop("method", "GET")

    def probe():
        try:
            answer = httpx.request(method, url, timeout=5, **request)
        except httpx.HTTPError:
            return None
        return answer if answer.status_code == status else None

    return wait_for(probe, timeout=timeout, interval=0.1, what=f"{url} to answer {status}")


def completion(max_tokens: int = 8, **extra) -> dict:
    return {"model": MODEL, "prompt": "Say something", "max_tokens": max_tokens, "seed": 7, **extra}


def expired() -> dict:
    return {"expires_at": timezone.now() - timedelta(seconds=1)}


def elapsed_since(start: float) -> float:
    return time.monotonic() - start


# -- a gateway in the test's own event loop ------------------------------------------------------------------------


class InProcessGateway(Gateway):
    """The gateway's request path served in the test's event loop, as ``manage.py gateway`` serves it (``run_app``'s
    defaults: a handler is not cancelled when its client hangs up), with the route table the test sets
    (:meth:`route`) and the keys read once by the test (``keys.refresh()``): no refresh and no flush run on their
    own, the test calls :meth:`flush` when it wants the counts written (in the gateway's database thread, as the
    process does: the test's rows must be committed for it to see them, ``django_db(transaction=True)``)."""

    async def _start(self, _app: web.Application) -> None:
        self.session = self.client_session()
        self.loaded = True
        #: The statuses of the requests handled, as each handler returns, the paths of those begun, as each handler
        #: starts, and the endpoints of those held, as each starts waiting: what a test awaits instead of sleeping.
        self.ended: asyncio.Queue[int] = asyncio.Queue()
        self.begun: asyncio.Queue[str] = asyncio.Queue()
        self.holding: asyncio.Queue[int] = asyncio.Queue()

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        # Put before the handler runs on: a test that gets it resumes once the handler waits on something (with no
        # Redis for the limits, the first thing it waits on is the request's body).
        self.begun.put_nowait(request.path)
        response = await super().proxy(request)
        self.ended.put_nowait(response.status)
        return response

    async def _hold(self, route: Route, *args) -> Route | None:
        self.holding.put_nowait(route.endpoint_id)
        return await super()._hold(route, *args)

    async def _stop(self, _app: web.Application) -> None:
        await self.session.close()
        await self.limiter.close()
        self.executor.shutdown(wait=True)

    def route(self, endpoint: InferenceEndpoint, *targets: tuple[int, int, tuple[str, ...]],
              state: str = "ready") -> Route:
        """``endpoint`` served by ``targets`` ((revision, weight, upstream URLs), the stable revision first)."""
        route = Route(endpoint.pk, endpoint.team_id, endpoint.team.slug, endpoint.name, state,
                      tuple(Target(*target) for target in targets), endpoint.object_name, endpoint.namespace)
        self.routes = {**self.routes, (route.team, route.name): route}
        return route

    async def serve(self, send_buffer: int | None = None) -> str:
        """Served on a free port until :meth:`close`; its base URL. ``send_buffer``: the bytes the kernel holds of
        what the gateway writes to a client (``SO_SNDBUF``, which the clients' connections take from the listening
        socket): on loopback it grows to hold a whole answer of 256 KiB, which a client across a network, reading
        nothing, would leave the gateway waiting to write."""
        self.runner = web.AppRunner(self.app(), handler_cancellation=False, access_log=None)
        await self.runner.setup()
        port = processes.free_port()
        if send_buffer is None:
            await web.TCPSite(self.runner, "127.0.0.1", port).start()
        else:
            listening = socket.socket()
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
            listening.bind(("127.0.0.1", port))
            await web.SockSite(self.runner, listening).start()
        return f"http://127.0.0.1:{port}"

    async def close(self) -> None:
        await self.runner.cleanup()


async def upstream(handler) -> TestServer:
    """An upstream in the test's event loop answering every request with ``handler``; its ``make_url("")`` is the
    replica's base URL."""
    application = web.Application()
    application.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(application, host="127.0.0.1")
    await server.start_server()
    return server


def base_url(server: TestServer) -> str:
    return str(server.make_url("")).rstrip("/")


def exchange(port: int, message: bytes, *, hang_up: bool = False) -> bytes:
    """``message`` sent as is to 127.0.0.1:``port`` (a client that says exactly what it means: headers no HTTP
    library would send); what comes back until the server closes, or nothing when the client hangs up at once."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(message)
        if hang_up:
            return b""
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer
