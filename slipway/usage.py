"""The money verbs: ``quota`` (quotas and budgets of your teams) and ``cost`` (a month's unit-hours, physical
GPU-hours and cost)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import click

from slipway.client import Client
from slipway.config import api_call
from slipway.output import dump, money, table


@click.command()
@click.option("--team", help="Only this team (default: each of yours).")
@api_call
def quota(client: Client, team: str | None) -> None:
    """Your teams' quotas and budgets.

    GPUs in use and queued per flavor, and this month's spending against the budget."""
    for slug in [team] if team else [t["slug"] for t in client.teams()]:
        usage = client.team_usage(slug)
        click.echo(f"Team {slug}")
        table(["FLAVOR", "LIMIT", "IN USE", "QUEUED"],
              [[q["flavor"], q["limit"], q["in_use"], q["queued"]] for q in usage["quotas"]])
        budget = usage.get("budget")
        if budget:
            click.echo(f"Budget: {budget['spent_month']} of {budget['monthly_limit']} {budget['currency']} spent "
                       f"this month, {budget['committed']} committed; month end {budget['projected_month_end']}, "
                       f"runs out {budget.get('runs_out_at') or 'not this month'}")


def month_range(month: str) -> tuple[str, str]:
    try:
        first = date.fromisoformat(f"{month}-01")
    except ValueError as exc:
        raise click.BadParameter("expected YYYY-MM, e.g. 2026-11", param_hint="--month") from exc
    following = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    return first.isoformat(), following.isoformat()


@click.command()
@click.option("--month", default=lambda: date.today().strftime("%Y-%m"), show_default="this month",
              help="The month to report, YYYY-MM.")
@click.option("--team", help="Only this team.")
@click.option("--by", "group_by", type=click.Choice(["day", "flavor", "user", "workload", "kind"]), default="workload",
              show_default=True, help="kind: the workload kind by its prefix (run, ep, ws), each kind's idle cost apart.")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def cost(client: Client, month: str, team: str | None, group_by: str, output: str) -> None:
    """A month's unit-hours, physical GPU-hours and cost, by workload, day, flavor, user or workload kind."""
    since, until = month_range(month)
    rows = client.usage_report(team=team, since=since, until=until, group_by=group_by)
    if output != "table":
        dump(rows, output)
        return
    if group_by == "workload":
        # Each row as people are told everywhere: "run bert (#12) of team nlp" (the API's ``label``).
        groups = [r.get("label") or r["group"] for r in rows]
    else:
        # Days, flavors, people and kinds sum the work of one or more teams: say which.
        groups = [r["group"] for r in rows]
        teams = [team] if team else sorted({
            r["team"] for r in client.usage_report(since=since, until=until, group_by="workload")})
        if teams:
            click.echo(f"{'Team' if len(teams) == 1 else 'Teams'} {', '.join(teams)}, {month}")
    # Two figures of time (docs/money.md): the flavors' units held (what prices are per) and physical GPUs.
    table([group_by.upper(), "UNIT-HOURS", "PHYSICAL GPU-HOURS", "COST", "IDLE COST"],
          [[group, r["unit_hours"], r["physical_gpu_hours"], money(r["cost"], r["currency"]),
            money(r["idle_cost"], r["currency"])]
           for group, r in zip(groups, rows, strict=True)])
    total = sum((Decimal(r["cost"]) for r in rows), Decimal(0))
    click.echo(f"Total: {money(total, rows[0]['currency'] if rows else '')}")
