"""The sandbox's workspace proxy: what the ingress controller and its ``auth-url`` are on a real cluster.

A sandbox workspace's Jupyter server listens on 127.0.0.1 (:mod:`workspaces.local`). Browsers do not
scope cookies by port, so a browser sent there would hand it the portal's 127.0.0.1 cookies; and its
owner's JavaScript would run on an origin the portal's pages share cookies with. So browsers never go
there: they reach each workspace at a host of its own, ``ws-7.localhost:<SLIPWAY_WORKSPACE_PROXY_PORT>``
(``*.localhost`` names are loopback, RFC 6761; Chromium and Firefox resolve them so), served by this
proxy, which ``make run`` starts beside the web server (``manage.py workspace_proxy``). For every
request it:

1. asks the one check, :func:`workspaces.services.authorize` (the same as ``/workspaces/auth/``), by
   the workspace's cookie or the one-use ticket the portal's Open put in the address;
2. on a ticket: sets the workspace's cookie and sends the browser to the same address without the
   ticket (the Jupyter server never sees it); without a valid pass: to the portal's Open (``401``, as
   ``auth-signin`` does); refused: 403, not found or deleted: 404, not running: 409 (this proxy is not
   bound by ingress-nginx's 2xx/401/403 contract);
3. forwards the request, HTTP or websocket (kernels talk over websockets), to the local server with
   ``Authorization: token …`` and **no cookie at all** (the browser's Cookie header is dropped: the
   server authenticates every request by the token, which also exempts it from Jupyter's XSRF cookie).

Each check runs in a worker thread (the ORM is synchronous); the proxy holds no state of its own.
"""

from __future__ import annotations

import asyncio
import weakref
from urllib.parse import urlencode

from aiohttp import ClientSession, ClientTimeout, DummyCookieJar, WSCloseCode, WSMsgType, client_exceptions, web
from django.db import close_old_connections

from workloads.identity import WorkloadId
from workspaces import access, local, services
from workspaces.constants import REF_PREFIX
from workspaces.manifests import base_url
from workspaces.models import Workspace

#: Request headers never forwarded: hop-by-hop ones, the browser's cookies (the portal's could only arrive
#: by a misconfiguration; the workspace's own is the proxy's business) and any Authorization it sent.
DROPPED = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                     "trailers", "transfer-encoding", "upgrade", "cookie", "authorization", "content-length", "host"})
#: Response headers not copied back (hop-by-hop; aiohttp sets its own framing).
NOT_RETURNED = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "upgrade"})
#: What the proxy answers for the check's refusals.
REFUSED = {403: "You may not open this workspace (its owner opens it, and the team's admins once shared).",
           404: "No such workspace.",
           409: "This workspace does not run: resume it on its page in the portal, then open it again."}


def workspace_of(host: str) -> int | None:
    """The workspace a ``Host`` header names (``ws-7.localhost:8001`` → 7), None for any other host."""
    name = host.rsplit(":", 1)[0].lower() if not host.startswith("[") else ""
    label, _, domain = name.partition(".")
    identity = WorkloadId.from_object_name(label) if domain == "localhost" else None
    return identity.pk if identity is not None and identity.prefix == REF_PREFIX else None


def _check(pk: int, cookie: str, ticket: str) -> tuple[services.Verdict, int | None]:
    """The one check, and the port of the workspace's local server when it lets the request through."""
    close_old_connections()
    try:
        verdict = services.authorize(pk, cookie=cookie, ticket=ticket)
        server = local.server_of(Workspace(pk=pk)) if verdict.status == 200 else None
        return verdict, server.port if server is not None else None
    finally:
        close_old_connections()


def _upstream_headers(request: web.Request, token: str) -> dict[str, str]:
    headers = {name: value for name, value in request.headers.items() if name.lower() not in DROPPED}
    # The server sees the host the browser used (Jupyter checks it, and a websocket's Origin, against it).
    return {**headers, "Host": request.host, "Authorization": f"token {token}"}


def _set_cookie(response: web.StreamResponse, value: str) -> None:
    response.set_cookie(access.cookie_name(False), value, **access.cookie_attributes(secure=False))


async def _forward(request: web.Request, port: int, token: str, cookie: str) -> web.StreamResponse:
    """The request to the local server and its answer back, streamed both ways (with ``cookie``, a renewed
    workspace cookie, when there is one)."""
    session: ClientSession = request.app["session"]
    async with session.request(request.method, f"http://127.0.0.1:{port}{request.path_qs}",
                               headers=_upstream_headers(request, token),
                               data=request.content if request.body_exists else None,
                               allow_redirects=False, auto_decompress=False) as upstream:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for name, value in upstream.headers.items():
            if name.lower() not in NOT_RETURNED:
                response.headers.add(name, value)
        if cookie:
            _set_cookie(response, cookie)
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


async def _pump(source, target) -> None:
    async for message in source:
        if message.type == WSMsgType.TEXT:
            await target.send_str(message.data)
        elif message.type == WSMsgType.BINARY:
            await target.send_bytes(message.data)
        else:
            break


async def _websocket(request: web.Request, port: int, token: str) -> web.StreamResponse:
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    headers = {"Host": request.host, "Authorization": f"token {token}"}
    if "Origin" in request.headers:
        headers["Origin"] = request.headers["Origin"]
    session: ClientSession = request.app["session"]
    try:
        upstream = await session.ws_connect(f"http://127.0.0.1:{port}{request.path_qs}", headers=headers,
                                            protocols=offered, max_msg_size=0)
    except client_exceptions.WSServerHandshakeError as exc:
        return web.Response(status=exc.status, text="The notebook server refused the websocket.")
    async with upstream:
        browser = web.WebSocketResponse(protocols=[upstream.protocol] if upstream.protocol else (), max_msg_size=0)
        await browser.prepare(request)
        request.app["websockets"].add(browser)
        pumps = [asyncio.ensure_future(_pump(browser, upstream)), asyncio.ensure_future(_pump(upstream, browser))]
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        await browser.close()
    return browser


async def handle(request: web.Request) -> web.StreamResponse:
    pk = workspace_of(request.host)
    if pk is None or not request.path.startswith(base_url(f"{REF_PREFIX}-{pk}")):
        return web.Response(status=404, text="No such workspace.")
    ticket = request.query.get(access.TICKET_PARAM, "")
    verdict, port = await asyncio.to_thread(_check, pk, access.cookie_from(request.cookies), ticket)
    if verdict.status == 401:
        raise web.HTTPFound(f"{request.app['portal_url']}/workspaces/{pk}/open/")
    if verdict.status != 200:
        return web.Response(status=verdict.status, text=REFUSED.get(verdict.status, "Refused."))
    if port is None:
        return web.Response(status=503, text="The workspace's local Jupyter server is not running yet: try again.")
    if ticket:
        # Exchanged: the cookie set, and the same address without the ticket (the server never sees it).
        rest = urlencode([(k, v) for k, v in request.query.items() if k != access.TICKET_PARAM])
        response: web.StreamResponse = web.HTTPFound(request.path + (f"?{rest}" if rest else ""))
    elif request.headers.get("Upgrade", "").lower() == "websocket":
        return await _websocket(request, port, verdict.token)
    else:
        try:
            return await _forward(request, port, verdict.token, verdict.cookie)
        except client_exceptions.ClientError:
            return web.Response(status=502, text="The workspace's local Jupyter server did not answer.")
    _set_cookie(response, verdict.cookie)
    return response


def make_app(portal_url: str) -> web.Application:
    """The proxy, sending browsers without a pass to the portal at ``portal_url`` (its Open)."""
    # A request's body goes on as the browser sent it, its Content-Encoding with it, as the server's answer comes back
    # (auto_decompress=False on both sides): aiohttp decoded a gzip body as the proxy read it, and the decoded body
    # went on under "Content-Encoding: gzip".
    app = web.Application(handler_args={"auto_decompress": False})
    app["portal_url"] = portal_url.rstrip("/")

    async def session(app: web.Application):
        # Kernels' websockets and long requests (a big upload) may take hours: no total timeout.
        # No cookie jar: what one user's server sets must never be sent on another user's request.
        async with ClientSession(timeout=ClientTimeout(total=None, sock_connect=10),
                                 cookie_jar=DummyCookieJar()) as client:
            app["session"] = client
            yield

    async def close_websockets(app: web.Application) -> None:
        # A stop (make run's Ctrl-C, SIGTERM) waits for open requests; a kernel's websocket never ends on its
        # own, so close them first (the browser's JupyterLab reconnects once the proxy is back).
        for browser in list(app["websockets"]):
            await browser.close(code=WSCloseCode.GOING_AWAY, message=b"The workspace proxy is stopping.")

    app["websockets"] = weakref.WeakSet()
    app.on_shutdown.append(close_websockets)
    app.cleanup_ctx.append(session)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app
