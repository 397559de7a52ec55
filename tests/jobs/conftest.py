"""A training run for any test package: its API payload, and the run submitted through the service
or through the API (flavors, quota, the cluster fake, publish capture and the ``submit`` fixture are
in tests/conftest.py)."""

from __future__ import annotations

from jobs.models import TrainingRun
from jobs.services import submit_run


def run_payload(**overrides) -> dict:
    payload = {
        "team": "ml-research", "name": "bert-finetune", "image": "registry.example.com/ml/trainer:1.4",
        "command": ["python", "train.py"], "args": ["--epochs", "3"], "env": {"WANDB_MODE": "offline"},
        "flavor": "a100-80gb", "gpus_per_worker": 2,
    }
    payload.update(overrides)
    return payload


def submit_run_as(user, team, **overrides) -> TrainingRun:
    """``run_payload(**overrides)`` submitted by ``user`` for ``team`` through the service (which takes
    the team apart from the fields)."""
    return submit_run(user, team, {k: v for k, v in run_payload(**overrides).items() if k != "team"})


def post_run(client, duration: str | None = None, **fields) -> dict:
    """``run_payload(**fields)`` submitted through the API as ``client``: asserts the 201, returns the run.

    ``duration`` is how long the sandbox runs it: ``SLIPWAY_SIM_DURATION``, added to its env.
    """
    payload = run_payload(**fields)
    if duration is not None:
        payload["env"] = {**payload["env"], "SLIPWAY_SIM_DURATION": duration}
    response = client.post("/api/v1/runs/", payload, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def post_share_run(client, team: str, name: str, duration: str | None = None, **fields) -> int:
    """The id of a run of 4 A100s — one team's whole share in :func:`tests.factories.cohort_pair` —
    posted as ``client`` (see :func:`post_run`)."""
    return post_run(client, duration, team=team, name=name, gpus_per_worker=4, **fields)["id"]
