"""``slipway workspace create|ls|open|pause|resume|delete`` against a live server of the test database."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from django.db import DEFAULT_DB_ALIAS, connections

from slipway.cli import cli as slipway_cli
from teams.services import create_api_token
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cli(live_server, member, ws_quota, fake_backend, published, tmp_path, monkeypatch):
    monkeypatch.setitem(connections.settings[DEFAULT_DB_ALIAS], "CONN_MAX_AGE", 0)
    _token, raw = create_api_token(member, "cli")
    env = {"SLIPWAY_URL": live_server.url, "SLIPWAY_TOKEN": raw, "XDG_CONFIG_HOME": str(tmp_path / "config")}

    def invoke(*args, input: str | None = None):
        return CliRunner().invoke(slipway_cli, list(args), env=env, input=input, catch_exceptions=False)

    return invoke


def test_the_workspace_verbs(cli, team):
    created = cli("workspace", "create", "--team", team.slug, "--name", "explore", "--flavor", "a100-1g.10gb",
                  "--home-gb", "40")
    assert created.exit_code == 0, created.output
    workspace = Workspace.objects.get()
    assert created.stdout == f"workspace {workspace.pk} explore: admitted\n"
    listed = cli("workspaces", "ls")
    assert listed.exit_code == 0 and "explore" in listed.stdout and "40 GB" in listed.stdout
    assert listed.stdout.split()[:4] == ["ID", "TEAM", "NAME", "STATE"]
    # Holding quota, it is among the work `top` shows (the API's "holding" set, no list of states in the CLI).
    assert cli("top").stdout.splitlines()[1].split()[:5] == ["workspace", str(workspace.pk), team.slug, "explore", "1"]
    # Not running yet: open says why (409), with the non-zero exit of a refusal.
    opened = cli("workspace", "open", str(workspace.pk))
    assert opened.exit_code != 0 and "open it once it runs" in opened.output
    paused = cli("workspace", "pause", str(workspace.pk))
    assert paused.stdout == f"workspace {workspace.pk} explore: paused (home volume 40 GB kept)\n"
    assert "explore" not in cli("workspace", "ls", "--state", "holding").stdout
    assert "explore" in cli("workspace", "ls", "--state", "unfinished").stdout
    assert cli("top").stdout.strip() == "Nothing holds GPUs in your teams."
    assert cli("workspace", "resume", str(workspace.pk)).stdout == f"workspace {workspace.pk} explore: admitted\n"
    # Delete asks first, naming the home volume's size; "no" keeps it.
    kept = cli("workspace", "delete", str(workspace.pk), input="n\n")
    assert "its home volume of 40 GB" in kept.output and kept.exit_code != 0
    assert Workspace.objects.get().state == "admitted"
    deleted = cli("workspace", "delete", str(workspace.pk), "--yes")
    assert deleted.stdout == f"workspace {workspace.pk} explore: deleting\n"


def test_a_refused_workspace_says_which_fields(cli, team):
    refused = cli("workspace", "create", "--team", team.slug, "--name", "bad", "--flavor", "nope", "--home-gb", "9999")
    assert refused.exit_code == 2 and "home_gb: Must be between 1 and 2048." in refused.output
    assert not Workspace.objects.exists()
