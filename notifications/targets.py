"""Which webhook URLs Slipway posts to: http(s) only, and never to an internal address.

A webhook is a request the portal's worker sends wherever a team admin points it, so an
internal URL (``http://169.254.169.254/…``, ``http://redis:6379``) would be a request forgery
from inside the platform. The host is judged by the image-registry rules
(:func:`workloads.image_hosts.refused_registry_reason`: loopback, link-local, private, metadata,
cluster-internal and single-label names, numeric and wildcard-DNS spellings) when the webhook
is saved, and every address it resolves to is judged again just before each POST, since DNS
can change meanwhile. ``SLIPWAY_WEBHOOK_ALLOW_LOOPBACK`` (tests and the demo only) lets
``127.0.0.1``, ``[::1]`` and ``localhost`` through; nothing else internal is ever allowed.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

from notifications.constants import MAX_URL_LENGTH
from workloads.image_hosts import is_refused_address, refused_registry_reason

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def _loopback_allowed(host: str) -> bool:
    return settings.SLIPWAY_WEBHOOK_ALLOW_LOOPBACK and host.lower().rstrip(".") in LOOPBACK_NAMES


def url_problem(url: str) -> str | None:
    """Why ``url`` may not be a webhook, or None when it may."""
    if len(url) > MAX_URL_LENGTH:
        return f"Use at most {MAX_URL_LENGTH} characters."
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "Enter a valid URL."
    if parts.scheme not in ("http", "https"):
        return "Only http:// and https:// URLs can be webhooks."
    host = parts.hostname or ""
    if not host:
        return "Enter a URL with a host name."
    if parts.username or parts.password:
        return "Leave user names and passwords out of the URL: the signature authenticates Slipway."
    if _loopback_allowed(host):
        return None
    address = f"[{host}]" if ":" in host else host
    refused = refused_registry_reason(f"{address}:{port}" if port else address)
    return f"Slipway does not post to internal addresses: {refused}" if refused else None


def resolved_problem(url: str) -> str | None:
    """Why the addresses ``url``'s host resolves to now may not be posted to, or None."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if _loopback_allowed(host):
        return None
    try:
        infos = socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80),
                                   type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"{host} does not resolve ({exc.strerror or exc})"
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%")[0])
        if is_refused_address(address):
            return f"{host} resolves to the internal address {address}"
    return None
