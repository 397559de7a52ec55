"""``slipway flavors``: the GPU flavors you can ask for, with how each unit shares its GPU and its price.

The same table as the portal's "Which flavor?" page, from ``GET /api/v1/flavors/``: sharing (whole,
MIG, time-sliced ×N, MPS ×N), isolation, the memory one unit may use (shared with the other pods of a
time-sliced GPU, or its own), whether runs may use it, and the price of a unit-hour. What each way of
sharing suits is the page's (its address is printed under the table): the advice lives in one place.
"""

from __future__ import annotations

from decimal import Decimal

import click

from slipway.client import Client
from slipway.config import api_call
from slipway.output import dump, flavor_price, table

SHARING_WORDS = {"none": "whole GPU", "mig": "MIG slice", "time-slicing": "time-sliced", "mps": "MPS"}

def sharing(flavor: dict) -> str:
    words = SHARING_WORDS.get(flavor.get("sharing") or "none", flavor.get("sharing") or "")
    return f"{words} \u00d7{flavor['replicas']}" if (flavor.get("replicas") or 1) > 1 else words


def memory(flavor: dict) -> str:
    amount = Decimal(str(flavor.get("memory_per_unit_gb") or flavor["gpu_memory_gb"])).normalize()
    return f"{amount:f} GB {'shared' if flavor.get('memory_shared') else 'own'}"


@click.command()
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def flavors(client: Client, output: str) -> None:
    """The GPU flavors you can ask for: sharing, isolation, memory per unit, training, price per unit-hour."""
    rows = client.flavors()
    if output != "table":
        dump(rows, output)
        return
    table(["FLAVOR", "GPU", "SHARING", "ISOLATION", "MEMORY/UNIT", "TRAINING", "PRICE/UNIT"],
          [[f["name"], f["gpu_model"], sharing(f), f.get("isolation", ""), memory(f),
            "yes" if f.get("training", True) else "no", flavor_price(f)]
           for f in rows])
    click.echo(f"Which flavor for which work: {client.url}/help/flavors/")
