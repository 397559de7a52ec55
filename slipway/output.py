"""What ``slipway`` prints: Rich tables without trailing blanks, ``label: value`` fields, JSON or
YAML dumps of the API's answers, and money and prices as the API sends them.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import click
import yaml
from rich.console import Console
from rich.table import Table


def console() -> Console:
    """Rich output on today's stdout; wide when it is not a terminal (a pipe should not fold tables)."""
    out = Console(highlight=False, soft_wrap=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=200, soft_wrap=False)
    return out


def dump(data: Any, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=False))
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)


def table(columns: list[str], rows: list[list[Any]]) -> None:
    grid = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        grid.add_column(column)
    for row in rows:
        grid.add_row(*["" if cell is None else str(cell) for cell in row])
    out = console()
    with out.capture() as captured:
        out.print(grid)
    # Rich pads the last column to its width: no trailing blanks in a terminal or a pipe.
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def fields(pairs: list[tuple[str, Any]]) -> None:
    width = max(len(label) for label, _ in pairs)
    for label, value in pairs:
        if value not in (None, "", [], {}):
            click.echo(f"{label + ':':<{width + 1}} {value}")


def money(amount: Any, currency: str = "") -> str:
    """An amount as the API sends it (a decimal string, to the cent) with its currency."""
    return f"{Decimal(str(amount)):,.2f} {currency}".strip()


def unit_price(answer: dict) -> str | None:
    """"3.6000/h a unit on east": a workload's or a dry run's ``price_per_hour`` and its ``cluster``
    (the API's one price: placed, what it is charged; before, on the cluster it would go to now)."""
    if answer.get("price_per_hour") is None:
        return None
    where = f" on {answer['cluster']}" if answer.get("cluster") else ""
    return f"{answer['price_per_hour']}/h a unit{where}"
