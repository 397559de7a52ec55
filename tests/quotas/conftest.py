"""Fixtures of the quotas tests: the standard flavors and a team with quota."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quotas.demo import seed_team_quotas
from quotas.tasks import sync_team_quota


@pytest.fixture
def quota_team(team, flavors):
    """``team`` with 8x a100-80gb, 2x l4 and 7x a100-1g.10gb, no budget."""
    seed_team_quotas(team, {"a100-80gb": 8, "l4": 2, "a100-1g.10gb": 7})
    return team


@pytest.fixture
def no_broker(monkeypatch) -> list[int]:
    """Quota changes enqueue the mirror task after commit: the team ids recorded instead of published."""
    enqueued: list[int] = []
    monkeypatch.setattr(sync_team_quota, "delay", lambda team_id: enqueued.append(team_id))
    return enqueued


@pytest.fixture
def budget_team(quota_team):
    seed_team_quotas(quota_team, {}, monthly_budget=Decimal("100.00"))
    return quota_team


def inventory():
    """Nodes shaped like the sandbox inventory: A100, MIG A100, 2x H100 and 2x L4."""
    from cluster.backends.base import NodeCapacity

    def node(name, resource, count, product, in_use=0):
        return NodeCapacity(name, resource, count, in_use, labels={"nvidia.com/gpu.product": product})

    a100, h100, l4 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"
    return [
        node("gpu-a100-0", "nvidia.com/gpu", 8, a100, in_use=3),
        node("gpu-a100-mig-0", "nvidia.com/mig-1g.10gb", 32, a100),
        node("gpu-a100-mig-0", "nvidia.com/mig-2g.20gb", 8, a100),
        node("gpu-a100-mig-0", "nvidia.com/mig-3g.40gb", 2, a100),
        node("gpu-h100-0", "nvidia.com/gpu", 8, h100),
        node("gpu-h100-1", "nvidia.com/gpu", 8, h100),
        node("gpu-l4-0", "nvidia.com/gpu", 1, l4),
        node("gpu-l4-1", "nvidia.com/gpu", 1, l4),
    ]


@pytest.fixture
def fake_backend(fake_backend):
    """The shared fake cluster with :func:`inventory`'s nodes."""
    fake_backend.nodes = inventory()
    return fake_backend


@pytest.fixture(autouse=True)
def fast_password_hasher(settings):
    # PBKDF2's deliberate slowness costs ~0.4 s per user created; no test here measures it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
