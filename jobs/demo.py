"""Demo training runs for ``manage.py seed_demo``: a lively mix that progresses on its own.

The sandbox reads ``SLIPWAY_SIM_DURATION`` / ``SLIPWAY_SIM_OUTCOME`` from a run's env, so
the demo shows every path a real cluster takes: quick successes, an out-of-memory failure,
a bad image, a long distributed run, a MIG-slice run and work queued behind quota. Runs go
through :func:`jobs.services.submit_run` like any other, so admission and the queue are real.
Idempotent: a team that already has runs gets no more.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from jobs.models import TrainingRun
from jobs.services import submit_run
from portal.models import Team

logger = logging.getLogger(__name__)

IMAGE = "registry.example.com/ml/trainer:2.4"

#: (team, user, run fields)
DEMO_RUNS: tuple[tuple[str, str, dict], ...] = (
    ("ml-research", "alice", {"name": "bert-finetune", "flavor": "a100-80gb", "gpus_per_worker": 2,
                              "env": {"SLIPWAY_SIM_DURATION": "90s"}}),
    ("ml-research", "alice", {"name": "llama-pretrain", "flavor": "h100-80gb", "gpus_per_worker": 4, "workers": 2,
                              "priority": "high", "shm_gb": 64, "env": {"SLIPWAY_SIM_DURATION": "15m"}}),
    ("ml-research", "alice", {"name": "resnet-oom", "flavor": "a100-80gb", "gpus_per_worker": 1, "max_retries": 0,
                              "env": {"SLIPWAY_SIM_DURATION": "40s", "SLIPWAY_SIM_OUTCOME": "oom"}}),
    ("ml-research", "bob", {"name": "sweep-lr-3e-4", "flavor": "a100-80gb", "gpus_per_worker": 4,
                            "env": {"SLIPWAY_SIM_DURATION": "3m"}}),
    # Needs 4 while 7 of 8 A100s are held: waits in the queue until bert-finetune finishes.
    ("ml-research", "bob", {"name": "sweep-lr-1e-4", "flavor": "a100-80gb", "gpus_per_worker": 4,
                            "env": {"SLIPWAY_SIM_DURATION": "2m"}}),
    ("ml-research", "alice", {"name": "tokenizer-eval", "flavor": "a100-1g.10gb", "gpus_per_worker": 1,
                              "env": {"SLIPWAY_SIM_DURATION": "2m"}}),
    ("vision", "dave", {"name": "yolo-train", "flavor": "a100-80gb", "gpus_per_worker": 4,
                        "env": {"SLIPWAY_SIM_DURATION": "5m"}}),
    # Spot capacity exists only among the L4 nodes of the sandbox's inventory.
    ("vision", "dave", {"name": "clip-eval-spot", "flavor": "l4", "gpus_per_worker": 1, "spot": True,
                        "env": {"SLIPWAY_SIM_DURATION": "3m"}}),
    ("vision", "dave", {"name": "vit-typo-image", "flavor": "l4", "gpus_per_worker": 1,
                        "image": "registry.example.com/vision/vit:does-not-exist",
                        "env": {"SLIPWAY_SIM_OUTCOME": "image-pull"}}),
    ("nlp", "erin", {"name": "t5-distill", "flavor": "h100-80gb", "gpus_per_worker": 4,
                     "env": {"SLIPWAY_SIM_DURATION": "4m"}}),
)


def seed_demo_runs(slugs: Collection[str] | None = None) -> list[TrainingRun]:
    """Submit the demo runs of every demo team (of those ``slugs``) that has no runs yet."""
    users = {u.username: u for u in get_user_model().objects.filter(username__in={u for _, u, _ in DEMO_RUNS})}
    wanted = {t for t, _, _ in DEMO_RUNS if slugs is None or t in slugs}
    teams = {t.slug: t for t in Team.objects.filter(slug__in=wanted)}
    fresh = {slug for slug, team in teams.items() if not TrainingRun.objects.filter(team=team).exists()}
    created = []
    for slug, username, fields in DEMO_RUNS:
        if slug not in fresh or username not in users:
            continue
        data = {"image": IMAGE, "command": ["python", "train.py"], "args": ["--config", "configs/demo.yaml"],
                **fields}
        try:
            created.append(submit_run(users[username], teams[slug], data))
        except ValidationError as exc:  # e.g. an admin lowered the demo quota: skip, say why
            logger.warning("demo run %s/%s not submitted: %s", slug, fields["name"], exc.messages)
    return created
