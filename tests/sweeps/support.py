"""What tests outside tests/sweeps need of a sweep: a small valid sweep file."""

from __future__ import annotations

from tests.jobs.conftest import run_payload


def matrix_sweep(name: str = "matrix-sweep") -> dict:
    """A two-trial random sweep of the run payload the tests submit (without its team and name)."""
    base = {k: v for k, v in run_payload().items() if k not in ("team", "name")}
    return {"name": name, "run": {**base, "max_runtime_minutes": 30},
            "parameters": {"lr": {"type": "float", "min": 1e-4, "max": 1e-2, "log": True}},
            "objective": {"metric": "loss", "goal": "minimize"}, "sampler": "random", "max_trials": 2, "parallel": 1}
