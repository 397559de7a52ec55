"""Which registry an image reference pulls from, and whether Slipway lets a node pull from it.

The kubelet asks the node's container runtime to pull the image, so an image "from"
``169.254.169.254/x`` is a request the node sends to its cloud's metadata service: a blind
request forgery from inside the cluster. The registry host is therefore read the way the
runtime and the resolver behind it read it, not compared as a string:

* which part is the host: the first path component, when it contains ``.`` or ``:``, is
  ``localhost``, or has an upper-case letter (``distribution/reference``'s rule, which
  containerd and Docker follow); otherwise the image is on Docker Hub;
* the name as resolvers see it: case-folded, trailing dots dropped (``localhost.``);
* every numeric IPv4 form ``inet_aton`` accepts (``2130706433``, ``0x7f000001``,
  ``0177.0.0.1``, ``127.1``) and IPv6 literals in brackets (IPv4-mapped and NAT64 addresses
  are judged by the IPv4 address inside);
* wildcard DNS services that answer with the address written in the name
  (``169.254.169.254.nip.io``, ``10-0-0-1.sslip.io``, ``7f000001.nip.io``) are judged by
  that address, as is any name with a dotted or dashed private address in it.

Refused by default: addresses that are not global (loopback, link-local, private — RFC 1918,
CGNAT 100.64/10, ULA —, unspecified, reserved, multicast); cloud metadata names; names of
private-use domains (``.localhost``, ``.local``, ``.internal``, ``.home.arpa``, …);
cluster-internal names (``*.svc``, ``*.cluster.local``, ``kubernetes``,
``kubernetes.default…``); single-label hosts (``registry:5000``), which only the node's
search domains can resolve. A name can still resolve anywhere (DNS is the attacker's to
write): the allow-list (``SLIPWAY_ALLOWED_REGISTRIES``), when set, is the only rule, and the
one production should use.

Pure functions: no Django, no network.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re

from cluster.images import DOCKER_HUB, image_registry
from core.text import whole_number

#: Other names of Docker Hub that the runtime treats as ``docker.io``.
_DOCKER_HUB_ALIASES = ("index.docker.io",)
#: Cloud metadata services by name (GCP, AWS, Azure, OpenStack, Alibaba...).
METADATA_NAMES = (
    "metadata", "metadata.google.internal", "metadata.goog", "metadata.azure.internal",
    "instance-data", "instance-data.ec2.internal",
)
#: Domains for private use only (RFC 6761, RFC 6762, RFC 8375, ICANN's .internal) and the
#: cluster's own DNS zone: the name and every name under it.
PRIVATE_DOMAINS = ("localhost", "localdomain", "local", "internal", "home.arpa", "svc", "cluster.local")
#: Names of the Kubernetes API in every namespace's search path.
CLUSTER_API_NAMES = ("kubernetes", "kubernetes.default")
#: Public names whose every subdomain resolves to 127.0.0.1.
LOOPBACK_DOMAINS = ("localtest.me", "lvh.me", "vcap.me", "localho.st", "localhost.direct")
#: Wildcard DNS services answering with the address spelled in the name: dotted
#: (``10.0.0.1.nip.io``), dashed (``10-0-0-1.nip.io``, ``--1.sslip.io`` for ::1) or as eight
#: hex digits (``0a000001.nip.io``).
WILDCARD_DNS_DOMAINS = ("nip.io", "sslip.io", "xip.io", "nip.direct", "traefik.me")

_HOST_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_IPV4_PART = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_DASHED_QUAD = re.compile(r"(?:^|[^0-9])([0-9]{1,3}(?:-[0-9]{1,3}){3})(?:$|[^0-9])")
_HEX_LABEL = re.compile(r"^[0-9a-f]{8}$")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def split_registry(registry: str) -> tuple[str, str]:
    """``(host, port)`` of ``host[:port]`` or ``[v6]:port``; the port is "" when not given."""
    if registry.startswith("["):
        host, _bracket, rest = registry[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    host, _colon, port = registry.partition(":")
    return host, port


def normalise_registry(registry: str) -> str:
    """The registry as the resolver sees it: case-folded, trailing dots dropped, Docker Hub's aliases folded."""
    host, port = split_registry(registry)
    host = host.lower().rstrip(".")
    if host in _DOCKER_HUB_ALIASES:
        host = DOCKER_HUB
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}" if port else host


def parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """``host`` read as ``inet_aton`` reads it (1 to 4 parts, decimal, 0x-hex or 0-octal; the
    last part fills the remaining bytes), or None when it is not a numeric address."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_IPV4_PART.fullmatch(part) for part in parts):
        return None
    numbers = []
    for part in parts:
        if part.startswith("0x"):
            numbers.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part.startswith("0"):
            if not set(part) <= set("01234567"):
                return None
            numbers.append(int(part, 8))
        else:
            numbers.append(int(part))
    *leading, last = numbers
    if any(number > 255 for number in leading) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(leading):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def is_refused_address(address: IPAddress) -> bool:
    """Not a public unicast address: loopback, link-local, private (RFC 1918, CGNAT, ULA), reserved…"""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return is_refused_address(address.ipv4_mapped)
        if address in _NAT64:
            return is_refused_address(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address.sixtofour is not None and is_refused_address(address.sixtofour):
            return True
    return (not address.is_global or address.is_private or address.is_loopback or address.is_link_local
            or address.is_unspecified or address.is_reserved or address.is_multicast
            or address in _SHARED_ADDRESS_SPACE)


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SHARED_ADDRESS_SPACE = ipaddress.IPv4Network("100.64.0.0/10")  # CGNAT; also Alibaba's metadata 100.100.100.200


def _within(name: str, domain: str) -> bool:
    return name == domain or name.endswith("." + domain)


def _embedded_addresses(name: str) -> list[IPAddress]:
    """Addresses spelled inside a host name: four consecutive numeric labels, a dashed quad
    within a label, and — under a wildcard DNS service — eight hex digits or a dashed IPv6."""
    labels = name.split(".")
    found: list[IPAddress] = []
    for start in range(len(labels) - 3):
        quad = labels[start:start + 4]
        if all(label.isdigit() and len(label) <= 3 for label in quad):
            address = parse_ipv4(".".join(quad))
            if address is not None:
                found.append(address)
    for label in labels:
        for match in _DASHED_QUAD.finditer(label):
            address = parse_ipv4(match.group(1).replace("-", "."))
            if address is not None:
                found.append(address)
    if any(_within(name, domain) for domain in WILDCARD_DNS_DOMAINS):
        for label in labels:
            if _HEX_LABEL.fullmatch(label):
                found.append(ipaddress.IPv4Address(int(label, 16)))
            if "--" in label or label.count("-") >= 2:
                with contextlib.suppress(ValueError):  # not every dashed label is an address
                    found.append(ipaddress.IPv6Address(label.replace("-", ":")))
    return found


def refused_registry_reason(registry: str) -> str | None:
    """Why the default rule refuses ``registry`` (``host[:port]`` of an image), or None when it is allowed."""
    host, port = split_registry(registry)
    number = whole_number(port, 5)  # ASCII digits, read only when short: int() refuses "²" and 5,000 digits
    if port and not (number is not None and 0 < number < 65536):
        return f"{registry}: the port must be a number from 1 to 65535."
    if registry.startswith("["):
        try:
            address: IPAddress | None = ipaddress.IPv6Address(host)
        except ValueError:
            return f"{registry} is not a valid IPv6 address."
        return f"{registry} is a loopback, link-local or private address." if is_refused_address(address) else None
    name = host.lower().rstrip(".")
    labels = name.split(".")
    if not name or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        return f"{registry} is not a valid host name."
    if _IPV4_PART.fullmatch(labels[-1]):
        # A name ending in a number is an address to resolvers (there is no numeric top-level domain).
        address = parse_ipv4(name)
        if address is None:
            return f"{registry} is not a valid address."
        return f"{registry} is a loopback, link-local or private address." if is_refused_address(address) else None
    if name in METADATA_NAMES:
        return f"{registry} is a cloud metadata service."
    if (any(_within(name, domain) for domain in PRIVATE_DOMAINS) or name in CLUSTER_API_NAMES
            or name.startswith("kubernetes.default.")):
        return f"{registry} is a cluster-internal or private-use name."
    if len(labels) == 1:
        return f"{registry} is a single-label name, which only the node's search domains resolve."
    if any(_within(name, domain) for domain in LOOPBACK_DOMAINS):
        return f"{registry} resolves to this machine (loopback)."
    if any(is_refused_address(address) for address in _embedded_addresses(name)):
        return f"{registry} names a loopback, link-local or private address (wildcard DNS)."
    return None


def ambiguous_hub_namespace(image: str) -> str | None:
    """Why a Docker Hub image whose namespace reads as a refused host is refused too, or None.

    ``instance-data/x`` and ``0x7f000001/x`` are Docker Hub images to Docker and containerd
    (:func:`image_registry`), but the metadata service and 127.0.0.1 to anything that reads
    the first component as a host: a mirror, a proxy, a runtime configured differently.
    Such a name is refused unless the registry is written out (``docker.io/instance-data/x``),
    which no reader can take for a host. Single-label namespaces in general stay Docker
    Hub's (``pytorch/pytorch``): only numeric addresses, metadata and cluster API names count.
    """
    first, sep, _rest = image.partition("/")
    if not sep or image_registry(image) != DOCKER_HUB:
        return None
    name = first.lower()
    address = parse_ipv4(name) if _IPV4_PART.fullmatch(name.split(".")[-1]) else None
    if (address is not None and is_refused_address(address)) or name in METADATA_NAMES or name in CLUSTER_API_NAMES:
        return (f"{first}/… reads as the host {first} to anything that does not follow Docker Hub's naming rule; "
                f"write docker.io/{image} if you mean Docker Hub.")
    return None


def registry_allowed(registry: str, allowed: list[str] | tuple[str, ...]) -> bool:
    """Whether ``registry`` is one of the allow-list's entries (both compared normalised, port included)."""
    wanted = normalise_registry(registry)
    return any(normalise_registry(entry.strip()) == wanted for entry in allowed if entry.strip())
