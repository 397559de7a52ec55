"""Kubernetes resource quantities ("500m", "16Gi", "2") as integers the scheduler can add.

CPU is counted in millicores, everything else in base units (bytes, devices), rounded up
the way the API server rounds a quantity to its canonical integer form.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")
_FACTORS = {
    None: Decimal(1),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}


def parse_quantity(value: object) -> Decimal:
    """The numeric value of a quantity; raises ValueError when it is not one."""
    if isinstance(value, bool):
        raise ValueError(f"quantities must match the regular expression: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:
        raise ValueError(f"invalid quantity {value!r}") from exc
    suffix = match.group(2)
    if suffix and suffix[0] in "eE" and len(suffix) > 1:
        return number * (Decimal(10) ** int(suffix[1:]))
    return number * _FACTORS[suffix]


def to_units(resource: str, value: object) -> int:
    """``value`` of ``resource`` as an integer: millicores for cpu, base units otherwise."""
    number = parse_quantity(value)
    if resource == "cpu":
        number *= 1000
    return math.ceil(number)


def format_units(resource: str, units: int) -> str:
    """Inverse of :func:`to_units` for messages: "4", "1500m", "16Gi"."""
    if resource == "cpu":
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if resource in ("memory", "ephemeral-storage"):
        for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units and units % factor == 0:
                return f"{units // factor}{suffix}"
    return str(units)
