"""Fixtures of the notification tests: a real HTTP receiver on 127.0.0.1 that checks signatures.

The receiver (pytest-httpserver: a werkzeug server, a thread per request) verifies each request the way
docs/notifications.md tells a receiver to, with the secret Slipway showed when the webhook was
created, and keeps what it got.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass, field

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from notifications.constants import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER


@pytest.fixture(autouse=True)
def _loopback_webhooks(settings):
    """The receiver listens on 127.0.0.1, which only this setting lets a webhook reach."""
    settings.SLIPWAY_WEBHOOK_ALLOW_LOOPBACK = True


def verify(secret: str, request: Request) -> bool:
    """A receiver's check (docs/notifications.md): HMAC-SHA256 of ``<timestamp>.<raw body>``."""
    timestamp = request.headers.get(TIMESTAMP_HEADER, "")
    expected = "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + request.get_data(),
                                    hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, request.headers.get(SIGNATURE_HEADER, ""))


@dataclass
class Received:
    delivery: str
    verified: bool
    body: dict


@dataclass
class Receiver:
    """Answers ``statuses`` in turn (then 200); ``hold`` keeps the next request open until ``release``."""

    url: str
    secret: str = ""
    statuses: list[int] = field(default_factory=list)
    got: list[Received] = field(default_factory=list)
    holding: threading.Event = field(default_factory=threading.Event)  #: set while a request is held
    release: threading.Event = field(default_factory=threading.Event)
    hold: bool = False
    host_headers: list[str] = field(default_factory=list)  #: the Host header of each request
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, request: Request) -> Response:
        with self.lock:
            self.host_headers.append(request.headers.get("Host", ""))
            self.got.append(Received(request.headers.get(DELIVERY_HEADER, ""), verify(self.secret, request),
                                     json.loads(request.get_data())))
            held, self.hold = self.hold, False
            status = self.statuses.pop(0) if self.statuses else 200
        if held:
            self.holding.set()
            self.release.wait(timeout=60)
        return Response("ok" if status < 300 else "boom", status=status)


@pytest.fixture
def receiver() -> Receiver:
    server = HTTPServer(host="127.0.0.1", threaded=True)
    server.start()
    hook = Receiver(url=server.url_for("/hook"))
    server.expect_request("/hook", method="POST").respond_with_handler(hook.handle)
    yield hook
    hook.release.set()
    server.clear()
    server.stop()
