"""``slipway clusters``: the clusters work is placed on, what each offers and its elastic pools (platform staff).

From ``GET /api/v1/clusters/`` (docs/api.md "Clusters"): a line per cluster (its state, region, the training API
it is taken to have and the frameworks its distributed runs may use (docs/training.md), and per flavor the units
free of what it can hold), then a line per elastic pool (docs/pools.md): its mode, min and max nodes,
nodes ready and provisioning now, the idle minutes before a node goes, and the provisioning time start
estimates take a node to need. ``-o json`` / ``-o yaml`` print the API's answer as it is. To anyone but
platform staff clusters do not exist (the API's 404): the command says so and exits 4.
"""

from __future__ import annotations

import click

from slipway.client import Client, NotFound
from slipway.config import api_call
from slipway.failures import EXIT_NOT_FOUND, Failure
from slipway.output import dump, table


def offered(cluster: dict) -> str:
    """"a100-80gb 26/32 free, l4 2/2 free": per flavor, the units free of what the cluster can hold."""
    return ", ".join(f"{f['flavor']} {f['free']}/{f['capacity']} free" for f in cluster.get("flavors") or []) or "–"


def frameworks(cluster: dict) -> str:
    """"jax,pytorch": the frameworks a distributed run may use there ("–" without a training API)."""
    return ",".join(cluster.get("frameworks") or []) or "–"


def minutes(seconds: int | None) -> str:
    return "?" if seconds is None else f"{max(1, round(seconds / 60))} min"


def provisioning(pool: dict) -> str:
    """"about 4 min (p90 10 min)", with "default" until the pool has observed three of its own."""
    times = pool.get("provisioning_seconds") or {}
    words = f"about {minutes(times.get('median'))} (p90 {minutes(times.get('tail'))})"
    return words if (times.get("observed") or 0) >= 3 else f"{words}, default"


@click.command()
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def clusters(client: Client, output: str) -> None:
    """The clusters (platform staff): state, region, training API, free units per flavor, and each elastic pool."""
    try:
        rows = client.clusters()
    except NotFound as exc:
        raise Failure("Only platform staff see the clusters.", EXIT_NOT_FOUND) from exc
    if output != "table":
        dump(rows, output)
        return
    table(["CLUSTER", "STATE", "REGION", "TRAINING", "FRAMEWORKS", "FLAVORS"],
          [[c["name"], c["state"], c.get("region") or "–", c.get("training_api") or "none", frameworks(c), offered(c)]
           for c in rows])
    pools = [(c["name"], p) for c in rows for p in c.get("pools") or []]
    if not pools:
        click.echo("\nNo elastic pools: every cluster is a fixed inventory.")
        return
    click.echo()
    table(["CLUSTER", "POOL", "MODE", "MIN", "MAX", "READY", "PROVISIONING", "IDLE-AFTER", "NODE-PROVISIONING"],
          [[name, p["flavor"], p["mode"], p["min"], max_nodes(p), p["nodes_ready"], p["nodes_provisioning"],
            f"{p['unneeded_minutes']} min", provisioning(p)] for name, p in pools])


def max_nodes(pool: dict) -> str:
    """The pool's max, and the autoscaler's own GPU limit where one was found (it may allow fewer nodes)."""
    limit = pool.get("autoscaler_limit")
    return str(pool["max"]) if limit is None else f"{pool['max']} (limit {limit} units)"
