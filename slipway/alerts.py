"""``slipway alerts``: a team's alert rules on its workloads' GPUs — idle GPUs, GPU memory nearly full —
its own, the platform's and what applies; its admins tighten them (docs/notifications.md "Alerts")."""

from __future__ import annotations

import click

from slipway.client import AlertRules, Client
from slipway.config import api_call
from slipway.output import dump, table

#: The rules a team sets, as the API names them: (field, what it is, unit).
RULES = (("idle_util_pct", "idle: GPU utilization under", "%"), ("idle_minutes", "idle: for at least", "min"),
         ("memory_pct", "OOM risk: GPU memory used over", "%"), ("memory_minutes", "OOM risk: for at least", "min"))


def _figure(value, unit: str) -> str:
    return "-" if value is None else f"{value:g} {unit}"


def show(team: str, rules: AlertRules) -> None:
    click.echo(f"Team {team}")
    table(["RULE", "TEAM'S", "PLATFORM'S", "APPLIES"],
          [[words, _figure(rules["team"][name], unit), _figure(rules["platform"][name], unit),
            _figure(rules["effective"][name], unit)] for name, words, unit in RULES])


@click.command()
@click.option("--team", help="The team (default: each of yours; changing needs one).")
@click.option("--idle-pct", type=float, help="Alert when GPU utilization is under this percent (at least the platform's).")
@click.option("--idle-minutes", type=int, help="... for this many minutes (at most the platform's).")
@click.option("--memory-pct", type=float, help="Alert when GPU memory used is over this percent (at most the platform's).")
@click.option("--memory-minutes", type=int, help="... for this many minutes (at most the platform's).")
@click.option("--reset", multiple=True, type=click.Choice([name for name, _w, _u in RULES]),
              help="Give this rule back to the platform's (repeatable).")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def alerts(client: Client, team: str | None, idle_pct: float | None, idle_minutes: int | None,
           memory_pct: float | None, memory_minutes: int | None, reset: tuple[str, ...], output: str) -> None:
    """Your teams' alert rules: idle GPUs, GPU memory nearly full (OOM risk).

    A team's admins may tighten the platform's rules, never loosen them: e.g.
    `slipway alerts --team nlp --idle-minutes 10`."""
    changes: dict[str, float | int | None] = {name: value for name, value in (
        ("idle_util_pct", idle_pct), ("idle_minutes", idle_minutes), ("memory_pct", memory_pct),
        ("memory_minutes", memory_minutes)) if value is not None}
    changes.update(dict.fromkeys(reset))
    if changes and not team:
        raise click.UsageError("changing alert rules needs --team")
    teams = [team] if team else [t["slug"] for t in client.teams()]
    found = {slug: client.set_alert_rules(slug, changes) if changes else client.alert_rules(slug) for slug in teams}
    if output != "table":
        dump(found[team] if team else found, output)
        return
    for slug, rules in found.items():
        show(slug, rules)
