"""The sandbox's workspace proxy, a real process (``manage.py workspace_proxy``) in front of a real Jupyter server.

Issue 46 B1 on the sandbox: cookies are not port-scoped, so the local Jupyter server on 127.0.0.1:<port> received
the portal's 127.0.0.1 cookies. Now the browser reaches a workspace at ``ws-<id>.localhost:<proxy port>``: the
proxy exchanges the portal's one-use ticket for the workspace's cookie, checks that cookie on every request
with the same function as ``/workspaces/auth/``, and forwards HTTP and websockets with the token and no cookie.
"""

from __future__ import annotations

import gzip
import re
import socket
import threading
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from websocket import create_connection

from tests.workspaces.jupyter import wait_up
from tests.workspaces.proxying import browser_on, run_proxy
from workspaces import access, local, services
from workspaces.constants import WorkspaceState
from workspaces.manifests import base_url
from workspaces.models import Workspace

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.redis]
PORTAL = "http://127.0.0.1:8999"


@pytest.fixture
def proxy(settings, tmp_path):
    """The proxy as ``make run`` starts it, against the test database and Redis; stopped by SIGTERM."""
    for port in run_proxy(tmp_path, PORTAL):
        settings.SLIPWAY_WORKSPACE_PROXY_PORT = port
        yield port


@pytest.fixture
def served(create, settings, tmp_path):
    """A running workspace with its real local Jupyter server, answering on 127.0.0.1."""
    settings.VAR_DIR = tmp_path
    workspace = create()
    Workspace.objects.filter(pk=workspace.pk).update(state=WorkspaceState.RUNNING)
    workspace.refresh_from_db()
    token = services.token_of(workspace)
    server = local.ensure(workspace, token)
    wait_up(workspace, f"http://127.0.0.1:{server.port}/notebooks/{workspace.object_name}/", token)
    yield workspace
    local.remove(workspace)


def through(port: int, workspace) -> httpx.Client:
    """A browser on the workspace's host (``*.localhost`` is loopback: connect to 127.0.0.1 with its Host)."""
    return browser_on(f"http://{workspace.object_name}.localhost:{port}/")


def test_open_the_ticket_the_cookie_then_http_and_websockets_with_no_portal_cookie(proxy, served, member, tmp_path):
    workspace = served
    opened = urlsplit(services.open_url(member, workspace))
    base = base_url(workspace.object_name)  # the server's API; Open lands on its lab page
    assert (opened.hostname, opened.port) == (f"{workspace.object_name}.localhost", proxy)
    assert "token" not in parse_qs(opened.query)  # the Jupyter token is never handed out
    browser = through(proxy, workspace)

    # Without a pass: to the portal's Open (what auth-signin does on a real cluster).
    refused = browser.get(f"{base}api/status")
    assert refused.status_code == 302 and refused.headers["Location"] == f"{PORTAL}/workspaces/{workspace.pk}/open/"

    # The ticket: exchanged for the workspace's cookie, and the same address without it.
    exchanged = browser.get(f"{opened.path}?{opened.query}")
    assert exchanged.status_code == 302 and exchanged.headers["Location"] == opened.path
    cookie = exchanged.cookies[access.COOKIE]
    set_cookie = exchanged.headers["Set-Cookie"].lower()
    assert "httponly" in set_cookie and "samesite=lax" in set_cookie and "domain" not in set_cookie
    assert browser.get(f"{opened.path}?{opened.query}").status_code == 302  # spent: to the portal's Open again

    # With the cookie, and the portal's cookies a misconfigured browser might send too: the server gets neither.
    headers = {"Cookie": f"{access.COOKIE}={cookie}; sessionid=portal-session; csrftoken=portal-csrf"}
    status = browser.get(f"{base}api/status", headers=headers)
    assert status.status_code == 200 and "started" in status.json()
    written = browser.put(f"{base}api/contents/seen.txt", headers=headers,
                          json={"type": "file", "format": "text", "content": "through the proxy"})
    assert written.status_code == 201
    assert (local.home(workspace) / "seen.txt").read_text() == "through the proxy"

    # A websocket (kernels talk over them): Jupyter's event stream, through the proxy, Origin and all.
    ws = create_connection(f"ws://127.0.0.1:{proxy}{base}api/events/subscribe",
                           host=f"{workspace.object_name}.localhost:{proxy}",
                           origin=f"http://{workspace.object_name}.localhost:{proxy}",
                           cookie=f"{access.COOKIE}={cookie}; sessionid=portal-session", timeout=10)
    try:
        assert ws.connected
    finally:
        ws.close()
    # Not even an event stream without the cookie: sent to the portal's Open instead.
    with pytest.raises(Exception, match=f"{PORTAL}/workspaces/{workspace.pk}/open/"):
        create_connection(f"ws://127.0.0.1:{proxy}{base}api/events/subscribe",
                          host=f"{workspace.object_name}.localhost:{proxy}", timeout=10)

    # Paused: 409 (the proxy is not bound by the ingress's 2xx/401/403), with the portal's way back.
    Workspace.objects.filter(pk=workspace.pk).update(state=WorkspaceState.PAUSED)
    paused = browser.get(f"{base}api/status", headers=headers)
    assert paused.status_code == 409 and "resume" in paused.text
    # Deleted: 404.
    Workspace.objects.filter(pk=workspace.pk).update(state=WorkspaceState.DELETED)
    assert browser.get(f"{base}api/status", headers=headers).status_code == 404
    # Another host than a workspace's: nothing served.
    assert httpx.get(f"http://127.0.0.1:{proxy}{base}api/status", headers=headers, timeout=5).status_code == 404


def test_the_proxy_forwards_no_cookie_and_the_body_as_sent_to_the_server(proxy, served, member):
    """What the server receives, seen by an echo: the local server is swapped for a listener that records the raw
    requests the proxy sends it. No cookie; and a body as the browser sent it, its ``Content-Encoding`` with it
    (aiohttp decoded a gzip body as the proxy read it, and the decoded body went on under "Content-Encoding: gzip")."""
    workspace = served
    echo = socket.socket()
    echo.bind(("127.0.0.1", 0))
    echo.listen(2)
    local.LocalServer.objects.filter(workspace_id=workspace.pk).update(port=echo.getsockname()[1])
    opened = urlsplit(services.open_url(member, workspace))
    base = base_url(workspace.object_name)  # the server's API; Open lands on its lab page
    browser = through(proxy, workspace)
    cookie = browser.get(f"{opened.path}?{opened.query}").cookies[access.COOKIE]
    echo.settimeout(10)
    seen: list[bytes] = []
    packed = gzip.compress(b'{"content": "print(1)"}')

    def answer() -> None:
        while len(seen) < 2:  # the address is handed out once it accepts: the probes that check so carry no request
            conn, _ = echo.accept()
            with conn:
                request = b""
                while not whole(request) and (chunk := conn.recv(65536)):
                    request += chunk
                if request:
                    seen.append(request)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")

    thread = threading.Thread(target=answer)
    thread.start()
    response = browser.get(f"{base}api/status",
                           headers={"Cookie": f"{access.COOKIE}={cookie}; sessionid=portal-session; csrftoken=c"})
    posted = browser.post(f"{base}api/contents/x.py", content=packed, headers={
        "Cookie": f"{access.COOKIE}={cookie}", "Content-Encoding": "gzip", "Content-Type": "application/json"})
    thread.join(10)
    echo.close()
    assert response.status_code == 200 and posted.status_code == 200
    request = seen[0].decode().lower()
    assert "\r\ncookie:" not in request
    assert f"authorization: token {services.token_of(workspace)}".lower() in request
    assert f"host: {workspace.object_name}.localhost:{proxy}" in request
    head, _, body = seen[1].partition(b"\r\n\r\n")
    assert b"\r\ncontent-encoding: gzip" in head.lower() and unchunked(body) == packed


def whole(request: bytes) -> bool:
    """Whether ``request`` (raw HTTP/1.1) is complete: its head, and its body as long as it says or chunked to its
    last chunk (the proxy streams a body on, chunked)."""
    head, found, body = request.partition(b"\r\n\r\n")
    if not found:
        return False
    if b"\r\ntransfer-encoding: chunked" in head.lower():
        return body.endswith(b"0\r\n\r\n")
    length = re.search(rb"\r\ncontent-length: *(\d+)", head.lower())
    return len(body) >= int(length.group(1)) if length else True


def unchunked(body: bytes) -> bytes:
    """A chunked body's bytes (RFC 9112 §7.1)."""
    data = b""
    while True:
        size, _, rest = body.partition(b"\r\n")
        count = int(size.split(b";")[0], 16)
        if count == 0:
            return data
        data, body = data + rest[:count], rest[count + 2:]
