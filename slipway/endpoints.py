"""The endpoint verbs, the ``endpoint`` group (also ``endpoints``): create, ls, describe, scale, delete, and the
revisions' (rollout, promote, rollback, revisions); keys, traffic and cold starts are added from their modules."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from slipway.client import BadRequest, Client
from slipway.config import api_call
from slipway.failures import EXIT_USAGE, Failure, creating, idempotency_key
from slipway.keys import keys
from slipway.output import dump, fields, money, per_hour, table, unit_price
from slipway.serving import cold_starts, traffic
from slipway.specs import load_spec, refused_spec, show_preview


@click.group()
def endpoint() -> None:
    """Inference endpoints: create, ls, describe, scale, delete; rollout, promote, rollback, revisions; keys,
    traffic, cold-starts.

    `slipway endpoints` is the same group, plural as `slipway runs`."""


@endpoint.command("create")
@click.option("-f", "--file", "spec_file", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The endpoint's spec: YAML or JSON with the API's fields.")
@click.option("--team", help="Team slug (overrides the spec's `team`).")
@click.option("--dry-run", is_flag=True, help="Only show the admission decision, costs and burst now.")
@click.option("--idempotency-key", "given_key", help="Reuse the key of an earlier attempt: never a second endpoint.")
@api_call
def endpoint_create(client: Client, spec_file: Path, team: str | None, dry_run: bool,
                    given_key: str | None) -> None:
    """Create an inference endpoint from a spec file."""
    spec = load_spec(spec_file)
    if team:
        spec["team"] = team
    key = idempotency_key(given_key)
    try:
        if dry_run:
            sys.exit(show_preview(client.dry_run_endpoint(spec)))
        with creating("endpoint", key):
            created = client.create_endpoint(spec, idempotency_key=key)
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


# API keys: `slipway endpoint keys …` (slipway.keys); traffic and cold starts (slipway.serving).
endpoint.add_command(keys)
endpoint.add_command(traffic)
endpoint.add_command(cold_starts)
# -- revisions (docs/serving.md "Revisions, canary and rollback") -----------------------------------------------


def _percent(rate) -> str:
    return "—" if rate is None else f"{rate * 100:.1f}%"


def _revision_line(e_id: int, rev: dict) -> str:
    return f"endpoint {e_id}: revision {rev['number']} {rev['state']} at {rev['weight']}%" + (
        f" ({rev['reason']})" if rev.get("reason") else "")


@endpoint.command("rollout")
@click.argument("endpoint_ref", metavar="ENDPOINT")
@click.option("--image", help="The new revision's image.")
@click.option("--command", "command_line", help="Its command, split as a shell splits words (never run by one).")
@click.option("--args", "args_line", help="Its arguments, split the same way.")
@click.option("--env", "env_pairs", multiple=True, metavar="KEY=VALUE",
              help="Its env, repeated; replaces the whole env (names and values).")
@click.option("--strategy", type=click.Choice(["replace", "canary"]), default="replace", show_default=True,
              help="replace: the replicas roll to it; canary: beside the current revision at --weight.")
@click.option("--weight", type=int, help="canary: the percent of requests it serves (1-50).")
@click.option("--auto-promote-windows", type=int, help="canary: promote it after this many good 30 s windows.")
@api_call
def endpoint_rollout(client: Client, endpoint_ref: str, image: str | None, command_line: str | None,
                     args_line: str | None, env_pairs: tuple[str, ...], strategy: str, weight: int | None,
                     auto_promote_windows: int | None) -> None:
    """Roll out a new revision of an endpoint: a new image, command, args or env."""
    body: dict = {"strategy": strategy}
    if image is not None:
        body["image"] = image
    for name, line in (("command", command_line), ("args", args_line)):
        if line is not None:
            try:
                body[name] = shlex.split(line)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint=f"--{name}") from None
    if env_pairs:
        env = {}
        for pair in env_pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--env")
            env[key] = value
        body["env"] = env
    if weight is not None:
        body["weight"] = weight
    if auto_promote_windows is not None:
        body["auto_promote_windows"] = auto_promote_windows
    e_id = client.workload_id("endpoints/", endpoint_ref, "endpoint")
    try:
        rev = client.rollout(e_id, body)
    except BadRequest as exc:  # the rollout as asked was wrong: a usage error (exit 2), with the fields' words
        raise Failure(str(exc), EXIT_USAGE) from exc
    click.echo(_revision_line(e_id, rev))


@endpoint.command("promote")
@click.argument("endpoint_ref", metavar="ENDPOINT")
@api_call
def endpoint_promote(client: Client, endpoint_ref: str) -> None:
    """Promote the endpoint's canary: every replica rolls to its spec."""
    e_id = client.workload_id("endpoints/", endpoint_ref, "endpoint")
    click.echo(_revision_line(e_id, client.promote(e_id)))


@endpoint.command("rollback")
@click.argument("endpoint_ref", metavar="ENDPOINT")
@api_call
def endpoint_rollback(client: Client, endpoint_ref: str) -> None:
    """Roll the endpoint's canary back: it takes no more requests and its replicas stop."""
    e_id = client.workload_id("endpoints/", endpoint_ref, "endpoint")
    click.echo(_revision_line(e_id, client.rollback(e_id)))


@endpoint.command("revisions")
@click.argument("endpoint_ref", metavar="ENDPOINT")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def endpoint_revisions(client: Client, endpoint_ref: str, output: str) -> None:
    """An endpoint's revisions: state, weight, traffic over the last 5 minutes, verdict."""
    items = list(client.revisions(client.workload_id("endpoints/", endpoint_ref, "endpoint")))
    if output != "table":
        dump(items, output)
        return

    def verdict(rev: dict) -> str:
        v = rev.get("verdict") or {}
        if v.get("windows") and not v.get("promoted_after_windows"):
            return f"rule: {v['windows'][0]['why']}"
        if v.get("promoted_after_windows"):
            return f"promoted after {v['promoted_after_windows']} good windows"
        return f"by {v['by']}" if v.get("by") else (rev.get("reason") or "")

    table(["REV", "STATE", "WEIGHT", "REQUESTS", "5XX", "P95", "SPEC", "VERDICT"],
          [[r["number"], r["state"], f"{r['weight']}%", r["traffic"]["requests"], _percent(r["traffic"]["error_rate"]),
            "—" if r["traffic"]["p95_ms"] is None else f"{r['traffic']['p95_ms']:.0f} ms", r["summary"], verdict(r)]
           for r in items])
