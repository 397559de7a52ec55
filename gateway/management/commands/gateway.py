"""``manage.py gateway --bind HOST:PORT``: one gateway process (:mod:`gateway.server`; docs/serving.md "The gateway").

Any number may run (``make run`` starts one on the portal's port + 2; deploy/ runs them as a Deployment):
each keeps only caches, and what it counts it adds to shared rows. SIGTERM or Ctrl-C stops it after a
last write of its counts, which waits at most ``LOCK_WAIT_SECONDS`` for the database (a stop never waits out
another process's long transaction; what it could not write it logs).
"""

from __future__ import annotations

import uvloop
from aiohttp import web
from django.core.management.base import BaseCommand, CommandError
from django.db.backends.signals import connection_created
from prometheus_client import values

from core.text import whole_number
from gateway.server import KEEPALIVE_SECONDS, Gateway, limit_lock_waits


def parse_bind(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    number = whole_number(port, 5)  # int() refuses "²" (which isdigit() takes) with a traceback
    if not sep or not host or number is None or not 0 < number < 65536:
        raise CommandError(f"--bind takes HOST:PORT with a port from 1 to 65535, got {value[:80]!r}.")
    return host.strip("[]"), number


class Command(BaseCommand):
    help = "Serve the endpoints at <gateway>/<team>/<endpoint>/…, checking keys and limits (the data plane)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--bind", default="127.0.0.1:8002", help="HOST:PORT to listen on (default: %(default)s).")

    def handle(self, *args, bind: str, **options) -> None:
        host, port = parse_bind(bind)
        # The settings put the portal's multiprocess directory in the environment, so prometheus_client writes
        # every figure to files there; the gateway's series are its own /metrics (each process scraped on its
        # own, as a Deployment's pods are), never the portal's: plain in-memory values, no file write per request.
        values.ValueClass = values.MutexValue
        # Every connection this process opens waits for a lock briefly: its writes are counts it writes again, and
        # its stop must not wait behind another process's long transaction.
        connection_created.connect(limit_lock_waits, dispatch_uid="gateway.limit_lock_waits")
        self.stdout.write(f"Gateway on http://{host}:{port}/<team>/<endpoint>/…")
        self.stdout.flush()
        # On uvloop (libuv's event loop, C): the loop's own share of each request is smaller than asyncio's
        # (docs/serving.md "What it adds" has the figures of bench/gateway.py).
        web.run_app(Gateway().app(), host=host, port=port, print=None, access_log=None, shutdown_timeout=1.0,
                    keepalive_timeout=KEEPALIVE_SECONDS, loop=uvloop.new_event_loop())
