"""Demo workspaces for ``manage.py seed_demo``: one running (its local Jupyter server opens from the
Workspaces page), one paused with its home volume kept. Created through the services like any other;
idempotent: a team that already has workspaces gets no more."""

from __future__ import annotations

import logging
from collections.abc import Collection

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from teams.models import Team
from workspaces.constants import PauseCause
from workspaces.models import Workspace
from workspaces.services import create_workspace, pause

logger = logging.getLogger(__name__)

#: (team, user, workspace fields, paused): a MIG slice each, of ml-research's three.
DEMO_WORKSPACES: tuple[tuple[str, str, dict, bool], ...] = (
    ("ml-research", "alice", {"name": "explore", "flavor": "a100-1g.10gb", "home_gb": 20, "idle_minutes": 60,
                              "env": {"SLIPWAY_SIM_LOAD_SECONDS": "5"}}, False),
    ("ml-research", "alice", {"name": "eda-notebook", "flavor": "a100-1g.10gb", "home_gb": 50}, True),
)


def seed_demo_workspaces(slugs: Collection[str] | None = None) -> list[Workspace]:
    """Create the demo workspaces of every demo team (of those ``slugs``) that has none yet."""
    users = {u.username: u for u in get_user_model().objects.filter(username__in={u for _, u, _, _ in DEMO_WORKSPACES})}
    wanted = {t for t, _, _, _ in DEMO_WORKSPACES if slugs is None or t in slugs}
    teams = {t.slug: t for t in Team.objects.filter(slug__in=wanted)}
    fresh = {slug for slug, team in teams.items() if not Workspace.objects.filter(team=team).exists()}
    created = []
    for slug, username, fields, paused in DEMO_WORKSPACES:
        if slug not in fresh or username not in users:
            continue
        try:
            workspace = create_workspace(users[username], teams[slug], fields)
        except ValidationError as exc:  # e.g. an admin lowered the demo quota: skip, say why
            logger.warning("demo workspace %s/%s not created: %s", slug, fields["name"], exc.messages)
            continue
        if paused:
            pause(workspace, PauseCause.MANUAL, user=users[username])
        created.append(workspace)
    return created
