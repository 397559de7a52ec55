"""The demo's two shared flavors for the tests that need them: ``quotas.demo``'s once it defines them
(issue 37a), until then made from the issue 37 contract's values (/work/wt/CONTRACT37.md "Demo");
created when missing, kept as they are when present."""

from __future__ import annotations

from decimal import Decimal

from quotas import demo
from quotas.models import GpuFlavor

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "value": "", "effect": "NoSchedule"}

SHARED_DEMO_FLAVORS = (
    {"name": "t4-ts4", "resource_name": "nvidia.com/gpu", "gpu_model": "Tesla-T4", "gpu_memory_gb": 16,
     "sharing": "time-slicing", "replicas": 4, "training": False, "one_team_per_gpu": False,
     "price_per_hour": Decimal("0.10"), "spot_price_per_hour": Decimal("0.04"), "max_units_per_node": 8,
     "node_labels": {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.sharing-strategy": "time-slicing",
                     "nvidia.com/gpu.replicas": "4"}},
    {"name": "a10g-mps2", "resource_name": "nvidia.com/gpu", "gpu_model": "NVIDIA-A10G", "gpu_memory_gb": 24,
     "sharing": "mps", "replicas": 2, "training": True, "one_team_per_gpu": True,
     "price_per_hour": Decimal("0.50"), "spot_price_per_hour": Decimal("0.20"), "max_units_per_node": 4,
     "node_labels": {"nvidia.com/gpu.product": "NVIDIA-A10G-SHARED", "nvidia.com/gpu.sharing-strategy": "mps",
                     "nvidia.com/gpu.replicas": "2"}},
)


def shared_demo_flavors() -> list[GpuFlavor]:
    names = [d["name"] for d in SHARED_DEMO_FLAVORS]
    if {d["name"] for d in demo.flavor_definitions()} >= set(names):
        return demo.seed_flavors(names)
    return [GpuFlavor.objects.get_or_create(name=d["name"], defaults={**d, "tolerations": [TOLERATION]})[0]
            for d in SHARED_DEMO_FLAVORS]
