"""Fixtures of the inference tests: flavors, a team with A100 and MIG quota, a cluster fake, publish capture."""

from __future__ import annotations

import pytest

from inference import services
from tests.inference.sandbox_cluster import Cluster


def endpoint_payload(**overrides) -> dict:
    payload = {"name": "llama-chat", "image": "registry.example.com/serving/vllm:0.6", "flavor": "a100-80gb",
               "min_replicas": 1, "max_replicas": 4, "autoscale": {"metric": "gpu_utilization", "target": 70}}
    payload.update(overrides)
    return payload


@pytest.fixture
def create(member, team, ep_quota, published):
    def make(**overrides):
        return services.create_endpoint(member, team, endpoint_payload(**overrides))

    return make


@pytest.fixture
def cluster(published, settings) -> Cluster:
    """The sandbox driven step by step, with the published tasks run as a worker would (sandbox_cluster.py)."""
    return Cluster.installed(published, settings)
