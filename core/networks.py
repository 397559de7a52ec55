"""Whether a socket's peer is in a list of networks: the one rule for settings that name clients or proxies by
address (``SLIPWAY_METRICS_ALLOW``, ``SLIPWAY_GATEWAY_TRUSTED_PROXIES``)."""

from __future__ import annotations

import ipaddress
from functools import lru_cache


@lru_cache(maxsize=16)
def _parsed(networks: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(network, strict=False) for network in networks)


def address_in(remote_addr: str | None, networks: tuple[str, ...]) -> bool:
    """Whether ``remote_addr`` (a peer's address as the server reports it: a scope id, ``fe80::1%eth0``, and the
    IPv4-mapped form of a dual-stack socket, ``::ffff:10.0.0.1``, allowed) is in one of ``networks`` (CIDR).
    Anything that is no address (a Unix socket's empty peer) is in none."""
    try:
        address = ipaddress.ip_address((remote_addr or "").split("%")[0])
    except ValueError:
        return False
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in _parsed(tuple(networks)))
