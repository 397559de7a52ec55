"""Demo inference endpoints for ``manage.py seed_demo``: serving that scales on its own in the sandbox.

Each replica runs a real engine on the sandbox (docs/serving.md), which its GPU utilization and
autoscaler follow: called, these endpoints grow burst replicas, get capped by the team quota and
give units back by themselves; nobody calling them, they idle at their minimum. With the sandbox's
engines off, a demo load following a slow wave scaled to each endpoint's maximum drives them
instead. Created through :func:`inference.services.create_endpoint` like any other.
Idempotent: a team that already has endpoints gets no more.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from inference.models import InferenceEndpoint
from inference.services import create_endpoint
from teams.models import Team

logger = logging.getLogger(__name__)

#: (team, user, endpoint fields)
DEMO_ENDPOINTS: tuple[tuple[str, str, dict], ...] = (
    # MIG slices: 1 guaranteed, bursts up to 5 of the team's 7 slices; sleeps at zero while nobody calls it.
    ("vision", "dave", {"name": "detector", "image": "registry.example.com/vision/serve:2.0",
                        "flavor": "a100-1g.10gb", "min_replicas": 0, "max_replicas": 5,
                        "autoscale": {"metric": "queue_length", "engine": "triton", "target": 40},
                        "scale_down_delay_seconds": 120}),
    ("ml-research", "alice", {"name": "llama-chat", "image": "registry.example.com/serving/vllm:0.6",
                              "flavor": "a100-80gb", "min_replicas": 1, "max_replicas": 4,
                              "autoscale": {"metric": "gpu_utilization", "target": 70},
                              "scale_down_delay_seconds": 120, "env": {"SLIPWAY_SIM_LOAD_SECONDS": "30"}}),
    # A small model on a quarter of a time-sliced T4 (t4-ts4): a tenth of an L4's price, sharing
    # the GPU's turns and its 15 GiB (unisolated) with up to three other pods; a second replica
    # in bursts. Where the flavor does not exist it is refused, and the seed logs why.
    ("vision", "dave", {"name": "ocr-small", "image": "registry.example.com/vision/serve:2.0",
                        "flavor": "t4-ts4", "min_replicas": 1, "max_replicas": 2,
                        "autoscale": {"metric": "gpu_utilization", "target": 70},
                        "scale_down_delay_seconds": 120, "env": {"SLIPWAY_SIM_GPU_MEMORY_GB": "3"}}),
)


def seed_demo_endpoints(slugs: Collection[str] | None = None) -> list[InferenceEndpoint]:
    """Create the demo endpoints of every demo team (of those ``slugs``) that has no endpoints yet."""
    users = {u.username: u for u in get_user_model().objects.filter(username__in={u for _, u, _ in DEMO_ENDPOINTS})}
    wanted = {t for t, _, _ in DEMO_ENDPOINTS if slugs is None or t in slugs}
    teams = {t.slug: t for t in Team.objects.filter(slug__in=wanted)}
    fresh = {slug for slug, team in teams.items() if not InferenceEndpoint.objects.filter(team=team).exists()}
    created = []
    for slug, username, fields in DEMO_ENDPOINTS:
        if slug not in fresh or username not in users:
            continue
        try:
            created.append(create_endpoint(users[username], teams[slug], fields))
        except ValidationError as exc:  # e.g. an admin lowered the demo quota: skip, say why
            logger.warning("demo endpoint %s/%s not created: %s", slug, fields["name"], exc.messages)
    return created
