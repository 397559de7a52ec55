"""The YAML inventory: the shipped clusters, custom files in both formats, and the checks of a bad file."""

from __future__ import annotations

from decimal import Decimal

import pytest

from sandbox.inventory import InventoryError, SandboxCluster, UnknownCluster, clusters, nodes, parse_inventory


def test_it_ships_two_gpu_operator_shaped_clusters(settings):
    settings.SLIPWAY_SANDBOX_INVENTORY = str(settings.BASE_DIR / "sandbox" / "inventory.yaml")
    east, west = clusters()
    assert (east.name, east.region, east.labels["provider"]) == ("east", "on-prem-east", "on-prem")
    assert (west.name, west.region, west.labels["provider"]) == ("west", "us-west1", "cloud")
    # Both offer A100s and H100s, at different prices: placement by price has something to choose.
    for flavor in ("a100-80gb", "h100-80gb"):
        assert east.prices[flavor] != west.prices[flavor]
    assert east.prices["a100-80gb"] < west.prices["a100-80gb"] and west.prices["h100-80gb"] < east.prices["h100-80gb"]
    assert west.spot_prices["l4"] == Decimal("0.28") and east.spot_prices == {}
    assert [node.name for node in nodes()] == [node.name for node in nodes("east")]  # no name: the first cluster
    by_name = {node.name: node for node in nodes("east") + nodes("west")}
    assert sorted(by_name) == ["east-a100-0", "east-a100-mig-0", "east-a10g-0", "east-a10g-1", "east-h100-0", "east-l4-0",
                               "east-l4-1", "east-t4-0", "west-a100-0", "west-h100-0", "west-l4-spot-0",
                               "west-l4-spot-1"]
    mig = by_name["east-a100-mig-0"]
    assert mig.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert mig.labels["nvidia.com/mig.config"] == "slipway-mixed"
    assert mig.labels["nvidia.com/gpu.count"] == "4"
    assert mig.allocatable["nvidia.com/gpu"] == 0  # every GPU of its layout is in MIG mode
    assert (mig.allocatable["nvidia.com/mig-1g.10gb"], mig.allocatable["nvidia.com/mig-2g.20gb"],
            mig.allocatable["nvidia.com/mig-3g.40gb"]) == (10, 2, 4)
    h100 = by_name["west-h100-0"]
    assert h100.labels["nvidia.com/mig.config"] == "all-disabled"
    assert h100.labels["topology.kubernetes.io/region"] == "us-west1"  # the cluster's region labels its nodes
    assert ("nvidia.com/gpu", "", "NoSchedule") in h100.taints
    assert h100.allocatable["cpu"] == 208_000  # millicores
    assert ("slipway.dev/capacity-type", "spot", "NoSchedule") in by_name["west-l4-spot-0"].taints
    # east on Kubeflow Trainer v2, west on the v1 Training Operator: the demo's distributed runs show both.
    assert (east.training, west.training) == ("trainjob", "pytorchjob")


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
    with pytest.raises(InventoryError, match=f"cluster default: .*{message}"):
        parse_inventory(data)


def test_it_keeps_gpus_left_out_of_mig_whole():
    data = {"pools": [{"prefix": "x", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 3},
                       "mig": {"config": "part", "layout": [{"gpus": 2, "mig_enabled": False},
                                                            {"gpus": 1, "slices": {"3g.40gb": 2}}]}}]}
    (node,) = parse_inventory(data).nodes["default"]
    assert node.allocatable["nvidia.com/gpu"] == 2
    assert node.allocatable["nvidia.com/mig-3g.40gb"] == 2
    assert node.gpu_resources == ["nvidia.com/gpu", "nvidia.com/mig-3g.40gb"]


def test_it_reads_clusters_with_their_region_labels_and_prices(two_clusters_inventory):
    east, west = clusters()
    assert east == SandboxCluster(name="east", region="on-prem-east", labels={"provider": "on-prem"},
                                  prices={"h100-80gb": Decimal("7.20")}, spot_prices={})
    assert (west.prices, west.spot_prices) == ({"h100-80gb": Decimal("6.40")}, {"l4": Decimal("0.28")})
    assert [node.name for node in nodes("east")] == ["gpu-h100-0"]
    assert [node.name for node in nodes("west")] == ["gpu-h100-0", "gpu-l4-spot-0"]  # names are per cluster
    assert nodes() == nodes("east")
    with pytest.raises(UnknownCluster, match=r"no sandbox cluster 'north'.*it has east, west"):
        nodes("north")


def test_top_level_pools_are_one_cluster_named_default():
    inventory = parse_inventory({"pools": [{"prefix": "t4", "count": 2, "gpu": {"product": "Tesla-T4", "count": 1}}]})
    assert inventory.clusters == (SandboxCluster(name="default"),)
    assert [node.name for node in inventory.nodes["default"]] == ["t4-0", "t4-1"]
    assert "topology.kubernetes.io/region" not in inventory.nodes["default"][0].labels


POOL = {"prefix": "x", "gpu": {"product": "NVIDIA-L4", "count": 1}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "needs either top-level pools: .* or clusters:"),
        ({"pools": [POOL], "clusters": [{"name": "a", "pools": [POOL]}]}, "needs either"),
        ([POOL], "needs either"),
        ({"clusters": []}, "must list at least one cluster"),
        ({"clusters": [{"name": "East", "pools": [POOL]}]}, "DNS-1123 label .* got 'East'"),
        ({"clusters": [{"pools": [POOL]}]}, "DNS-1123 label .* got None"),
        ({"clusters": [{"name": "a", "pools": [POOL]}, {"name": "a", "pools": [POOL]}]}, "cluster a is listed twice"),
        ({"clusters": [{"name": "a", "pools": []}]}, "cluster a: it has no nodes"),
        ({"clusters": [{"name": "a", "pools": [POOL, POOL]}]}, "cluster a: node x-0 is listed twice"),
        ({"clusters": [{"name": "a", "pool": [POOL]}]}, "cluster a: unknown key 'pool'"),
        ({"clusters": [{"name": "a", "labels": ["x"], "pools": [POOL]}]}, "cluster a: labels must be a mapping"),
        ({"clusters": [{"name": "a", "prices": {"l4": -1}, "pools": [POOL]}]},
         "cluster a: prices.l4 must be a price per hour of at least 0, got -1"),
        ({"clusters": [{"name": "a", "spot_prices": {"l4": "cheap"}, "pools": [POOL]}]},
         "cluster a: spot_prices.l4 must be a price per hour, got 'cheap'"),
        ({"clusters": [{"name": "a", "prices": {"l4": True}, "pools": [POOL]}]},
         "cluster a: prices.l4 must be a price"),
        ({"clusters": [{"name": "a", "prices": {"l4": "nan"}, "pools": [POOL]}]},
         "cluster a: prices.l4 must be a price"),
        ({"clusters": [{"name": "a", "training": "tfjob", "pools": [POOL]}]},
         "cluster a: training must be trainjob, pytorchjob or none, got 'tfjob'"),
        ({"clusters": [{"name": "b", "pools": [{"gpu": {"count": 1}}]}]}, "cluster b: every pool needs a prefix"),
        ({"clusters": [{"name": "b", "pools": [{"prefix": "g", "gpu": {"count": 1}}]}]},
         "cluster b: pool g: its GPUs need a product"),
        ({"clusters": [{"name": "c", "pools": [{"prefix": "m", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 1},
                                                "mig": {"layout": [{"gpus": 1, "slices": {"3g.40gb": 3}}]}}]}]},
         "cluster c: MIG geometry .* needs 9/7 compute"),
    ],
)
def test_it_rejects_a_malformed_inventory_naming_the_cluster(data, message):
    with pytest.raises(InventoryError, match=message):
        parse_inventory(data)
