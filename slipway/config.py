"""Where ``slipway`` connects, and as whom: ``SLIPWAY_URL`` / ``SLIPWAY_TOKEN`` when set (CI), else
the profile that ``slipway login`` saved in ``$XDG_CONFIG_HOME/slipway/config.toml``
(``~/.config/…``); :func:`api_call` runs a verb with a client of the chosen profile.

A profile's token is only ever sent to that profile's own URL (:func:`connection`): a ``SLIPWAY_URL`` that names
another server does not take the chosen profile's token along.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import tomllib
from collections.abc import Iterator
from datetime import date, datetime, time
from pathlib import Path
from urllib.parse import urlsplit

import click

from slipway.client import Client, NotSignedIn
from slipway.failures import EXIT_NOT_SIGNED_IN, EXIT_USAGE, Failure, refusals


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "slipway" / "config.toml"


def read_config() -> dict:
    """The config file as TOML; one that cannot be read, or whose ``profiles`` is not a table of tables, is a
    :class:`Failure` naming the file (never a traceback)."""
    path = config_path()
    if not path.exists():
        return {}
    try:
        config = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise Failure(f"{path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise Failure(f"{path}: not UTF-8 text (byte {exc.start + 1} cannot be read)") from exc
    except tomllib.TOMLDecodeError as exc:
        raise Failure(f"{path}: {exc}") from exc
    profiles = config.get("profiles", {})
    if not isinstance(profiles, dict):
        raise Failure(f"{path}: `profiles` must be a table of profiles ([profiles.NAME] sections with url and token)")
    for name, values in profiles.items():
        if not isinstance(values, dict) or not all(isinstance(values.get(k, ""), str) for k in ("url", "token")):
            raise Failure(f"{path}: profile {name!r} must be a table ([profiles.{_key(name)}]) whose url and token "
                          "are strings")
    return config


def _string(value: str) -> str:
    """A TOML basic string: every control character (DEL too) escaped, the rest as it is."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in escaped) + '"'


def _key(name: str) -> str:
    return name if name and all(c.isascii() and (c.isalnum() or c in "-_") for c in name) else _string(name)


def _value(value) -> str:
    """A TOML value of what :mod:`tomllib` reads (tables inline): a config is written back as it was read."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else f"{'-' if value < 0 else ''}inf")
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"


def _table(lines: list[str], header: str, table: dict) -> None:
    """``table`` under ``[header]`` (the top level when empty): its plain values first, then its tables."""
    plain = {k: v for k, v in table.items() if not isinstance(v, dict)}
    if header and (plain or not table):
        lines.append(f"[{header}]")
    lines += [f"{_key(k)} = {_value(v)}" for k, v in plain.items()]
    if plain or not header:
        lines.append("")
    for k, v in table.items():
        if isinstance(v, dict):
            _table(lines, f"{header}.{_key(k)}" if header else _key(k), v)


def write_profile(name: str, url: str, token: str) -> Path:
    """Save ``name`` among the profiles, the rest of the file kept; the file holds tokens, so only its owner may
    read it (0600)."""
    config = read_config()
    config.setdefault("profiles", {})[name] = {"url": url, "token": token}
    lines: list[str] = []
    _table(lines, "", config)
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines).strip("\n") + "\n")
    path.chmod(0o600)  # a file that existed before keeps its old mode through os.open
    return path


def server(url: str) -> tuple[str, str, int | None, str]:
    """What a URL names as a server a token may go to: scheme, host, port (the scheme's default made explicit)
    and path, so ``https://Example.com:443/`` and ``https://example.com`` are one server."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    port = port or {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/")


def resolve(profile: str) -> tuple[str, str | None, str | None]:
    """URL, token and, when there is no token, how to sign in to that URL.

    The URL is ``SLIPWAY_URL``'s, else the profile's. ``SLIPWAY_TOKEN`` goes with ``SLIPWAY_URL`` only (the caller
    chose both); set alone, it is refused: the profile's server may not be the one the token is for (a CI
    job's staging token to the production server of a developer's profile). Otherwise a saved token goes only to its own profile's server: the chosen profile's when the URL is
    its server, else the first other profile's whose server it is, else none — a production token is never sent
    to the staging server ``SLIPWAY_URL`` names.
    """
    profiles = read_config().get("profiles", {})
    saved = profiles.get(profile, {})
    url = os.environ.get("SLIPWAY_URL") or saved.get("url")
    if not url:
        raise Failure("not signed in: run `slipway login` (or set SLIPWAY_URL and SLIPWAY_TOKEN)", EXIT_NOT_SIGNED_IN)
    if os.environ.get("SLIPWAY_TOKEN"):
        if not os.environ.get("SLIPWAY_URL"):
            raise Failure("SLIPWAY_TOKEN is set without SLIPWAY_URL: set SLIPWAY_URL to the server the token is for "
                          f"(it is not sent to the profile's {url})", EXIT_USAGE)
        return url, os.environ["SLIPWAY_TOKEN"], None
    for values in (saved, *profiles.values()):
        if values.get("url") and values.get("token") and server(values["url"]) == server(url):
            return url, values["token"], None
    flag = "" if profile == "default" else f"--profile {profile} "
    hint = (f"not signed in to {url}: no saved profile is for that server (a profile's token goes to its own URL "
            f"only); set SLIPWAY_TOKEN, or run `slipway {flag}login --url {url}`"
            if saved.get("url") else f"not signed in to {url}: set SLIPWAY_TOKEN, or run `slipway login --url {url}`")
    return url, None, hint


@contextlib.contextmanager
def signed_in(profile: str) -> Iterator[Client]:
    """A client of the chosen profile, the API's refusals as clean messages; a 401 without a token says how to
    sign in to that server."""
    url, token, hint = resolve(profile)
    with refusals(), Client(url, token) as client:
        try:
            yield client
        except NotSignedIn as exc:
            if hint is None:
                raise
            raise Failure(hint, EXIT_NOT_SIGNED_IN) from exc


def api_call(command):
    """Run a verb with a client of the chosen profile; the API's refusals become clean messages."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        with signed_in(click.get_current_context().obj["profile"]) as client:
            return command(client, *args, **kwargs)

    return wrapper
