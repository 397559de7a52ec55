"""Fixtures for training-run tests (flavors, quota, the cluster fake and publish capture are in tests/conftest.py)."""

from __future__ import annotations


def run_payload(**overrides) -> dict:
    payload = {
        "team": "ml-research", "name": "bert-finetune", "image": "registry.example.com/ml/trainer:1.4",
        "command": ["python", "train.py"], "args": ["--epochs", "3"], "env": {"WANDB_MODE": "offline"},
        "flavor": "a100-80gb", "gpus_per_worker": 2,
    }
    payload.update(overrides)
    return payload
