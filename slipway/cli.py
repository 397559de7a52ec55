"""The ``slipway`` command: run, watch, follow and cancel work from the terminal (docs/api.md "Sign-in
and the command line"). Every verb is a few calls of :class:`slipway.client.Client`.

This module is the root group: its ``--profile``, its help with the exit codes, and where each
verb is registered. The verbs live by kind — :mod:`slipway.runs`, :mod:`slipway.endpoints`,
:mod:`slipway.usage` (quota, cost), :mod:`slipway.reservations` (reserve), :mod:`slipway.sweeps` (sweep), :mod:`slipway.alerts`, :mod:`slipway.flavors`, :mod:`slipway.clusters` (staff), :mod:`slipway.insight` (metrics, top),
:mod:`slipway.login` — on top of :mod:`slipway.config`
(where it connects), :mod:`slipway.output` and :mod:`slipway.specs`.

Runs have a group, ``slipway runs …``, as endpoints have ``slipway endpoint …``; their verbs
stay top-level too (``slipway ps`` is ``slipway runs ps``: one command under two names), since
scripts and habits use them. ``endpoints`` answers for ``endpoint``, so both kinds read the same
in the plural.
"""

from __future__ import annotations

import click

from slipway.alerts import alerts
from slipway.clusters import clusters
from slipway.endpoints import endpoint
from slipway.flavors import flavors
from slipway.insight import metrics, top
from slipway.login import login
from slipway.reservations import reserve
from slipway.runs import runs
from slipway.sweeps import sweep
from slipway.usage import cost, quota
from slipway.workspaces import workspace

HELP = """Slipway from the terminal: submit, watch, follow and cancel GPU work.

\b
Sign in once with `slipway login` (in your browser), or set SLIPWAY_URL and
SLIPWAY_TOKEN (CI). Every verb has --help; a spec file is YAML or JSON with
the API's fields (see `slipway run --help`).

\b
Exit codes:
  0    ok
  1    a watched run failed (or another refusal, an unreachable server,
       an answer that is not the API's)
  2    usage error, a bad spec file, or a spec the API refuses
  3    not signed in
  4    not found or forbidden
  130  Ctrl-C stopped a watch (the work goes on)
"""


class Verbs(click.Group):
    """A group whose commands may answer to a second name (an alias); its help lists each
    command once, by its own name."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in super().list_commands(ctx) if self.commands[name].name == name]


@click.group(cls=Verbs, help=HELP, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--profile", default="default", envvar="SLIPWAY_PROFILE", show_default=True, show_envvar=True,
              help="Profile of the config file to use.")
@click.pass_context
def cli(ctx: click.Context, profile: str) -> None:
    ctx.ensure_object(dict)["profile"] = profile


runs.add_command(metrics)  # a run verb like the others (slipway runs metrics), from slipway.insight
for verb in (login, runs, endpoint, workspace, reserve, sweep, flavors, clusters, quota, cost, alerts, top,
             *runs.commands.values()):  # the run verbs: also top-level
    cli.add_command(verb)
cli.add_command(endpoint, "endpoints")
cli.add_command(workspace, "workspaces")
cli.add_command(sweep, "sweeps")


def main() -> None:
    """The console script (pyproject's ``slipway``)."""
    cli()
