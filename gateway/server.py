"""The gateway's HTTP server (aiohttp): ``/{team}/{endpoint}/{rest}`` forwarded to a replica as ``/{rest}``.

One process serves every endpoint; any number may run side by side (they share nothing but the database
and Redis: caches here, increments there). For each request:

1. the route (team slug, endpoint name) and the key (``Authorization: Bearer``) are checked against the
   caches (:mod:`inference.routing`'s table and :class:`gateway.keys.KeyCache`, both refreshed every
   second in a worker thread); any failure is the same 401, whether the endpoint exists or not;
2. the key's limits (:mod:`gateway.limits`, Redis): 429 with ``Retry-After``; then the body, read whole within
   ``SLIPWAY_GATEWAY_BODY_TIMEOUT`` (a client that sends it slower, a byte at a time, gets 408 and its connection
   closed: it held the handler for as long as it liked; one that hangs up mid-body is dropped). Its headers are
   bounded by aiohttp: a connection with no whole request line and headers within its keep-alive timeout
   (:data:`KEEPALIVE_SECONDS`, counted from the connection's opening or its last answer) is closed;
3. no ready replica (scaled to zero, waking): the request is held, in arrival order, until the route table
   shows one (``SLIPWAY_GATEWAY_HOLD_SECONDS``; past it 503 with ``Retry-After``);
4. a target by weight, an upstream by least-in-flight (:mod:`inference.routing`); the method, the path after
   the endpoint, the query string, the body and the headers go as they came, less the hop-by-hop ones,
   ``Authorization`` and ``Cookie``, plus ``X-Forwarded-For/-Proto/-Host`` the gateway writes itself (a client's
   forwarding headers are believed only from a trusted proxy: :func:`forwarded_headers`). A replica that refuses the
   connection before answering is left for another one, once; else 502;
5. the answer streams back chunk by chunk as it arrives (a stream's first token reaches the client before
   the last is generated); Server-Sent Events are read on the way for their ``usage`` without being held.
   A replica that dies or falls silent mid-answer ends the response: a stream gets a last
   ``data: {"error": …}`` event, another answer is cut (the client sees a short body), never a hang; a client
   that takes nothing for ``SLIPWAY_GATEWAY_WRITE_TIMEOUT`` is dropped, and the replica let go (:meth:`Gateway._send`),
   whether the answer streams or is written whole (:meth:`Gateway.proxy`);
6. the outcome is counted (:mod:`gateway.recorder`, :mod:`gateway.metrics`): as the revision's request when it was
   forwarded to one, else apart, as refused (steps 1-3: :meth:`Gateway._refuse`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from aiohttp import (
    ClientConnectionError,
    ClientConnectorError,
    ClientError,
    ClientOSError,
    ClientSession,
    ClientTimeout,
    DummyCookieJar,
    ServerDisconnectedError,
    TCPConnector,
    web,
)
from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone
from yarl import URL

from core.metrics import scrape_allowed
from core.networks import address_in
from gateway.keys import Key, KeyCache
from gateway.limits import Limiter, Refusal
from gateway.metrics import CONTENT_TYPE, GatewayMetrics
from gateway.recorder import FLUSH_SECONDS, LOAD_SECONDS, Outcome, Recorder, Unwritten, status_class
from inference import coldstarts, routing
from inference.routing import Picker, Route, Target

logger = logging.getLogger("slipway.gateway")

#: Request headers never forwarded: hop-by-hop ones (RFC 9110 §7.6.1), the client's credentials for the gateway
#: (its key) and cookies, and what aiohttp sets itself (Host, the body's framing). A body's ``Content-Encoding``
#: goes on with the body as it was sent (:meth:`Gateway.app`).
DROPPED = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                     "trailers", "transfer-encoding", "upgrade", "authorization", "cookie", "host", "content-length"})
#: The headers by which a proxy tells the next hop about the client's request (its address, scheme, host, port, path
#: prefix). The client can write any of them: they are believed, and passed on, only from a proxy of
#: ``SLIPWAY_GATEWAY_TRUSTED_PROXIES``, and dropped from anyone else's request (:func:`forwarded_headers`).
FORWARDING = frozenset({"forwarded", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-forwarded-port",
                        "x-forwarded-prefix", "x-real-ip"})
#: Those the gateway writes itself, whoever sent the request (a trusted proxy's values carried into them).
WRITTEN = frozenset({"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"})
#: Response headers not copied back (hop-by-hop; the framing is the gateway's).
NOT_RETURNED = frozenset({"connection", "keep-alive", "proxy-authenticate", "te", "trailer", "trailers",
                          "transfer-encoding", "upgrade"})
#: Why the gateway ended a request itself (``slipway_gateway_refused_total``'s ``reason``): no or a bad key, the
#: key's rate limit, no replica ready within the hold, the client gone while its request was held or its body sent,
#: the body not sent within the body timeout, a body larger than :data:`MAX_BODY_BYTES`.
REFUSED_KEY, REFUSED_LIMIT, REFUSED_HOLD, REFUSED_CLIENT_LEFT, REFUSED_BODY, REFUSED_TOO_LARGE = (
    "unauthorized", "rate_limited", "no_ready_replica", "client_left", "body_timeout", "body_too_large")
#: The largest request body the gateway reads (it reads a body whole before forwarding it): aiohttp's
#: ``client_max_size``, past which the request is refused with a 413.
MAX_BODY_BYTES = 64 * 1024 * 1024
#: Seconds a client connection may stay idle, or take to send a request's line and headers, before it is closed:
#: aiohttp's keep-alive timeout, given by ``manage.py gateway`` (aiohttp's own ``run_app`` default, stated here so
#: that the bound on slow headers is Slipway's, not a default that may move).
KEEPALIVE_SECONDS = 75.0
#: Seconds between two looks at a held request's client (gone: the request is dropped).
CLIENT_CHECK_SECONDS = 0.5
#: Seconds between refreshes of the route table and the keys.
REFRESH_SECONDS = 1.0
#: Seconds any statement of the gateway waits for another transaction's lock before it fails (the portal's
#: connections wait up to 20 s on SQLite). What the gateway writes are counts it keeps and writes again at the
#: next flush, so a longer wait only delays them; and its stop, which writes the last of them, must end within
#: the grace it is given (``make run``'s 6 s; a pod's ``terminationGracePeriodSeconds``) even while a long
#: transaction elsewhere (a worker finishing its task as everything stops) holds the database.
LOCK_WAIT_SECONDS = 1.0
#: A 503 for a request held past the limit asks the client to come back this much later (the replica may be
#: almost ready: a model loads in minutes).
HOLD_RETRY_AFTER = 30
#: The first this many bytes of a JSON answer are kept to read its ``usage`` (an answer past it is not parsed).
JSON_USAGE_LIMIT = 1 << 20
#: The most tokens one answer's ``usage`` may count, prompt or completion (ten times the longest context a model
#: holds today): a larger figure is no count — it is not counted at all (docs/serving.md "Limits").
USAGE_TOKENS_LIMIT = 100_000_000
#: An answer that is not a stream and says its length, up to this many bytes, is read whole and sent in one write.
WHOLE_ANSWER_LIMIT = 256 * 1024

UNAUTHORIZED_BODY = json.dumps({"error": {
    "message": "Invalid or missing API key. Send it as 'Authorization: Bearer <key>'.",
    "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}).encode()


def error_body(status: int, message: str, kind: str, code: str) -> bytes:
    """OpenAI's error shape (clients written for OpenAI's API show ``error.message``)."""
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


def unauthorized() -> web.Response:
    """The one answer to every failure of the key or the route: the same status, headers and body."""
    return web.Response(status=401, body=UNAUTHORIZED_BODY, content_type="application/json",
                        headers={"WWW-Authenticate": "Bearer"})


async def written(response: web.StreamResponse, request: web.Request) -> None:
    """``response`` written whole (its headers, its body, its end), as aiohttp writes what a handler returns: for
    the handler to bound the write (:meth:`Gateway._send`); aiohttp then finds it written and writes nothing."""
    await response.prepare(request)
    await response.write_eof()


def split_path(raw_path: str) -> tuple[str, str, str] | None:
    """(team, endpoint, the rest as sent: path after the endpoint and ``?query``) from the raw request target,
    None when it names no endpoint. The rest keeps its encoding: it is forwarded byte for byte."""
    path, mark, query = raw_path.partition("?")
    parts = path.split("/", 3)
    if len(parts) < 3 or parts[0] or not parts[1] or not parts[2]:
        return None
    rest = "/" + (parts[3] if len(parts) > 3 else "")
    return parts[1], parts[2], rest + (mark + query if mark else "")


def client_left(request: web.Request) -> bool:
    """Whether the request's client hung up (its connection closed or closing)."""
    transport = request.transport
    return transport is None or transport.is_closing()


def connection_named(headers) -> frozenset[str]:
    """The header names a message's ``Connection`` header lists: hop-by-hop as those of :data:`DROPPED` are
    (RFC 9110 §7.6.1), meant for the gateway alone (a client's ``Connection: close, X-Secret``), never passed on."""
    return frozenset(name.strip().lower() for value in headers.getall("Connection", ()) for name in value.split(","))


def forwarded_headers(request: web.Request, trusted_proxies: tuple[str, ...]) -> dict[str, str]:
    """The headers sent to the replica: the client's, less :data:`DROPPED` and those its ``Connection`` names, and
    ``X-Forwarded-For/-Proto/-Host`` written by the gateway, as nginx's and Envoy's are.

    A replica reads them as the truth about its caller (the links and redirects it builds, the address it logs
    or limits), and a client can write any of them: they are believed only when the request's peer is one of
    ``trusted_proxies`` (the TLS-terminating proxy in front, which writes them itself) — then the chain is
    appended to, the scheme and host kept. From anyone else every header of :data:`FORWARDING` is dropped and
    the three are the gateway's own: the peer's address, the connection's scheme, the ``Host`` asked for."""
    trusted = address_in(request.remote, trusted_proxies)
    # A trusted proxy's other forwarding headers (a port, a prefix, RFC 7239's Forwarded) go on as it wrote them.
    dropped = DROPPED | connection_named(request.headers) | (WRITTEN if trusted else FORWARDING)
    headers = {name: value for name, value in request.headers.items() if name.lower() not in dropped}
    peer = request.remote or ""
    before = ", ".join(request.headers.getall("X-Forwarded-For", ())) if trusted else ""
    headers["X-Forwarded-For"] = f"{before}, {peer}" if before else peer
    headers["X-Forwarded-Proto"] = (trusted and request.headers.get("X-Forwarded-Proto")) or request.scheme
    headers["X-Forwarded-Host"] = (trusted and request.headers.get("X-Forwarded-Host")) or request.host
    return headers


class StreamTokens:
    """The tokens of a Server-Sent Events answer, read from its ``data:`` lines as they pass (never held).

    The rule (docs/serving.md "Limits"): a chunk with ``usage`` (the last one, with
    ``stream_options.include_usage``) gives prompt and completion tokens; without one, each chunk carrying
    content (``delta.content`` or ``text``) counts one output token — engines stream a token a chunk — and
    the prompt's tokens are unknown (0).
    """

    MAX_PENDING = 1 << 20

    def __init__(self) -> None:
        self.pending = b""
        self.usage: dict | None = None
        self.content_chunks = 0

    def feed(self, data: bytes) -> None:
        self.pending += data
        if b"\n" not in data:
            if len(self.pending) > self.MAX_PENDING:  # no line end in a megabyte: not SSE worth reading
                self.pending = b""
            return
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if not payload or payload == b"[DONE]":
                continue
            chunk = parse_json(payload)
            if isinstance(chunk, dict):
                self._read(chunk)

    def _read(self, chunk: dict) -> None:
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if isinstance(text, str) and text:
                self.content_chunks += 1

    def tokens(self) -> tuple[int, int]:
        if self.usage is not None:
            return usage_tokens(self.usage)
        return 0, self.content_chunks


def parse_json(data: bytes) -> object | None:
    """``data`` parsed; None when it is no JSON, or JSON nested deeper than Python's parser follows.

    The parser recurses a level a call: past the interpreter's recursion limit (``sys.getrecursionlimit()``, 1,000
    by default, less the calls under way) it raises RecursionError — before it has built much, and cleanly, as for
    a spec file's (:mod:`slipway.specfile`). Uncaught, an answer of 100,000 ``[`` was a 500 for the replica's 200
    and a traceback in the log; it is an answer without a usage to read, passed on untouched, as one that is no
    JSON. A check of the depth before parsing cost more than the parse on every answer with many brackets."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def usage_of(data: bytes) -> tuple[int, int]:
    """(prompt, completion) tokens of a JSON answer's ``usage``; zeros when it is no JSON object or too deep."""
    answer = parse_json(data)
    return usage_tokens(answer.get("usage")) if isinstance(answer, dict) else (0, 0)


def usage_tokens(usage: object) -> tuple[int, int]:
    """(prompt, completion) tokens of an OpenAI ``usage`` object; zeros for anything else, and 0 for a count above
    :data:`USAGE_TOKENS_LIMIT`: the replica's image, which its team chose, decides what it answers."""
    if not isinstance(usage, dict):
        return 0, 0

    def number(name: str) -> int:
        value = usage.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= USAGE_TOKENS_LIMIT \
            else 0

    return number("prompt_tokens"), number("completion_tokens")


def limit_lock_waits(sender, connection, **kwargs) -> None:
    """A ``connection_created`` receiver for the gateway's process: the new connection's statements wait at most
    :data:`LOCK_WAIT_SECONDS` for a lock (SQLite's busy timeout; PostgreSQL's ``lock_timeout``)."""
    milliseconds = int(LOCK_WAIT_SECONDS * 1000)
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"PRAGMA busy_timeout = {milliseconds}")
        elif connection.vendor == "postgresql":
            cursor.execute("SELECT set_config('lock_timeout', %s, false)", [f"{milliseconds}ms"])


class Gateway:
    """One gateway process's state: caches, counters, the connection pools to the replicas."""

    def __init__(self, *, hold_seconds: float | None = None, connect_timeout: float | None = None,
                 read_timeout: float | None = None, redis_url: str | None = None,
                 refresh_seconds: float = REFRESH_SECONDS, trusted_proxies: tuple[str, ...] | None = None,
                 write_timeout: float | None = None, body_timeout: float | None = None) -> None:
        self.hold_seconds = settings.SLIPWAY_GATEWAY_HOLD_SECONDS if hold_seconds is None else hold_seconds
        self.trusted_proxies = tuple(settings.SLIPWAY_GATEWAY_TRUSTED_PROXIES if trusted_proxies is None
                                     else trusted_proxies)
        self.timeout = ClientTimeout(
            total=None, sock_connect=settings.SLIPWAY_GATEWAY_CONNECT_TIMEOUT if connect_timeout is None
            else connect_timeout, sock_read=settings.SLIPWAY_GATEWAY_READ_TIMEOUT if read_timeout is None
            else read_timeout)
        self.write_timeout = settings.SLIPWAY_GATEWAY_WRITE_TIMEOUT if write_timeout is None else write_timeout
        self.body_timeout = settings.SLIPWAY_GATEWAY_BODY_TIMEOUT if body_timeout is None else body_timeout
        self.refresh_seconds = refresh_seconds
        self.routes: dict[tuple[str, str], Route] = {}
        self.loaded = False
        self.keys = KeyCache()
        self.limiter = Limiter(settings.REDIS_URL if redis_url is None else redis_url)
        self.recorder = Recorder()
        self.metrics = GatewayMetrics()
        self.picker = Picker()
        #: Requests held per endpoint, oldest first: each waits on its future (True: go; None: the endpoint left).
        self.waiting: dict[int, deque[asyncio.Future]] = {}
        #: One thread for the database (the route table, the keys, the counts): Django's connection per thread.
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gateway-db")
        self.session: ClientSession | None = None
        self.tasks: set[asyncio.Task] = set()
        self.refresh_failed_at = 0.0

    # -- life ---------------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        # A request's body is read as it was sent and forwarded so, its Content-Encoding with it, as the replica's
        # answer comes back (the client session's auto_decompress): aiohttp decoded a gzip body as it read it, so the
        # decoded body went on under "Content-Encoding: gzip", and one that did not decode was a 500 and a traceback.
        application = web.Application(client_max_size=MAX_BODY_BYTES, handler_args={"auto_decompress": False})
        application["gateway"] = self
        application.router.add_get("/healthz", self.healthz)
        application.router.add_get("/metrics", self.metrics_view)
        application.router.add_route("*", "/{tail:.*}", self.proxy)
        application.on_startup.append(self._start)
        application.on_cleanup.append(self._stop)
        return application

    def client_session(self) -> ClientSession:
        """Keep-alive pools to the replicas, no limit of connections (a replica's engine bounds its own work);
        bodies as they come (no decompression: forwarded untouched), no cookies kept."""
        return ClientSession(connector=TCPConnector(limit=0, keepalive_timeout=60, ttl_dns_cache=60),
                             timeout=self.timeout, auto_decompress=False, cookie_jar=DummyCookieJar(),
                             skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"))

    async def _start(self, _app: web.Application) -> None:
        self.session = self.client_session()
        try:
            await self.refresh()
        except Exception:  # the loop retries; /healthz says not ready meanwhile
            logger.exception("gateway: the first route table could not be read")
        for loop in (self._refresh_loop, self._flush_loop, self._load_loop):
            self._spawn(loop())

    async def _stop(self, _app: web.Application) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        taken, used = self.recorder.take(), self.keys.take_used()
        try:
            await self.run_sync(self._last_write, taken, used)
        except Exception as exc:  # a stopping process cannot keep them for later: say what is lost
            logger.error("gateway: stopped without its last counts (%d traffic windows, %d key-hours, %d keys' "
                         "last use): %s", len(taken[0]), len(taken[1]), len(used), exc)
        if self.session is not None:
            await self.session.close()
        await self.limiter.close()
        self.executor.shutdown(wait=True)

    def _last_write(self, taken: tuple[dict, dict], used: dict[int, datetime]) -> None:
        """The counts not written yet, the keys' last use, and this process's load rows deleted (a gateway that
        went away holds nothing): one transaction, so the stop waits for the database's lock once, at most
        :data:`LOCK_WAIT_SECONDS`, and writes all of it or none."""
        with transaction.atomic():
            self.recorder.write(taken)
            KeyCache.write_last_used(used)
            self.recorder.forget_load()

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run_sync(self, function: Callable, *args):
        """``function(*args)`` in the database thread, its connection checked before and after (a connection
        that broke or outlived CONN_MAX_AGE is closed, as after a web request)."""
        def call():
            close_old_connections()
            try:
                return function(*args)
            finally:
                close_old_connections()
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    # -- background ---------------------------------------------------------------------------------------

    def _read_tables(self) -> dict[tuple[str, str], Route]:
        table = routing.routes(self.routes)
        self.keys.refresh()
        return table

    async def refresh(self) -> None:
        """Read the route table and the keys' changes; release the held requests whose endpoint is ready."""
        self.routes = await self.run_sync(self._read_tables)
        self.loaded = True
        self._release_held()

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_seconds)
            try:
                await self.refresh()
            except Exception as exc:
                now = time.monotonic()
                if now - self.refresh_failed_at > 30:
                    self.refresh_failed_at = now
                    logger.warning("gateway: route table not refreshed, serving the last one (%s)", exc)

    async def flush(self) -> None:
        taken = self.recorder.take()
        used = self.keys.take_used()
        try:
            await self.run_sync(self.recorder.write, taken)
        except Unwritten as exc:  # the endpoints written before the database failed are not put back
            self.recorder.put_back(exc.left)
            raise
        except Exception:
            self.recorder.put_back(taken)
            raise
        finally:
            await self.run_sync(KeyCache.write_last_used, used)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            try:
                await self.flush()
            except Exception as exc:
                logger.warning("gateway: counts not written, kept for the next flush (%s)", exc)

    async def _load_loop(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(LOAD_SECONDS)
            now = time.monotonic()
            rows = self.recorder.load(timezone.now(), now - last)
            last = now
            try:
                await self.run_sync(Recorder.write_load, rows)
            except Exception as exc:
                logger.warning("gateway: load not written (%s)", exc)

    def _release_held(self) -> None:
        if not self.waiting:
            return
        by_id = {route.endpoint_id: route for route in self.routes.values()}
        for endpoint_id in list(self.waiting):
            route = by_id.get(endpoint_id)
            if route is not None and not route.ready:
                continue
            queue = self.waiting.pop(endpoint_id)
            while queue:  # in arrival order: each resumes in the order its future is set
                future = queue.popleft()
                if not future.done():
                    future.set_result(route is not None)

    # -- views --------------------------------------------------------------------------------------------

    async def healthz(self, _request: web.Request) -> web.Response:
        """200 once a route table was read (the process can route), 503 before."""
        if not self.loaded:
            return web.json_response({"status": "no route table yet"}, status=503)
        return web.json_response({"status": "ok", "routes": len(self.routes)})

    async def metrics_view(self, request: web.Request) -> web.Response:
        # Every team's figures: for the scraper alone (its token or an allowed address), never the public route's
        # callers, who reach it through the cluster's Gateway from an address that is not allowed.
        if not scrape_allowed(request.remote, request.headers.get("Authorization")):
            return web.json_response({"detail": "Not allowed."}, status=403)
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        """The endpoints' handler: :meth:`_answer`'s response, written here under the write timeout when it came
        back unwritten (a whole answer, a refusal, an error), as a stream's chunks are (:meth:`_send`, one rule).

        Returned unwritten, aiohttp wrote it after the handler, with no limit: a whole answer (up to 256 KiB) to a
        client that reads nothing held its connection and the write for as long as it stayed connected. It is
        written after :meth:`_answer` has let the replica, its slot and the in-flight count go, and was counted
        there, with the replica's status: a client dropped here is counted as a stream's that left."""
        response = await self._answer(request)
        if not response.prepared:
            await self._send(request, written(response, request))
        return response

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        arrived = timezone.now()
        parts = split_path(request.raw_path)
        route = self.routes.get(parts[:2]) if parts is not None else None
        key = self.keys.check(request.headers.get("Authorization", ""), route.team_id, route.endpoint_id,
                              arrived) if route is not None else None
        if key is None:
            if route is not None:
                self._refuse(route, None, REFUSED_KEY, 401, arrived)
            return unauthorized()
        self.keys.used(key, arrived)
        refusal = await self.limiter.admit(key.id, key.requests_per_minute, key.tokens_per_minute)
        if refusal is not None:
            self._refuse(route, key, REFUSED_LIMIT, 429, arrived)
            return self._too_many(refusal)
        # Nothing is held yet for the request (no in-flight count, picker slot or place in the wake queue; the
        # request was counted in its key's minute, as any request that reached the limits): the handler itself,
        # its connection and the body so far are what a client sending its body a byte at a time holds, as long as
        # it likes without a deadline on the whole body — one between reads would never fire.
        try:
            async with asyncio.timeout(self.body_timeout):
                body = await request.read()
        except TimeoutError:
            self._refuse(route, key, REFUSED_BODY, 408, arrived)
            return self._body_too_slow()
        except web.HTTPRequestEntityTooLarge:  # was aiohttp's own plain-text 413, counted nowhere
            self._refuse(route, key, REFUSED_TOO_LARGE, 413, arrived)
            return self._body_too_large()
        except ConnectionResetError:  # it hung up mid-body: was a 500 to nobody and a traceback in the log
            self._refuse(route, None, REFUSED_CLIENT_LEFT, 499, arrived)  # as a held one that left: no answer
            return web.Response(status=499, reason="Client Closed Request")
        held = False
        if not route.ready or self.waiting.get(route.endpoint_id):
            held = True
            waited = route
            route = await self._hold(route, request)
            if client_left(request):  # nobody to answer: no replica woken or kept busy for it
                self._refuse(waited, None, REFUSED_CLIENT_LEFT, 499, arrived)
                return web.Response(status=499, reason="Client Closed Request")
            if route is None:
                return self._held_too_long(parts, key, arrived)
        target = self.picker.target(route)
        if target is None:  # its replicas went between the refresh and now
            return self._held_too_long(parts, key, arrived)
        self.recorder.begin(route.endpoint_id, route.team_id, target.revision, arrived)
        gauge = self.metrics.in_flight.labels(route.namespace, route.team, route.object_name)
        gauge.inc()
        try:
            return await self._forward(request, route, target, key, parts[2], body, arrived, started, held)
        finally:
            gauge.dec()
            self.recorder.end(route.endpoint_id)

    # -- steps --------------------------------------------------------------------------------------------

    def _too_many(self, refusal: Refusal) -> web.Response:
        what = "requests" if refusal.limit == "requests" else "tokens"
        return web.Response(status=429, content_type="application/json",
                            headers={"Retry-After": str(refusal.retry_after)},
                            body=error_body(429, f"Rate limit reached: this key's {what} per minute. Try again in "
                                                 f"{refusal.retry_after} s.", "rate_limit_error",
                                            "rate_limit_exceeded"))

    def _body_too_slow(self) -> web.Response:
        """408, and the connection closed after it (RFC 9110 §15.5.9): the rest of the body is not waited for.
        aiohttp still reads what comes for its lingering time (10 s) before it closes, so that the client, still
        sending, is not reset before it reads the answer; its handler has ended and holds nothing."""
        response = web.Response(status=408, content_type="application/json", body=error_body(
            408, f"The request's body did not arrive within {self.body_timeout:g} s.", "invalid_request_error",
            "body_timeout"))
        response.force_close()
        return response

    def _body_too_large(self) -> web.Response:
        """413 in the API's error shape, and the connection closed after it: the rest of the body is not read."""
        response = web.Response(status=413, content_type="application/json", body=error_body(
            413, f"The request's body is larger than the gateway takes ({MAX_BODY_BYTES // (1024 * 1024)} MiB).",
            "invalid_request_error", "body_too_large"))
        response.force_close()
        return response

    async def _hold(self, route: Route, request: web.Request) -> Route | None:
        """Wait, behind the requests held before it, until the endpoint has a ready replica; its fresh route, or
        None past the hold (or when the endpoint went away, or the client left).

        The gateway runs without handler cancellation (a replica's answer is counted even when its client is
        gone), so a client that hangs up does not end the wait: it is looked for every
        :data:`CLIENT_CHECK_SECONDS`. A request nobody waits for any more must not stay held — the held requests
        wake the endpoint from zero — nor be sent to the replica once it is up."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.waiting.setdefault(route.endpoint_id, deque()).append(future)
        self.recorder.held[route.endpoint_id] += 1
        gauge = self.metrics.held.labels(route.namespace, route.team, route.object_name)
        gauge.inc()
        deadline = loop.time() + self.hold_seconds
        go = False
        try:
            while not future.done() and not client_left(request) and loop.time() < deadline:
                await asyncio.wait((future,), timeout=min(CLIENT_CHECK_SECONDS, max(deadline - loop.time(), 0)))
            go = future.done() and bool(future.result())
        finally:
            gauge.dec()
            self.recorder.held[route.endpoint_id] -= 1
            queue = self.waiting.get(route.endpoint_id)
            if queue is not None and future in queue:
                queue.remove(future)
                if not queue:
                    del self.waiting[route.endpoint_id]
        fresh = self.routes.get((route.team, route.name))
        return fresh if go and fresh is not None and fresh.ready else None

    def _held_too_long(self, parts, key: Key, arrived: datetime) -> web.Response:
        route = self.routes.get(parts[:2])
        if route is not None:
            self._refuse(route, key, REFUSED_HOLD, 503, arrived)
        return web.Response(status=503, content_type="application/json",
                            headers={"Retry-After": str(HOLD_RETRY_AFTER)},
                            body=error_body(503, "No replica of this endpoint became ready in time (it is scaling "
                                                 "up from zero). Try again shortly.", "service_unavailable",
                                            "no_ready_replica"))

    async def _forward(self, request: web.Request, route: Route, target: Target, key: Key, rest: str, body: bytes,
                       arrived: datetime, started: float, held: bool) -> web.StreamResponse:
        headers = forwarded_headers(request, self.trusted_proxies)
        refused: str | None = None
        for _attempt in range(2):
            upstream = self.picker.acquire(target.upstreams, avoid=refused)
            if upstream is None:
                break
            sent = time.perf_counter()
            try:
                async with self.session.request(request.method, URL(upstream + rest, encoded=True), headers=headers,
                                                data=body or None, allow_redirects=False) as answer:
                    return await self._relay(request, answer, route, target, key, arrived, started, sent, held)
            except (ClientConnectorError, ServerDisconnectedError, ClientOSError):
                # Refused (or a kept-alive connection it had closed) before any byte of an answer: another one.
                refused = upstream
            except (TimeoutError, ClientError):
                self._count(route, target.revision, key, 504, arrived, started, error=True)
                return web.Response(status=504, content_type="application/json", body=error_body(
                    504, "The endpoint's replica did not answer in time.", "server_error", "upstream_timeout"))
            finally:
                self.picker.release(upstream)
        self._count(route, target.revision, key, 502, arrived, started, error=True)
        return web.Response(status=502, content_type="application/json", body=error_body(
            502, "The endpoint's replica could not be reached.", "server_error", "upstream_unreachable"))

    async def _relay(self, request: web.Request, answer, route: Route, target: Target, key: Key,
                     arrived: datetime, started: float, sent: float, held: bool) -> web.StreamResponse:
        """Send the replica's answer back as it comes, reading its tokens on the way."""
        kind = answer.headers.get("Content-Type", "")
        stream = kind.startswith("text/event-stream")
        readable = not answer.headers.get("Content-Encoding")
        tokens = StreamTokens() if stream and readable else None
        kept = bytearray() if not stream and readable and kind.startswith("application/json") else None
        if not stream and answer.content_length is not None and answer.content_length <= WHOLE_ANSWER_LIMIT:
            return await self._relay_whole(answer, route, target, key, arrived, started, sent, held, kept is not None)
        response = web.StreamResponse(status=answer.status, reason=answer.reason)
        not_returned = NOT_RETURNED | connection_named(answer.headers)
        for name, value in answer.headers.items():
            if name.lower() not in not_returned:
                response.headers.add(name, value)
        first: float | None = None
        broken = False
        client_gone = not await self._send(request, response.prepare(request))
        while not client_gone:
            try:
                chunk = await answer.content.readany()
            except (TimeoutError, ClientError):
                broken = True
                break
            if not chunk:
                break
            if first is None:
                first = time.perf_counter()
                if held:
                    self._spawn(self._first_byte(route.endpoint_id, timezone.now()))
            if not await self._send(request, response.write(chunk)):
                client_gone = True
                break
            if tokens is not None:
                tokens.feed(chunk)
            elif kept is not None and len(kept) < JSON_USAGE_LIMIT:
                kept += chunk
        if broken:
            if stream:  # the client's SSE reader sees why the stream ends
                message = error_body(502, "The endpoint's replica stopped answering mid-stream.", "server_error",
                                     "upstream_disconnected")
                if await self._send(request, response.write(b"data: " + message + b"\n\n")):
                    await self._send(request, response.write_eof())
            elif request.transport is not None:
                request.transport.close()  # a cut answer: the client sees it short, not complete
        elif not client_gone:
            await self._send(request, response.write_eof())
        prompt = completion = 0
        if tokens is not None:
            prompt, completion = tokens.tokens()
        elif kept is not None and not broken:
            prompt, completion = usage_of(bytes(kept))
        if key.tokens_per_minute is not None and prompt + completion:
            self._spawn(self.limiter.add_tokens(key.id, prompt + completion))
        now = time.perf_counter()
        self._count(route, target.revision, key, 502 if broken else answer.status, arrived, started, stream=stream,
                    ttfb_ms=(first - started) * 1000 if stream and first is not None else None,
                    tokens=(prompt, completion), busy=now - sent, error=broken)
        return response

    async def _send(self, request: web.Request, write) -> bool:
        """Await ``write`` (a write to the client, which waits while the client's socket takes no more); False when
        the client is gone, or took nothing for :attr:`write_timeout` seconds — then it is dropped.

        A client that stops reading a stream (a paused or hung program, a slowloris) would hold the write for
        ever, and with it the replica's connection, its slot in the picker and the endpoint's in-flight count
        (which the autoscaler reads): it is let go as one that hung up. Its connection is aborted, not closed:
        a close waits to send what is buffered, to a client that reads nothing."""
        try:
            async with asyncio.timeout(self.write_timeout):
                await write
        except TimeoutError:
            if request.transport is not None:
                request.transport.abort()
            return False
        except (ConnectionResetError, ClientConnectionError):
            return False
        return True

    async def _relay_whole(self, answer, route: Route, target: Target, key: Key, arrived: datetime, started: float,
                           sent: float, held: bool, json_usage: bool) -> web.Response:
        """A small answer of a known length, read whole and sent back in one write (headers and body together):
        the replica sent it at once, so holding it costs no time, and it halves the gateway's writes per request.
        A replica that dies before its last byte gets the client a 502, not a cut body. Returned unwritten:
        :meth:`proxy` writes it, once the replica, its slot and the in-flight count are let go."""
        try:
            body = await answer.read()
        except (TimeoutError, ClientError):
            self._count(route, target.revision, key, 502, arrived, started, busy=time.perf_counter() - sent,
                        error=True)
            return web.Response(status=502, content_type="application/json", body=error_body(
                502, "The endpoint's replica stopped answering mid-answer.", "server_error", "upstream_disconnected"))
        if held:
            self._spawn(self._first_byte(route.endpoint_id, timezone.now()))
        response = web.Response(status=answer.status, reason=answer.reason, body=body)
        # The length is the body's, rebuilt here; but an answer without a body by its nature (to a HEAD, a 304)
        # states the length the whole representation would have: that one is the replica's, passed on.
        not_returned = NOT_RETURNED | connection_named(answer.headers)
        if answer.method != "HEAD" and answer.status != 304:
            not_returned |= {"content-length"}
        for name, value in answer.headers.items():
            if name.lower() not in not_returned:
                response.headers.add(name, value)
        prompt = completion = 0
        if json_usage:
            prompt, completion = usage_of(body)
        if key.tokens_per_minute is not None and prompt + completion:
            self._spawn(self.limiter.add_tokens(key.id, prompt + completion))
        self._count(route, target.revision, key, answer.status, arrived, started, tokens=(prompt, completion),
                    busy=time.perf_counter() - sent)
        return response

    async def _first_byte(self, endpoint_id: int, at: datetime) -> None:
        try:
            await self.run_sync(coldstarts.record_first_byte, endpoint_id, at)
        except Exception:
            logger.exception("gateway: first byte of endpoint %s not recorded", endpoint_id)

    def _refuse(self, route: Route, key: Key | None, reason: str, status: int, arrived: datetime) -> None:
        """A request the gateway ended itself, never forwarded to a revision: counted by ``reason`` in
        ``slipway_gateway_refused_total`` (and, when it came with a valid key, in that key's hour), never as a
        revision's request or latency. Anyone who knows an endpoint's URL can send requests without a key: counted
        as the stable revision's, their sub-millisecond 401s made its p95 the canary rule's yardstick (the
        candidate rolled back) and fed the series the endpoint's autoscaler sums (scaled to its maximum)."""
        self.metrics.refused.labels(route.namespace, route.team, route.object_name, reason).inc()
        if key is not None:
            self.recorder.refused(key.id, route.endpoint_id, route.team_id, status, arrived)

    def _count(self, route: Route, revision: int, key: Key | None, status: int, arrived: datetime, started: float,
               *, stream: bool = False, ttfb_ms: float | None = None, tokens: tuple[int, int] = (0, 0),
               busy: float = 0.0, error: bool = False) -> None:
        latency = time.perf_counter() - started
        self.recorder.add(Outcome(route.endpoint_id, route.team_id, revision, key.id if key is not None else None,
                                  status, arrived, latency * 1000, stream, ttfb_ms, tokens[0], tokens[1], busy,
                                  error))
        requests, duration, ttfb, input_tokens, output_tokens = self.metrics.series(
            route.namespace, route.team, route.object_name, revision, status_class(status))
        requests.inc()
        duration.observe(latency)
        if ttfb_ms is not None:
            ttfb.observe(ttfb_ms / 1000)
        if tokens[0]:
            input_tokens.inc(tokens[0])
        if tokens[1]:
            output_tokens.inc(tokens[1])
