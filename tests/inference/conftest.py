"""Fixtures of the inference tests: flavors, a team with A100 and MIG quota, a cluster fake, publish capture."""

from __future__ import annotations

from decimal import Decimal

import pytest

from inference import services
from quotas.demo import seed_team_quotas


@pytest.fixture
def ep_quota(team, flavors):
    """The team may hold 4 A100s and 7 MIG 1g.10gb slices; budget 10,000."""
    return seed_team_quotas(team, {"a100-80gb": 4, "a100-1g.10gb": 7}, Decimal("10000"))


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
