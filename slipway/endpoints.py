"""The endpoint verbs, the ``endpoint`` group (also ``endpoints``): create, ls, describe, scale, delete."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from slipway.client import BadRequest, Client
from slipway.config import api_call
from slipway.keys import keys
from slipway.output import dump, fields, money, per_hour, table, unit_price
from slipway.specs import load_spec, refused_spec, show_forecast


@click.group()
def endpoint() -> None:
    """Inference endpoints: create, ls, describe, scale, delete.

    `slipway endpoints` is the same group, plural as `slipway runs`."""


@endpoint.command("create")
@click.option("-f", "--file", "spec_file", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The endpoint's spec: YAML or JSON with the API's fields.")
@click.option("--team", help="Team slug (overrides the spec's `team`).")
@click.option("--dry-run", is_flag=True, help="Only show the admission decision, costs and burst now.")
@click.option("--idempotency-key", help="Reuse the key of an earlier attempt: never a second endpoint.")
@api_call
def endpoint_create(client: Client, spec_file: Path, team: str | None, dry_run: bool,
                    idempotency_key: str | None) -> None:
    """Create an inference endpoint from a spec file."""
    spec = load_spec(spec_file)
    if team:
        spec["team"] = team
    try:
        if dry_run:
            sys.exit(show_forecast(client.dry_run_endpoint(spec)))
        created = client.create_endpoint(spec, idempotency_key=idempotency_key)
    except BadRequest as exc:
        raise refused_spec(spec_file, exc) from exc
    click.echo(f"endpoint {created['id']} {created['name']}: {created['state']}")


@endpoint.command("ls")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@click.option("--team", help="Only this team's endpoints.")
@click.option("--state", help="Only endpoints in this state (ready, failed, …) or set of states (active, holding, "
                              "unfinished).")
@click.option("--all-teams", is_flag=True, help="Every team's endpoints (platform staff only).")
@api_call
def endpoint_ls(client: Client, output: str, team: str | None, state: str | None, all_teams: bool) -> None:
    """List the endpoints of your teams."""
    items = list(client.endpoints(team=team, state=state, all_teams=all_teams))
    if output != "table":
        dump(items, output)
        return
    table(["ID", "TEAM", "NAME", "STATE", "REPLICAS", "FLAVOR", "URL"],
          [[e["id"], e["team"], e["name"], e["state"], f"{e['replicas']}/{e['min_replicas']}-{e['max_replicas']}",
            e["flavor"], e.get("url")] for e in items])


@endpoint.command("describe")
@click.argument("endpoint_ref", metavar="ENDPOINT")
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text", show_default=True)
@api_call
def endpoint_describe(client: Client, endpoint_ref: str, output: str) -> None:
    """Show one endpoint (its id, or its name in your teams): state and why, replicas, cost."""
    e = client.endpoint(client.workload_id("endpoints/", endpoint_ref, "endpoint"))
    if output != "text":
        dump(e, output)
        return
    fields([
        ("Endpoint", f"{e['id']} {e['name']}"), ("Team", e["team"]), ("State", e["state"]), ("Reason", e.get("reason")),
        ("Replicas", f"{e['replicas']} ready, {e['desired_replicas']} wanted, ceiling {e['replica_ceiling']}"
                     f" (min {e['min_replicas']}, max {e['max_replicas']})"),
        ("Image", e["image"]), ("Flavor", f"{e['flavor']} × {e['gpus_per_replica']} per replica"), ("URL", e.get("url")),
        ("Internal URL", e.get("internal_url")),
        ("Cost to date", money(e["cost_to_date"], e.get("currency", ""))),
        ("Cost/hour", per_hour(e.get("estimated_cost_per_hour"), e.get("currency", ""))), ("Price", unit_price(e)),
    ])


@endpoint.command("scale")
@click.argument("endpoint_id", type=int)
@click.option("--min", "min_replicas", type=click.IntRange(min=0), help="Guaranteed replicas (must fit the quota now).")
@click.option("--max", "max_replicas", type=click.IntRange(min=1), help="The most replicas.")
@api_call
def endpoint_scale(client: Client, endpoint_id: int, min_replicas: int | None, max_replicas: int | None) -> None:
    """Change an endpoint's minimum and maximum replicas."""
    if min_replicas is None and max_replicas is None:
        raise click.UsageError("give --min, --max or both")
    e = client.scale_endpoint(endpoint_id, min_replicas=min_replicas, max_replicas=max_replicas)
    click.echo(f"endpoint {e['id']} {e['name']}: min {e['min_replicas']}, max {e['max_replicas']}, "
               f"ceiling {e['replica_ceiling']}")


@endpoint.command("delete")
@click.argument("endpoint_id", type=int)
@api_call
def endpoint_delete(client: Client, endpoint_id: int) -> None:
    """Delete an endpoint: its quota is released and its objects removed."""
    e = client.delete_endpoint(endpoint_id)
    click.echo(f"endpoint {e['id']} {e['name']}: {e['state']}")


# API keys: `slipway endpoint keys …` (slipway.keys).
endpoint.add_command(keys)
