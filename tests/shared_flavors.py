"""The demo's time-sliced and MPS flavors (``quotas.demo``) for the tests that need them (docs/flavors.md).

``t4-ts4``: a Tesla T4 (16 GB) time-sliced ×4, 0.10/unit-h, no training; ``a10g-mps2``: an A10G (24 GB)
shared by MPS ×2, 0.50/unit-h, training allowed, one team per GPU. A flavor of that name that exists
already is brought to the demo's values (or a test's ``changes``) rather than doubled.
"""

from __future__ import annotations

from fleet.models import GpuFlavor
from quotas import demo

SHARED_NAMES = ("t4-ts4", "a10g-mps2")


def make_shared_flavors(**changes: dict) -> dict[str, GpuFlavor]:
    """The two shared flavors (``changes`` per name override fields), saved through the model (its fraction rule)."""
    made = {}
    for definition in demo.flavor_definitions():
        name = definition["name"]
        if name not in SHARED_NAMES:
            continue
        flavor = GpuFlavor.objects.filter(name=name).first() or GpuFlavor(name=name)
        for key, value in {**definition, "active": True, **changes.get(name, {})}.items():
            setattr(flavor, key, value)
        flavor.full_clean()
        flavor.save()
        made[name] = flavor
    return made


def shared_demo_flavors() -> list[GpuFlavor]:
    """The two shared flavors as the demo defines them."""
    return list(make_shared_flavors().values())
