"""``manage.py workspace_proxy``: the sandbox's workspace proxy (:mod:`workspaces.proxy`), which ``make run`` starts.

It serves every sandbox workspace at a host of its own, ``ws-<id>.localhost:<port>``, in front of the workspace's
local Jupyter server, and sends a browser without the workspace's cookie to the portal's Open. SIGTERM or
Ctrl-C stops it (open websockets are closed). It needs the slipway[workspaces] extra (aiohttp), as the local
servers need it (jupyter-server): ``make run`` starts it only when that is installed.
"""

from __future__ import annotations

from aiohttp import web
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from workspaces.proxy import make_app


class Command(BaseCommand):
    help = "Serve the sandbox's workspaces on hosts of their own (ws-<id>.localhost), as the ingress would."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=None,
                            help="Port on 127.0.0.1 (default: SLIPWAY_WORKSPACE_PROXY_PORT).")
        parser.add_argument("--portal-url", default=None,
                            help="The portal as browsers reach it (default: SLIPWAY_PORTAL_URL).")

    def handle(self, *args, port: int | None, portal_url: str | None, **options) -> None:
        port = port or settings.SLIPWAY_WORKSPACE_PROXY_PORT
        if not 0 < port < 65536:
            raise CommandError(f"The port must be a number from 1 to 65535, got {port}.")
        portal = portal_url or settings.SLIPWAY_PORTAL_URL
        self.stdout.write(f"Workspace proxy on http://ws-<id>.localhost:{port}/ (signs in at {portal})")
        web.run_app(make_app(portal), host="127.0.0.1", port=port, print=None, access_log=None)
