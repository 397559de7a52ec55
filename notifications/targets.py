"""Which webhook URLs Slipway posts to: http(s) only, and never to an internal address.

A webhook is a request the portal's worker sends wherever a team admin points it, so an
internal URL (``http://169.254.169.254/…``, ``http://redis:6379``) would be a request forgery
from inside the platform. The host is judged by the image-registry rules
(:func:`workloads.image_hosts.refused_registry_reason`: loopback, link-local, private, metadata,
cluster-internal and single-label names, numeric and wildcard-DNS spellings) when the webhook
is saved, and every address it resolves to is judged again just before each POST, since DNS
can change meanwhile: resolved once (:func:`resolve`), and the POST connects to the address
judged, with the name kept in the Host header and as the TLS server name (:func:`pinned_url`),
never following a redirect. ``SLIPWAY_WEBHOOK_ALLOW_LOOPBACK`` (tests and the demo only) lets
``127.0.0.1``, ``[::1]`` and ``localhost`` through; nothing else internal is ever allowed.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

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


@dataclass(frozen=True)
class Target:
    """Where one delivery connects: the address its host resolved to and was judged by, once.

    ``address`` is None with a ``problem`` (the words a delivery log may show: never the internal
    address a name resolved to, which would map the platform's network for whoever reads the log).
    """

    host: str
    address: str | None
    problem: str | None = None


def resolve(url: str) -> Target:
    """Resolve ``url``'s host once and judge every address it answers (DNS rebinding: a name may answer
    a public address to a check and an internal one to the connect that follows, so the caller
    connects to the address judged here, never to the name). The first address is the one used."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if _loopback_allowed(host):
        return Target(host, "::1" if host == "::1" else "127.0.0.1")
    try:
        infos = socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80),
                                   type=socket.SOCK_STREAM)
    except OSError:
        return Target(host, None, f"{host} does not resolve")
    addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    if not addresses:
        return Target(host, None, f"{host} does not resolve")
    for address in addresses:
        # Loopback only where the setting lets loopback names through (tests and the demo).
        if is_refused_address(address) and not (settings.SLIPWAY_WEBHOOK_ALLOW_LOOPBACK and address.is_loopback):
            return Target(host, None, f"{host} resolves to an internal address")
    return Target(host, str(addresses[0]))


def pinned_url(url: str, target: Target) -> str:
    """``url`` with its host replaced by the judged address (the request keeps Host and TLS server name)."""
    parts = urlsplit(url)
    literal = f"[{target.address}]" if ":" in (target.address or "") else target.address
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    return urlunsplit(parts._replace(netloc=netloc))
