"""Fixtures of the workspaces tests: a team quota of MIG slices, full GPUs and a shared flavor."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quotas.demo import seed_team_quotas
from workspaces import services


@pytest.fixture
def ws_quota(team, flavors):
    """The team may hold 2 MIG 1g.10gb slices, 1 A100 and 2 time-sliced T4 units; budget 100,000."""
    return seed_team_quotas(team, {"a100-1g.10gb": 2, "a100-80gb": 1, "t4-ts4": 2}, Decimal("100000"))


@pytest.fixture
def create(member, team, ws_quota, published, django_capture_on_commit_callbacks):
    """``create(**fields)``: the member's workspace created through the service (its publishes recorded)."""

    def make(user=None, **fields):
        data = {"name": "explore", "flavor": "a100-1g.10gb", **fields}
        with django_capture_on_commit_callbacks(execute=True):
            return services.create_workspace(user or member, team, data)

    return make
