"""Where ``slipway`` connects, and as whom: ``SLIPWAY_URL`` / ``SLIPWAY_TOKEN`` when set (CI), else
the profile that ``slipway login`` saved in ``$XDG_CONFIG_HOME/slipway/config.toml``
(``~/.config/…``); :func:`api_call` runs a verb with a client of the chosen profile.
"""

from __future__ import annotations

import functools
import json
import os
import tomllib
from pathlib import Path

import click

from slipway.client import Client
from slipway.failures import EXIT_NOT_SIGNED_IN, Failure, refusals


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "slipway" / "config.toml"


def read_config() -> dict:
    path = config_path()
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise Failure(f"{path}: {exc}") from exc


def write_profile(name: str, url: str, token: str) -> Path:
    """Save ``name`` among the profiles; the file holds tokens, so only its owner may read it (0600)."""
    config = read_config()
    config.setdefault("profiles", {})[name] = {"url": url, "token": token}
    lines = []
    for profile, values in config["profiles"].items():
        lines.append(f"[profiles.{json.dumps(profile)}]")
        lines += [f"{key} = {json.dumps(str(value))}" for key, value in values.items()]
        lines.append("")
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("\n".join(lines))
    path.chmod(0o600)  # a file that existed before keeps its old mode through os.open
    return path


def connection(profile: str) -> tuple[str, str | None]:
    """URL and token: the environment's first, then the profile's."""
    saved = read_config().get("profiles", {}).get(profile, {})
    url = os.environ.get("SLIPWAY_URL") or saved.get("url")
    token = os.environ.get("SLIPWAY_TOKEN") or saved.get("token")
    if not url:
        raise Failure("not signed in: run `slipway login` (or set SLIPWAY_URL and SLIPWAY_TOKEN)", EXIT_NOT_SIGNED_IN)
    return url, token


def api_call(command):
    """Run a verb with a client of the chosen profile; the API's refusals become clean messages."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        url, token = connection(ctx.obj["profile"])
        with refusals(), Client(url, token) as client:
            return command(client, *args, **kwargs)

    return wrapper
