"""The YAML inventory: the shipped default, custom files, and MIG geometry checks."""

from __future__ import annotations

import pytest

from sandbox.inventory import InventoryError, nodes, parse_inventory


def test_it_ships_a_gpu_operator_shaped_default_cluster(settings):
    by_name = {node.name: node for node in nodes()}
    assert sorted(by_name) == ["gpu-a100-0", "gpu-a100-mig-0", "gpu-h100-0", "gpu-h100-1", "gpu-l4-0", "gpu-l4-1",
                               "gpu-l4-spot-0", "gpu-l4-spot-1"]
    mig = by_name["gpu-a100-mig-0"]
    assert mig.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert mig.labels["nvidia.com/mig.config"] == "slipway-mixed"
    assert mig.labels["nvidia.com/gpu.count"] == "8"
    assert mig.allocatable["nvidia.com/gpu"] == 4  # the GPUs its layout leaves out of MIG mode
    assert (mig.allocatable["nvidia.com/mig-1g.10gb"], mig.allocatable["nvidia.com/mig-2g.20gb"],
            mig.allocatable["nvidia.com/mig-3g.40gb"]) == (10, 2, 4)
    h100 = by_name["gpu-h100-0"]
    assert h100.labels["nvidia.com/mig.config"] == "all-disabled"
    assert ("nvidia.com/gpu", "", "NoSchedule") in h100.taints
    assert h100.allocatable["cpu"] == 192_000  # millicores
    assert ("slipway.dev/capacity-type", "spot", "NoSchedule") in by_name["gpu-l4-spot-0"].taints


def test_it_reads_the_inventory_named_in_settings(settings, tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("pools:\n  - prefix: t4\n    count: 3\n    cpu: '8'\n    memory: 32Gi\n"
                    "    gpu: {product: Tesla-T4, count: 1}\n")
    settings.SLIPWAY_SANDBOX_INVENTORY = str(path)
    assert [node.name for node in nodes()] == ["t4-0", "t4-1", "t4-2"]
    assert nodes()[0].labels["nvidia.com/gpu.product"] == "Tesla-T4"


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ([{"gpus": 1, "slices": {"3g.40gb": 3}}], "needs 9/7 compute"),
        ([{"gpus": 1, "slices": {"5g.50gb": 1}}], "unknown A100-80GB MIG profile"),
        ([{"gpus": 1, "slices": {"1g.10gb": 7}}], "covers 1 GPUs, the node has 2"),
        ([{"gpus": 1, "mig_enabled": False}], "covers 1 GPUs, the node has 2"),
    ],
)
def test_it_rejects_invalid_mig_geometries(layout, message):
    data = {"pools": [{"prefix": "x", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2},
                       "mig": {"config": "bad", "layout": layout}}]}
    with pytest.raises(InventoryError, match=message):
        parse_inventory(data)


def test_it_keeps_gpus_left_out_of_mig_whole():
    data = {"pools": [{"prefix": "x", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 3},
                       "mig": {"config": "part", "layout": [{"gpus": 2, "mig_enabled": False},
                                                            {"gpus": 1, "slices": {"3g.40gb": 2}}]}}]}
    (node,) = parse_inventory(data)
    assert node.allocatable["nvidia.com/gpu"] == 2
    assert node.allocatable["nvidia.com/mig-3g.40gb"] == 2
    assert node.gpu_resources == ["nvidia.com/gpu", "nvidia.com/mig-3g.40gb"]
