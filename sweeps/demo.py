"""The demo's sweep (``manage.py seed_demo``): ML Research's learning-rate search, created through the service
like any sweep, as bob, a member — in progress after ``make run``, with pruned trials within minutes.

Its trials are single MIG slices (``a100-3g.40gb``: four of ML Research's quota, which no other demo work uses),
three at a time, thirty in all, judged by ASHA: most are pruned at the first rung, so it runs for about twenty
minutes (twelve trials took seven on this machine). The sandbox gives each a learning curve whose final loss depends
on its learning rate and batch size (``SLIPWAY_SIM_OPTIMUM``, docs/metrics.md): a trial trains for four minutes,
2,400 steps (20 a line, a line every two seconds); ASHA's first rung is at 120 steps, a few seconds in, so with
the stdout reader's 20 seconds the first trials are pruned about half a minute after they start.
"""

from __future__ import annotations

from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from sweeps import services
from teams.models import Team

TEAM, USER, NAME = "ml-research", "bob", "lr-search"


def demo_sweep() -> dict:
    """The demo sweep's file, as ``POST /sweeps/`` takes it (without its team)."""
    base = {"image": "ghcr.io/acme/bert-trainer:2.1", "command": ["python", "train.py"],
            "args": ["--lr={lr}", "--batch-size={batch}", "--warmup={warmup}"],
            "flavor": "a100-3g.40gb", "gpus_per_worker": 1, "max_runtime_minutes": 10,
            "checkpoint": {"grace_seconds": 30},
            "env": {"SLIPWAY_SIM_DURATION": "4m", "SLIPWAY_SIM_LOG_EVERY": "2", "SLIPWAY_SIM_CHECKPOINT_EVERY": "30s",
                    "SLIPWAY_SIM_HONOUR_NOTICE": "1", "SLIPWAY_SIM_OPTIMUM": "LR=3e-4,BATCH=64,WARMUP=500",
                    "SLIPWAY_SIM_CURVE_SEED": "7"}}
    return {"name": NAME, services.base_key(): base,
            "parameters": {"lr": {"type": "float", "min": 1e-5, "max": 1e-1, "log": True},
                           "batch": {"type": "categorical", "choices": [16, 32, 64, 128, 256]},
                           "warmup": {"type": "int", "min": 0, "max": 2000, "step": 100}},
            "objective": {"metric": "loss", "goal": "minimize"}, "sampler": "tpe",
            "pruner": {"type": "asha", "min_resource": 120, "reduction_factor": 3, "max_resource": 2400},
            "parallel": 3, "max_trials": 30, "max_cost": str(Decimal("40.00")), "seed": 7}


def seed_demo_sweep() -> str:
    """Create the demo's sweep; the line ``seed_demo`` prints (why not, when it cannot)."""
    team = Team.objects.filter(slug=TEAM).first()
    user = get_user_model().objects.filter(username=USER).first()
    if team is None or user is None:
        return f"No demo sweep: the demo's {TEAM} or {USER} is missing."
    try:
        sweep = services.create(user, team, demo_sweep())
    except ValidationError as refused:
        return f"No demo sweep: {'; '.join(m for ms in refused.message_dict.values() for m in ms)}"
    return (f"{team.name} started sweep {sweep.name} (#{sweep.pk}): {sweep.max_trials} trials, {sweep.parallel} at a "
            f"time, ASHA pruning, capped at {sweep.max_cost} {sweep.currency}.")
