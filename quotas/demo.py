"""Demo data: the standard GPU flavors with prices, and team quotas (used by ``manage.py seed_demo``).

Node labels match the GPU Operator labels of the sandbox inventory (``sandbox/inventory.yaml``):
``nvidia.com/gpu.product`` names the GPU model, and every GPU node carries the
``nvidia.com/gpu:NoSchedule`` taint, so each flavor tolerates it. MIG flavors use the
"mixed" strategy's per-profile resources (``nvidia.com/mig-1g.10gb`` …): the resource name
alone restricts them to MIG nodes, and the product label keeps them on A100s. Their prices
are the parent A100's price times the slice's share of the GPU (1g = 1/7, 2g = 2/7, 3g = 3/7).

Two flavors share GPUs (docs/admin.md "Shared GPUs"): ``t4-ts4`` cuts each Tesla T4 into 4 time-sliced
units and ``a10g-mps2`` each A10G into 2 MPS units. A unit is 1/replicas of the GPU and priced so (the
GPU's price / replicas); they carry no product label of their own, since their pods select the labels GPU
Feature Discovery puts on shared nodes (``Tesla-T4-SHARED``, replicas, sharing strategy), which
``deploy/device-plugin/`` configures. Their largest node is the sandbox's shared pool node of cluster east
(2 GPUs: 8 T4 units, 4 A10G units).

Largest node per flavor: the biggest A100 and H100 nodes have 8 GPUs, the L4 nodes 1; the sandbox's
MIG node (cluster east) exposes 10x 1g.10gb, 2x 2g.20gb and 4x 3g.40gb. The sandbox's clusters
price some flavors their own way (``prices`` in ``sandbox/inventory.yaml``), near these list prices.
"""

from __future__ import annotations

from collections.abc import Collection
from decimal import ROUND_HALF_UP, Decimal

from billing.ledger import month_start
from billing.models import BudgetMonth, TeamBudget
from fleet.constants import Sharing
from fleet.models import GpuFlavor
from quotas.models import TeamQuota

PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_TAINT_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "value": "", "effect": "NoSchedule"}

A100 = "NVIDIA-A100-SXM4-80GB"
A100_PRICE, A100_SPOT_PRICE = Decimal("4.10"), Decimal("1.64")

#: name, resource, product, memory GB, largest node, on-demand and spot price per hour.
FULL_GPUS = [
    ("a100-80gb", "nvidia.com/gpu", A100, 80, 8, A100_PRICE, A100_SPOT_PRICE),
    ("h100-80gb", "nvidia.com/gpu", "NVIDIA-H100-80GB-HBM3", 80, 8, Decimal("6.88"), Decimal("2.75")),
    ("l4", "nvidia.com/gpu", "NVIDIA-L4", 24, 1, Decimal("0.80"), Decimal("0.32")),
]
#: MIG profile, sevenths of the GPU, memory GB, slices on the largest node.
MIG_PROFILES = [
    ("1g.10gb", 1, 10, 10),
    ("2g.20gb", 2, 20, 2),
    ("3g.40gb", 3, 40, 4),
]


#: The shared flavors: name, sharing, replicas, product, memory GB of the GPU, GPUs on the largest node,
#: the whole GPU's on-demand and spot price per hour, and whether training may use it.
SHARED_GPUS = [
    ("t4-ts4", Sharing.TIME_SLICING, 4, "Tesla-T4", 16, 2, Decimal("0.40"), Decimal("0.16"), False),
    ("a10g-mps2", Sharing.MPS, 2, "NVIDIA-A10G", 24, 1, Decimal("1.00"), Decimal("0.40"), True),
]


def _q(value: Decimal, places: str) -> Decimal:
    return value.quantize(Decimal(places), ROUND_HALF_UP)


def flavor_definitions() -> list[dict]:
    """The standard flavors as keyword arguments of :class:`GpuFlavor`."""
    defs = [
        {"name": name, "resource_name": resource, "gpu_model": product, "mig_profile": "", "gpu_memory_gb": mem,
         "gpu_fraction": Decimal(1), "node_labels": {PRODUCT_LABEL: product}, "tolerations": [GPU_TAINT_TOLERATION],
         "max_units_per_node": largest, "price_per_hour": price, "spot_price_per_hour": spot,
         "description": f"{product}, one full GPU"}
        for name, resource, product, mem, largest, price, spot in FULL_GPUS
    ]
    for profile, sevenths, mem, largest in MIG_PROFILES:
        share = Decimal(sevenths) / Decimal(7)
        defs.append({
            "name": f"a100-{profile}", "resource_name": f"nvidia.com/mig-{profile}", "gpu_model": A100,
            "mig_profile": profile, "sharing": Sharing.MIG, "gpu_memory_gb": mem, "gpu_fraction": _q(share, "0.000001"),
            "node_labels": {PRODUCT_LABEL: A100}, "tolerations": [GPU_TAINT_TOLERATION],
            "max_units_per_node": largest, "price_per_hour": _q(A100_PRICE * share, "0.0001"),
            "spot_price_per_hour": _q(A100_SPOT_PRICE * share, "0.0001"),
            "description": f"A100-80GB MIG slice {profile} ({sevenths}/7 of a GPU)",
        })
    for name, sharing, replicas, product, mem, gpus, price, spot, training in SHARED_GPUS:
        # The description says what the sharing does not isolate (docs/admin.md "Shared GPUs").
        if sharing == Sharing.TIME_SLICING:
            how, warning = "time-sliced", (f"No memory isolation: all pods share its {mem} GB. Not for training "
                                           "that needs the whole GPU memory.")
        else:
            how, warning = "MPS", f"{mem // replicas} GB per pod; faults are not isolated: one team per GPU."
        defs.append({
            "name": name, "resource_name": "nvidia.com/gpu", "gpu_model": product, "mig_profile": "",
            "sharing": sharing, "replicas": replicas, "training": training,
            "one_team_per_gpu": sharing == Sharing.MPS, "gpu_memory_gb": mem,
            "gpu_fraction": _q(Decimal(1) / replicas, "0.000001"), "node_labels": {},
            "tolerations": [GPU_TAINT_TOLERATION], "max_units_per_node": gpus * replicas,
            "price_per_hour": _q(price / replicas, "0.0001"), "spot_price_per_hour": _q(spot / replicas, "0.0001"),
            "description": f"{product} {how} x{replicas}: 1/{replicas} of a GPU at 1/{replicas} of its price "
                           f"({price}/h / {replicas}). {warning}",
        })
    return defs


def seed_flavors(names: Collection[str] | None = None) -> list[GpuFlavor]:
    """The standard flavors (or those ``names``): created when missing, kept as they are when present.

    An existing flavor is never updated: its prices and placement are the admin's to change.
    """
    flavors = []
    for definition in flavor_definitions():
        name = definition.pop("name")
        if names is None or name in names:
            flavors.append(GpuFlavor.objects.get_or_create(name=name, defaults={**definition, "active": True})[0])
    return flavors


def seed_team_quotas(team, limits: dict[str, int], monthly_budget: Decimal | None = None) -> list[TeamQuota]:
    """Give ``team`` the quota ``limits`` (``{flavor name: units}``) and optionally a monthly budget (idempotent)."""
    flavors = {f.name: f for f in GpuFlavor.objects.filter(name__in=limits)}
    unknown = set(limits) - set(flavors)
    if unknown:
        raise ValueError(f"unknown flavors: {', '.join(sorted(unknown))} (run seed_flavors first)")
    quotas = [TeamQuota.objects.update_or_create(team=team, flavor=flavors[name], defaults={"limit": limit})[0]
              for name, limit in limits.items()]
    if monthly_budget is not None:
        budget, _ = TeamBudget.objects.update_or_create(team=team, defaults={"monthly_limit": monthly_budget})
        BudgetMonth.objects.record(team, budget, month_start().date())
    return quotas
