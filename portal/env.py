"""Small typed helpers that read settings from the environment.

Every variable Slipway reads goes through one of these, so a wrong value fails loudly at
start-up with the variable's name instead of surfacing later as a strange behaviour.
``.env.example`` lists every variable read here.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    """The variable as text, or ``default`` when it is unset."""
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off`` (any case; empty is false); anything else fails."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    """A comma-separated list; blanks dropped."""
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_networks(name: str, default: list[str]) -> tuple[str, ...]:
    """A comma-separated list of addresses or networks (``10.0.0.0/8,::1``); a bad entry fails."""
    networks = []
    for item in env_list(name, default):
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(f"{name} must list addresses or networks (CIDR), got {item!r}") from None
    return tuple(networks)


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (any case); anything else fails."""
    value = os.environ.get(name, default).strip().lower() or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def export_multiproc_dir(default: Path) -> str:
    """The directory Prometheus figures of this process tree go to (``PROMETHEUS_MULTIPROC_DIR``,
    else ``default``), created and put into the environment.

    ``prometheus_client`` reads the variable once, when first imported, to choose its
    multiprocess mode; the settings run before any module imports it (:mod:`core.metrics`), and
    processes forked or started from here (gunicorn's and Celery's) inherit it.
    """
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or str(default)
    Path(path).mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def derived_fernet_key(secret_key: str) -> str:
    """A Fernet key (32 bytes, url-safe base64) derived from ``secret_key``: the demo's default
    ``SLIPWAY_SECRET_KEYS`` with DEBUG on, so a local start needs no key of its own."""
    digest = hashlib.sha256(b"slipway secret env key\x00" + secret_key.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")


def env_trusted_proxies(name: str) -> int | tuple[str, ...]:
    """A hop count (``1``; at most 999) or a comma-separated list of proxy addresses/networks (``10.2.0.0/16``).

    Unset or empty: 0. A list entry that is not an address or network fails.
    """
    raw = (os.environ.get(name) or "").strip()
    if raw == "" or (raw.isascii() and raw.isdigit() and len(raw) <= 3):  # a hop count; "²" is no number
        return int(raw or 0)
    networks = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} must be a number of proxies or a list of their addresses/networks, got {item!r}"
            ) from None
    return tuple(networks)


#: Seconds a cache call may wait for Redis to connect or answer.
REDIS_CACHE_TIMEOUT = 2


def redis_cache(url: str) -> dict:
    """The cache settings for Redis at ``url``, with bounded waits.

    A Redis that drops packets must fail fast rather than hang every request that reads the
    cache: the sign-in throttle then counts from the audit log (:mod:`teams.throttle`).
    """
    return {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url,
            "OPTIONS": {"socket_connect_timeout": REDIS_CACHE_TIMEOUT, "socket_timeout": REDIS_CACHE_TIMEOUT}}


def parse_database_url(url: str) -> dict:
    """Turn ``postgres://user:pw@host:port/name`` or ``sqlite:///path`` into a DATABASES entry."""
    parsed = urlparse(url)
    scheme = parsed.scheme
    if scheme in {"postgres", "postgresql", "pgsql"}:
        options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        try:
            port = parsed.port  # urllib only validates the port when it is read
        except ValueError:
            raise ImproperlyConfigured(f"DATABASE_URL has an invalid port: {parsed.netloc.rpartition('@')[2]!r}") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": unquote(parsed.hostname or ""),
            "PORT": str(port or ""),
            "OPTIONS": options,
        }
    if scheme == "sqlite":
        # sqlite:///relative/path or sqlite:////absolute/path
        path = url[len("sqlite:///"):] if url.startswith("sqlite:///") else parsed.path
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": path or ":memory:"}
    raise ImproperlyConfigured(f"DATABASE_URL scheme {scheme!r} is not supported (use postgres:// or sqlite:///)")


def env_group_map(name: str) -> tuple[tuple[str, str, str], ...]:
    """``"<group>=<team-slug>:<role>,…"`` as ``((group, team slug, role), …)``; unset or empty: none.

    Only the shape is checked here (settings load before the apps): that each role is a role and
    each team exists is checked where the map is seeded (:mod:`teams.sso`, system check
    ``slipway.E002``). A group may itself contain ``=`` (LDAP DNs do): the last ``=`` splits.
    """
    entries = []
    for item in (part.strip() for part in (os.environ.get(name) or "").split(",")):
        if not item:
            continue
        group, eq, target = item.rpartition("=")
        slug, colon, role = target.partition(":")
        if not eq or not group.strip() or not colon or not slug.strip() or not role.strip():
            raise ImproperlyConfigured(f"{name} entries look like <group>=<team-slug>:<role>, got {item!r}")
        entries.append((group.strip(), slug.strip(), role.strip().lower()))
    return tuple(entries)
