"""What ``slipway`` prints: Rich tables without trailing blanks, ``label: value`` fields, JSON or
YAML dumps of the API's answers, and money and prices as the API sends them.
"""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal
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


def grid(columns: list[str], rows: list[list[Any]]) -> Table:
    """A table as :func:`table` prints it, as a Rich renderable (a live display redraws it)."""
    found = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        found.add_column(column)
    for row in rows:
        found.add_row(*["" if cell is None else str(cell) for cell in row])
    return found


def table(columns: list[str], rows: list[list[Any]]) -> None:
    out = console()
    with out.capture() as captured:
        out.print(grid(columns, rows))
    # Rich pads the last column to its width: no trailing blanks in a terminal or a pipe.
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def fields(pairs: list[tuple[str, Any]]) -> None:
    width = max(len(label) for label, _ in pairs)
    for label, value in pairs:
        if value not in (None, "", [], {}):
            click.echo(f"{label + ':':<{width + 1}} {value}")


_CENT = Decimal("0.01")
_TEN_THOUSANDTH = Decimal("0.0001")


def _decimal(amount: Any) -> Decimal | None:
    return None if amount is None or amount == "" else Decimal(str(amount))


def money(amount: Any, currency: str = "") -> str | None:
    """``98.40 USD``: an amount as the API sends it (a decimal string) to the cent, rounded half up, with
    the currency the API answered (None for no amount, which :func:`fields` leaves out)."""
    value = _decimal(amount)
    if value is None:
        return None
    return f"{value.quantize(_CENT, ROUND_HALF_UP):,} {currency}".strip()


def rate(amount: Any, currency: str = "") -> str | None:
    """``3.60 USD``, ``0.5857 USD``: money per hour as every page writes it (the portal's
    ``core.formatting.format_rate``: cents, or four decimals where cents would lose some); the caller
    adds "/h". A test compares the two (tests/cli/test_prices.py)."""
    value = _decimal(amount)
    if value is None:
        return None
    places = _CENT if value == value.quantize(_CENT, ROUND_HALF_UP) else _TEN_THOUSANDTH
    return f"{value.quantize(places, ROUND_HALF_UP):,} {currency}".strip()


def per_hour(amount: Any, currency: str = "") -> str | None:
    """``7.20 USD/h`` (:func:`rate`); None for no amount."""
    text = rate(amount, currency)
    return None if text is None else f"{text}/h"


def unit_price(answer: dict) -> str | None:
    """"3.60 USD/h a unit on east": a workload's or a dry run's ``price_per_hour`` (the API's one price:
    once billing began its charged rate, placed its cluster's, before the quote) and its ``cluster``."""
    if answer.get("price_per_hour") is None:
        return None
    where = f" on {answer['cluster']}" if answer.get("cluster") else ""
    return f"{per_hour(answer['price_per_hour'], answer.get('currency', ''))} a unit{where}"


def flavor_price(flavor: dict) -> str:
    """"3.60 USD/h on east (3.60–4.60)": a flavor's price now, where, and its range across clusters — the
    words of the portal's flavor page (``billing.pricing.Quote.words``) from ``GET /flavors/``."""
    currency = flavor.get("currency", "")
    low, high = (flavor.get("price_range") or {}).get("min"), (flavor.get("price_range") or {}).get("max")
    varies = low is not None and high is not None and Decimal(str(low)) != Decimal(str(high))
    if not flavor.get("cluster"):
        if varies:
            return f"{rate(low)}\u2013{per_hour(high, currency)}, by the cluster it starts on"
        return per_hour(flavor["price_per_hour"], currency) or ""
    text = f"{per_hour(flavor['price_per_hour'], currency)} on {flavor['cluster']}"
    return f"{text} ({rate(low)}\u2013{rate(high)})" if varies else text
