"""The ``slipway`` command against a live server of the test database, on the shared fake cluster.

``cli(*args)`` invokes the Click app as a user would (CliRunner), connected by ``SLIPWAY_URL`` /
``SLIPWAY_TOKEN`` as in CI, with the config directory in the test's tmp_path.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from django.db import DEFAULT_DB_ALIAS, connections

from slipway.cli import cli as slipway_cli
from teams.services import create_api_token


@pytest.fixture
def short_lived_connections(monkeypatch):
    """The live server's request threads close their connections, so the test database can be dropped."""
    monkeypatch.setitem(connections.settings[DEFAULT_DB_ALIAS], "CONN_MAX_AGE", 0)


@pytest.fixture
def env(short_lived_connections, live_server, member, quota, fake_backend, published, tmp_path, monkeypatch):
    _token, raw = create_api_token(member, "cli")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return {"SLIPWAY_URL": live_server.url, "SLIPWAY_TOKEN": raw, "XDG_CONFIG_HOME": str(tmp_path / "config")}


@pytest.fixture
def cli(env):
    """``cli(*args, env=…, input=…)``: the command's Result (``exit_code``, ``stdout``, ``stderr``, ``output``)."""

    def invoke(*args, input: str | None = None, **more_env):
        return CliRunner().invoke(slipway_cli, list(args), env={**env, **more_env}, input=input,
                                  catch_exceptions=False)

    return invoke
