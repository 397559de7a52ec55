"""The sandbox's nodes, read from the YAML inventory (``settings.SLIPWAY_SANDBOX_INVENTORY``).

Nodes are configuration, not state: every process reads the same file, so web, worker and
beat agree on the cluster's shape while pods and objects live in the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml
from django.conf import settings

from sandbox.quantity import to_units

#: Compute and memory slices of each A100-80GB MIG profile (a GPU has 7 and 8).
MIG_PROFILES: dict[str, tuple[int, int]] = {
    "1g.10gb": (1, 1),
    "1g.20gb": (1, 2),
    "2g.20gb": (2, 2),
    "3g.40gb": (3, 4),
    "4g.40gb": (4, 4),
    "7g.80gb": (7, 8),
}
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_TAINT = {"key": GPU_RESOURCE, "value": "", "effect": "NoSchedule"}
MAX_PODS = 110


@dataclass(frozen=True)
class Node:
    """One simulated node: labels, taints and allocatable resources (cpu in millicores)."""

    name: str
    labels: dict[str, str] = field(hash=False)
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect)
    allocatable: dict[str, int] = field(hash=False)

    @property
    def gpu_resources(self) -> list[str]:
        return sorted(r for r in self.allocatable if r.startswith("nvidia.com/"))


class InventoryError(ValueError):
    """The inventory file is malformed (raised at load, so a bad file fails loudly)."""


def _mig_allocatable(mig: dict, gpu_count: int) -> tuple[dict[str, int], int]:
    """The slices the layout cuts, per ``nvidia.com/mig-<profile>`` resource, and how many GPUs it leaves whole.

    A group with ``mig_enabled: false`` keeps its GPUs whole: under the mixed strategy the device
    plugin exposes them as ``nvidia.com/gpu`` beside the slices (mig-parted's ``mig-enabled``).
    """
    totals: dict[str, int] = {}
    covered = whole = 0
    for group in mig.get("layout", []):
        gpus = int(group["gpus"])
        covered += gpus
        if group.get("mig_enabled", True) is False:
            whole += gpus
            continue
        compute = memory = 0
        for profile, count in group["slices"].items():
            if profile not in MIG_PROFILES:
                raise InventoryError(f"unknown A100-80GB MIG profile {profile!r}")
            compute += MIG_PROFILES[profile][0] * int(count)
            memory += MIG_PROFILES[profile][1] * int(count)
            totals[f"nvidia.com/mig-{profile}"] = totals.get(f"nvidia.com/mig-{profile}", 0) + gpus * int(count)
        if compute > 7 or memory > 8:
            raise InventoryError(f"MIG geometry {group['slices']} needs {compute}/7 compute and {memory}/8 memory slices")
    if covered != gpu_count:
        raise InventoryError(f"MIG layout covers {covered} GPUs, the node has {gpu_count}")
    return totals, whole


def parse_inventory(data: dict) -> list[Node]:
    """Expand the inventory's pools into nodes."""
    nodes: list[Node] = []
    for pool in data.get("pools", []):
        gpu = pool.get("gpu") or {}
        gpu_count = int(gpu.get("count", 0))
        for index in range(int(pool.get("count", 1))):
            name = f"{pool['prefix']}-{index}"
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": str(pool.get("instance_type", "")),
            }
            allocatable = {
                "cpu": to_units("cpu", pool.get("cpu", "8")),
                "memory": to_units("memory", pool.get("memory", "32Gi")),
                "ephemeral-storage": to_units("ephemeral-storage", pool.get("ephemeral_storage", "1500Gi")),
                "pods": MAX_PODS,
            }
            taints: list[tuple[str, str, str]] = []
            if gpu_count:
                product = str(gpu["product"])
                labels.update({
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": product,
                    "nvidia.com/gpu.count": str(gpu_count),
                    "nvidia.com/gpu.memory": str(gpu.get("memory_mib", "")),
                    "nvidia.com/gpu.family": str(gpu.get("family", "")),
                    "nvidia.com/mig.capable": str(product.startswith(("NVIDIA-A100", "NVIDIA-H100"))).lower(),
                    "nvidia.com/mig.strategy": "mixed",
                })
                mig = pool.get("mig")
                if mig:
                    slices, whole = _mig_allocatable(mig, gpu_count)
                    allocatable.update(slices)
                    allocatable[GPU_RESOURCE] = whole  # mixed strategy: only GPUs left out of MIG are whole
                    labels["nvidia.com/mig.config"] = str(mig.get("config", "custom"))
                    labels["nvidia.com/mig.config.state"] = "success"
                    for resource, count in slices.items():
                        labels[f"{resource}.count"] = str(count)
                else:
                    allocatable[GPU_RESOURCE] = gpu_count
                    labels["nvidia.com/mig.config"] = "all-disabled"
                taints.append((DEFAULT_TAINT["key"], DEFAULT_TAINT["value"], DEFAULT_TAINT["effect"]))
            labels.update({str(k): str(v) for k, v in (pool.get("labels") or {}).items()})
            for taint in pool.get("taints") or []:
                taints.append((str(taint["key"]), str(taint.get("value", "")), str(taint.get("effect", "NoSchedule"))))
            nodes.append(Node(name=name, labels=labels, taints=tuple(taints), allocatable=allocatable))
    if not nodes:
        raise InventoryError("the inventory has no nodes")
    return nodes


@lru_cache(maxsize=4)
def _load(path: str) -> tuple[Node, ...]:
    with Path(path).open() as handle:
        return tuple(parse_inventory(yaml.safe_load(handle) or {}))


def nodes() -> tuple[Node, ...]:
    """The configured nodes (cached per path: the file is read once per process)."""
    return _load(str(settings.SLIPWAY_SANDBOX_INVENTORY))
