"""Time-sliced and MPS flavors for tests, as the issue 37 demo defines them (docs/flavors.md).

``t4-ts4``: a Tesla T4 (16 GB) time-sliced ×4, 0.10/unit-h, no training; ``a10g-mps2``: an A10G (24 GB)
shared by MPS ×2, 0.50/unit-h, training allowed, one team per GPU. A flavor of that name that exists already (the
demo's) is brought to these values rather than doubled.
"""

from __future__ import annotations

from decimal import Decimal

from quotas.constants import Sharing
from quotas.models import GpuFlavor

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "value": "", "effect": "NoSchedule"}

SHARED = {
    "t4-ts4": {"resource_name": "nvidia.com/gpu", "gpu_model": "Tesla-T4", "gpu_memory_gb": 16,
               "sharing": Sharing.TIME_SLICING, "replicas": 4, "training": False, "one_team_per_gpu": False,
               "max_units_per_node": 8, "price_per_hour": Decimal("0.10"), "spot_price_per_hour": Decimal("0.04")},
    "a10g-mps2": {"resource_name": "nvidia.com/gpu", "gpu_model": "NVIDIA-A10G", "gpu_memory_gb": 24,
                  "sharing": Sharing.MPS, "replicas": 2, "training": True, "one_team_per_gpu": True,
                  "max_units_per_node": 4, "price_per_hour": Decimal("0.50"), "spot_price_per_hour": Decimal("0.20")},
}


def make_shared_flavors(**changes: dict) -> dict[str, GpuFlavor]:
    """The two shared flavors (``changes`` per name override fields), saved through the model (its fraction rule)."""
    made = {}
    for name, fields in SHARED.items():
        values = {**fields, "tolerations": [TOLERATION], "active": True, **changes.get(name, {})}
        flavor = GpuFlavor.objects.filter(name=name).first() or GpuFlavor(name=name)
        for key, value in values.items():
            setattr(flavor, key, value)
        flavor.full_clean()
        flavor.save()
        made[name] = flavor
    return made
