"""Fixtures of the sandbox tests: a fresh backend on the suite's one-cluster inventory, and two
independent clusters from a two-cluster inventory."""

from __future__ import annotations

import pytest

from sandbox.backend import SandboxBackend

#: Two clusters whose H100 nodes share a name (clusters are independent, so nodes may), and a
#: spot L4 node only in west.
TWO_CLUSTERS = """
clusters:
  - name: east
    region: on-prem-east
    labels: {provider: on-prem}
    prices: {h100-80gb: "7.20"}
    pools:
      - {prefix: gpu-h100, count: 1, cpu: "192", memory: 2048Gi,
         gpu: {product: NVIDIA-H100-80GB-HBM3, count: 8}}
  - name: west
    region: us-west1
    labels: {provider: cloud}
    prices: {h100-80gb: "6.40"}
    spot_prices: {l4: "0.28"}
    pools:
      - {prefix: gpu-h100, count: 1, cpu: "192", memory: 2048Gi,
         gpu: {product: NVIDIA-H100-80GB-HBM3, count: 8}}
      - prefix: gpu-l4-spot
        count: 1
        gpu: {product: NVIDIA-L4, count: 1}
        labels: {slipway.dev/capacity-type: spot}
        taints: [{key: slipway.dev/capacity-type, value: spot, effect: NoSchedule}]
"""


@pytest.fixture
def backend(db) -> SandboxBackend:
    return SandboxBackend()


@pytest.fixture
def two_clusters_inventory(settings, tmp_path) -> str:
    """Point the settings at :data:`TWO_CLUSTERS`; its path."""
    path = tmp_path / "two-clusters.yaml"
    path.write_text(TWO_CLUSTERS)
    settings.SLIPWAY_SANDBOX_INVENTORY = str(path)
    return str(path)


@pytest.fixture
def east_west(db, two_clusters_inventory) -> tuple[SandboxBackend, SandboxBackend]:
    """The backends of the two clusters of :data:`TWO_CLUSTERS`."""
    return SandboxBackend("east"), SandboxBackend("west")
