"""Form pieces every kind's portal form shares: the flavor picker and text → API-shape conversions.

People type text, the API takes JSON: these turn a textarea into an argv list (one item per
line) or ``KEY=VALUE`` lines into an env object. Validation itself stays in each kind's
service (:mod:`workloads.validation`), so the portal and the API cannot disagree.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from portal.formatting import format_amount, format_money
from quotas.models import GpuFlavor


class FlavorSelect(forms.Select):
    """A select whose options can be disabled (flavors the team has no quota for)."""

    def __init__(self, *args: Any, disabled_values: set[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.disabled_values = disabled_values or set()

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        if str(value) in self.disabled_values:
            option["attrs"]["disabled"] = True
        return option


def flavor_label(flavor: GpuFlavor, row: dict | None, currency: str) -> str:
    """"a100-80gb — 3.20 USD/h (spot 1.10) · 6 of 8 free" (or "no quota")."""
    price = (f"{format_money(flavor.price_per_hour, currency, precise=True)}/h"
             f" (spot {format_amount(flavor.spot_price_per_hour, precise=True)})")
    if row is None or row["limit"] == 0:
        return f"{flavor.name} — {price} · no quota for your team"
    return f"{flavor.name} — {price} · {row['free']} of {row['limit']} free"


def lines(text: str) -> list[str]:
    """Non-blank lines, each kept verbatim (an argument may contain spaces) minus the newline."""
    return [line.rstrip("\r") for line in text.split("\n") if line.strip()]


def parse_env(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines into a dict; raises ValidationError naming the bad line."""
    env: dict[str, str] = {}
    for number, line in enumerate(lines(text), start=1):
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValidationError(f"Line {number}: expected KEY=VALUE, got {line.strip()!r}.")
        if key in env:
            raise ValidationError(f"Line {number}: {key} is set twice.")
        env[key] = value
    return env
