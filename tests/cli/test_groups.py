"""The run verbs as a group (``slipway runs …``) beside the endpoint group, and as the top-level
verbs they always were: one command under two names, with the same output (issue 36.2)."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from slipway.cli import cli as slipway_cli
from tests.cli.test_cli import run_id_of
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_lists_the_groups_and_keeps_the_run_verbs_at_the_top():
    listed = CliRunner().invoke(slipway_cli, ["--help"]).stdout
    commands = [line.split()[0] for line in listed.split("Commands:\n")[1].splitlines() if line.strip()]
    assert {"runs", "endpoint", "run", "ps", "describe", "logs", "checkpoint", "cancel", "quota", "cost",
            "login"} <= set(commands)
    assert "endpoints" not in commands  # an alias of `endpoint`, not a second entry


def test_the_top_level_run_verbs_are_the_runs_groups_commands():
    runs = slipway_cli.commands["runs"]
    assert sorted(runs.commands) == ["cancel", "checkpoint", "describe", "logs", "metrics", "ps", "run"]
    assert all(slipway_cli.commands[name] is command for name, command in runs.commands.items())
    assert slipway_cli.commands["endpoints"] is slipway_cli.commands["endpoint"]


def test_runs_ps_and_describe_print_what_ps_and_describe_print(cli, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(run_payload(max_retries=0)))
    submitted = cli("runs", "run", "-f", str(spec))
    assert submitted.exit_code == 0, submitted.output
    run_id = str(run_id_of(submitted.stdout))
    for args in (["ps"], ["ps", "-o", "wide"], ["describe", run_id], ["describe", run_id, "-o", "json"]):
        top, grouped = cli(*args), cli("runs", *args)
        assert (grouped.exit_code, grouped.stdout) == (top.exit_code, top.stdout) and top.exit_code == 0
    assert run_id in cli("runs", "ps").stdout


def test_endpoints_answers_for_endpoint(cli):
    singular, plural = cli("endpoint", "ls"), cli("endpoints", "ls")
    assert singular.exit_code == plural.exit_code == 0
    assert plural.stdout == singular.stdout and singular.stdout.split()[:3] == ["ID", "TEAM", "NAME"]
