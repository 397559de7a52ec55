"""``slipway clusters`` (issue 52): the clusters and their elastic pools on the command line, against a live server."""

from __future__ import annotations

import json
from dataclasses import replace

import httpx
import jsonschema
import pytest
import yaml
from django.utils import timezone

import fleet.services as fleet
from fleet.models import NodePool
from teams.services import create_api_token
from tests.cli.test_cli import json_schema
from tests.fleet.conftest import node

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff_token(staff) -> str:
    _token, raw = create_api_token(staff, "cli")
    return raw


@pytest.fixture
def pooled(flavors):
    """The one cluster: a ready A100 node (6 of 8 in use), one provisioning; a pool of at most 4 with a history."""
    cluster = fleet.clusters()[0]
    a100 = flavors["a100-80gb"]
    fleet.record_nodes(cluster, [node("gpu-a100-0", a100, free=2),
                                 replace(node("gpu-a100-1", a100, free=8), provisioning=True)], timezone.now())
    NodePool.objects.create(cluster=cluster, flavor=a100, min_nodes=1, max_nodes=4, mode="atomic",
                            history_seconds=[180, 210, 240, 600], autoscaler_limit=64)
    return cluster


def test_clusters_prints_each_cluster_and_its_pools_to_staff(cli, pooled, staff_token):
    result = cli("clusters", SLIPWAY_TOKEN=staff_token)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CLUSTER", "STATE", "REGION", "TRAINING", "FRAMEWORKS", "FLAVORS"]
    # Never discovered yet: taken to have the v1 operator, so distributed pytorch only (docs/training.md).
    assert lines[1].split()[:5] == [pooled.name, "ready", "–", "pytorchjob", "pytorch"]
    assert lines[1].endswith("a100-80gb 2/32 free")  # free now, of what the pool may ever hold
    header = lines.index(next(line for line in lines if line.startswith("CLUSTER  ") and "POOL" in line))
    assert lines[header].split() == ["CLUSTER", "POOL", "MODE", "MIN", "MAX", "READY", "PROVISIONING", "IDLE-AFTER",
                                     "NODE-PROVISIONING"]
    assert lines[header + 1].split() == [pooled.name, "a100-80gb", "atomic", "1", "4", "(limit", "64", "units)", "1",
                                         "1", "10", "min", "about", "4", "min", "(p90", "10", "min)"]


def test_clusters_json_and_yaml_are_the_apis_answer(cli, pooled, staff_token, live_server):
    rows = json.loads(cli("clusters", "-o", "json", SLIPWAY_TOKEN=staff_token).stdout)
    openapi = yaml.safe_load(httpx.get(f"{live_server.url}/api/schema/", timeout=60).text)  # seconds of CPU to make
    answer = openapi["paths"]["/api/v1/clusters/"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    jsonschema.Draft202012Validator({**json_schema(openapi, answer),
                                     "components": json_schema(openapi, openapi["components"])}).validate(rows)
    (pool,) = rows[0]["pools"]
    assert (pool["flavor"], pool["nodes_ready"], pool["nodes_provisioning"], pool["max"]) == ("a100-80gb", 1, 1, 4)
    assert yaml.safe_load(cli("clusters", "-o", "yaml", SLIPWAY_TOKEN=staff_token).stdout) == rows


def test_clusters_names_each_clusters_training_api_and_frameworks(cli, flavors, staff_token):
    cluster = fleet.clusters()[0]
    cluster.training_api = "trainjob"
    cluster.training_runtimes = [{"name": "slipway-jax", "framework": "jax"},
                                 {"name": "slipway-pytorch", "framework": "pytorch"}]
    cluster.save()
    row = cli("clusters", SLIPWAY_TOKEN=staff_token).stdout.splitlines()[1].split()
    assert row[3:5] == ["trainjob", "jax,pytorch"]


def test_clusters_without_pools_says_so_and_a_member_is_told_it_is_staffs(cli, flavors, staff_token):
    result = cli("clusters", SLIPWAY_TOKEN=staff_token)
    assert result.exit_code == 0 and result.stdout.splitlines()[-1] == (
        "No elastic pools: every cluster is a fixed inventory.")
    refused = cli("clusters")  # the member's token
    assert refused.exit_code == 4
    assert "Only platform staff see the clusters." in refused.output
