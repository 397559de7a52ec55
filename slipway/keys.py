"""``slipway endpoint keys``: API keys of an endpoint (``ENDPOINT``: its id or its name in your teams) or, with
``--team``, of a team (valid for every endpoint of the team): create (the key is printed once), list, revoke,
disable, enable, and usage per key in money (``--csv``)."""

from __future__ import annotations

import click

from slipway.client import Ambiguous, Client, NotFound, id_in
from slipway.config import api_call
from slipway.output import dump, money, table
from slipway.times import ahead


def _scope(client: Client, team: str | None, endpoint_ref: str | None) -> dict:
    """Where the keys are: ``{"team": slug}`` or ``{"endpoint_id": id}`` (exactly one of them is given)."""
    if bool(team) == bool(endpoint_ref):
        raise click.UsageError("give an ENDPOINT (its id or name) or --team SLUG, not both")
    return {"team": team} if team else {"endpoint_id": client.workload_id("endpoints/", endpoint_ref, "endpoint")}


def _split(refs: tuple[str, ...], team: str | None) -> tuple[str | None, str]:
    """``[ENDPOINT] KEY``: KEY alone with --team."""
    wanted = 1 if team else 2
    if len(refs) != wanted:
        raise click.UsageError("give ENDPOINT KEY, or --team SLUG KEY")
    return (None, refs[0]) if team else (refs[0], refs[1])


def _key_id(client: Client, scope: dict, ref: str) -> int:
    """KEY: its id, or its name or prefix among the scope's keys not revoked."""
    if (number := id_in(ref)) is not None:
        return number
    found = [k for k in client.keys(**scope) if k["revoked_at"] is None and ref in (k["name"], k["prefix"])]
    if not found:
        raise NotFound(f"no key named {ref} (or with that prefix) that is not revoked", status=404)
    if len(found) > 1:
        raise Ambiguous(f"{len(found)} keys match {ref}: {', '.join(str(k['id']) for k in found)}. Give the id.",
                        found)
    return found[0]["id"]


@click.group()
def keys() -> None:
    """API keys: create, list, revoke, disable, enable, usage.

    Clients send a key to the gateway as `Authorization: Bearer <key>`. An endpoint's key is valid for it;
    a team key (--team) for every endpoint of the team."""


@keys.command("create")
@click.argument("endpoint_ref", metavar="[ENDPOINT]", required=False)
@click.option("--team", help="Create a team key, valid for every endpoint of the team (instead of ENDPOINT).")
@click.option("--name", required=True, help="To tell it apart (unique among the team's keys not revoked).")
@click.option("--expires", help="When it stops working: 30d, 12h, 90m from now, or an ISO date-time.")
@click.option("--rpm", type=int, help="Requests per minute it may make (past it: 429).")
@click.option("--tpm", type=int, help="Tokens (input + output) per minute it may use.")
@api_call
def keys_create(client: Client, endpoint_ref: str | None, team: str | None, name: str, expires: str | None,
                rpm: int | None, tpm: int | None) -> None:
    """Create a key and print it — once: it is never shown again."""
    key = client.create_key(name, **_scope(client, team, endpoint_ref), expires_at=ahead(expires),
                            requests_per_minute=rpm, tokens_per_minute=tpm)
    scope = f"endpoint {key['endpoint_name']}" if key["endpoint"] else f"team {key['team']}"
    click.echo(f"key {key['id']} {key['name']} for {scope}: {key['prefix']}…")
    click.echo(key["key"])
    click.echo("Copy it now: it will not be shown again.", err=True)


@keys.command("list")
@click.argument("endpoint_ref", metavar="[ENDPOINT]", required=False)
@click.option("--team", help="Every key of the team (team keys and its endpoints').")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def keys_list(client: Client, endpoint_ref: str | None, team: str | None, output: str) -> None:
    """List keys (never their secret): an endpoint's own and its team's, or with --team all of the team's."""
    items = client.keys(**_scope(client, team, endpoint_ref))
    if output != "table":
        dump(items, output)
        return
    table(["ID", "NAME", "PREFIX", "SCOPE", "CREATED BY", "EXPIRES", "LAST USED", "STATE"],
          [[k["id"], k["name"], f"{k['prefix']}…", k["endpoint_name"] or "team", k["created_by"],
            k["expires_at"] or "never", k["last_used_at"] or "never", k["state"]] for k in items])


def _move(verb: str):
    @api_call
    def command(client: Client, refs: tuple[str, ...], team: str | None) -> None:
        endpoint_ref, key_ref = _split(refs, team)
        scope = _scope(client, team, endpoint_ref)
        key_id = _key_id(client, scope, key_ref)
        if verb == "revoke":
            client.revoke_key(key_id, **scope)
            click.echo(f"key {key_id}: revoked")
            return
        key = client.set_key_disabled(key_id, verb == "disable", **scope)
        click.echo(f"key {key['id']} {key['name']}: {key['state']}")

    command.__name__ = f"keys_{verb}"
    return command


for _verb, _help in (("revoke", "Revoke a key for good: the gateways refuse it within seconds."),
                     ("disable", "Disable a key (refused like a revoked one) until it is enabled again."),
                     ("enable", "Enable a disabled key again.")):
    keys.command(_verb, help=f"{_help}\n\nKEY: its id, name or prefix.")(
        click.argument("refs", nargs=-1, metavar="[ENDPOINT] KEY")(
            click.option("--team", help="A key of the team (instead of ENDPOINT).")(_move(_verb))))


@keys.command("usage")
@click.argument("endpoint_ref", metavar="[ENDPOINT]", required=False)
@click.option("--team", help="Every key of the team, over all its endpoints.")
@click.option("--since", help="From this date or date-time (default: the month's start).")
@click.option("--until", help="To this date (its whole day) or date-time (default: now).")
@click.option("--csv", "as_csv", is_flag=True, help="Per key, endpoint and hour, as CSV.")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def keys_usage(client: Client, endpoint_ref: str | None, team: str | None, since: str | None, until: str | None,
               as_csv: bool, output: str) -> None:
    """Usage per key in money: requests by status, errors, tokens and each key's share of the ledger cost."""
    report = client.key_usage(**_scope(client, team, endpoint_ref), since=since, until=until, csv=as_csv)
    if as_csv:
        click.echo(report, nl=False)
        return
    if output != "table":
        dump(report, output)
        return
    currency = report["currency"]
    table(["KEY", "NAME", "REQUESTS", "2XX", "4XX", "5XX", "ERRORS", "TOKENS IN", "TOKENS OUT", "COST"],
          [[t["key_id"] or "—", t["name"], t["requests"], t["requests_2xx"], t["requests_4xx"], t["requests_5xx"],
            t["errors"], t["input_tokens"], t["output_tokens"], money(t["cost"], currency)] for t in report["totals"]])
    click.echo(f"Ledger cost {money(report['ledger_cost'], currency)} from {report['since']} to {report['until']}: "
               "each hour split by tokens (by requests in an hour without tokens).")
