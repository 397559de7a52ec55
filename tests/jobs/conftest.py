"""Fixtures for training-run tests: flavors and quota, a fake cluster, captured task publishes."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quotas.demo import seed_flavors, seed_team_quotas
from tests.jobs.fakes import FakeBackend


@pytest.fixture
def flavors(db):
    return {f.name: f for f in seed_flavors()}


@pytest.fixture
def quota(team, flavors):
    """The team may hold 8 A100s and 2 L4s; budget 10,000."""
    return seed_team_quotas(team, {"a100-80gb": 8, "l4": 2}, Decimal("10000"))


@pytest.fixture
def fake_backend(monkeypatch):
    backend = FakeBackend()
    monkeypatch.setattr("portal.cluster.get_backend", lambda: backend)
    return backend


@pytest.fixture
def published(monkeypatch):
    """Task publishes recorded instead of sent: list of (task name, args)."""
    calls: list[tuple[str, tuple]] = []

    def record(task, *args, **kwargs):
        calls.append((task.name, args))
        return True

    monkeypatch.setattr("portal.queueing.publish", record)
    return calls


def run_payload(**overrides) -> dict:
    payload = {
        "team": "ml-research", "name": "bert-finetune", "image": "registry.example.com/ml/trainer:1.4",
        "command": ["python", "train.py"], "args": ["--epochs", "3"], "env": {"WANDB_MODE": "offline"},
        "flavor": "a100-80gb", "gpus_per_worker": 2,
    }
    payload.update(overrides)
    return payload
