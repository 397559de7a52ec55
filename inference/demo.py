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
import os
from collections.abc import Collection
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from inference.constants import ACTIVE_STATES
from inference.keys import create_key, revoke_key
from inference.models import ApiKey, EndpointRevision, InferenceEndpoint
from inference.services import EndpointConflict, create_endpoint, rollout_endpoint
from teams.models import Team, hash_token

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


# -- the demo's serving: a key, live traffic, one canary that rolls back (docs/serving.md "In the demo") ----------
#: The demo endpoint the load generator calls, and whose canary rolls back: (team, owner, endpoint).
DEMO_SERVING = ("ml-research", "alice", "llama-chat")
DEMO_KEY_NAME = "demo load"
#: The bad candidate: half its answers are 500s, so the canary rule rolls it back after two windows.
DEMO_CANARY_ENV = {"SLIPWAY_SIM_ERROR_RATE": "0.5"}
DEMO_CANARY_WEIGHT = 25


def seed_demo_serving(key_file: Path) -> list[str]:
    """Give the demo endpoint a key (written to ``key_file``, 0600, for ``manage.py serving_load``) and, once,
    a canary revision whose engine answers half its requests with 500s, which the canary rule rolls back
    while the load generator calls it. Idempotent: a key file whose key is still usable is kept; the canary
    is started only while the endpoint has never had a second revision. Returns what to print."""
    slug, username, name = DEMO_SERVING
    owner = get_user_model().objects.filter(username=username).first()
    endpoint = (InferenceEndpoint.objects.filter(team__slug=slug, name=name, state__in=ACTIVE_STATES)
                .select_related("team").first())
    if owner is None or endpoint is None:
        return [f"No demo serving: {slug}/{name} is not there."]
    lines = [_demo_key(owner, endpoint, key_file)]
    if not EndpointRevision.objects.filter(endpoint=endpoint, number__gt=1).exists():
        try:
            rollout_endpoint(owner, endpoint, {"env": {**endpoint.env, **DEMO_CANARY_ENV}, "strategy": "canary",
                                               "weight": DEMO_CANARY_WEIGHT})
            lines.append(f"{slug}/{name} has a {DEMO_CANARY_WEIGHT} % canary answering half its requests with "
                         f"500s: the canary rule rolls it back once the load reaches it.")
        except (ValidationError, EndpointConflict) as exc:  # e.g. its quota is taken: say why, seed the rest
            logger.warning("demo canary of %s/%s not started: %s", slug, name, exc.messages)
    return lines


def _demo_key(owner, endpoint: InferenceEndpoint, key_file: Path) -> str:
    try:
        raw = key_file.read_text().strip()
    except OSError:
        raw = ""
    if raw and ApiKey.objects.usable().filter(digest=hash_token(raw), team_id=endpoint.team_id).exists():
        return f"The demo key of {endpoint.team.slug}/{endpoint.name} is in {key_file}."
    # Its raw key is lost (the file went): revoke the old one, whose name a new key may not share.
    for old in ApiKey.objects.filter(team_id=endpoint.team_id, name=DEMO_KEY_NAME, revoked_at__isnull=True):
        revoke_key(owner, old)
    _key, raw = create_key(owner, endpoint.team, endpoint, DEMO_KEY_NAME)
    key_file.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
        file.write(raw + "\n")
    return f"A demo key of {endpoint.team.slug}/{endpoint.name} was written to {key_file}."
