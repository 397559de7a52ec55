"""A queued workspace's start estimate in its API answer (issue 46): the same range and bound, in the same words, as
its page, as runs and endpoints have them (workloads.api.QueuedFields: one source for the three kinds)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from html import unescape

import pytest
from django.utils import timezone

from tests.workloads.test_start_range import clock, short_runs_platform
from workloads.estimates.forecast import estimated_starts
from workspaces import services

pytestmark = pytest.mark.django_db


def page_words(client, member, workspace) -> str:
    """The workspace page's start estimate as a reader reads it (tags gone)."""
    client.force_login(member)
    html = client.get(workspace.get_absolute_url()).content.decode()
    shown = re.search(r'<p class="reason" id="start-estimate"><strong>Start:</strong> (.*?)</p>', html, re.S).group(1)
    return unescape(re.sub(r"<[^>]+>", "", shown))


def test_a_queued_workspace_says_its_range_and_bound_in_the_api_as_on_its_page(member, team, quota, flavors,
                                                                               published, client, api):
    now = timezone.now()
    short_runs_platform(member, team, flavors, now)
    workspace = services.create_workspace(member, team, {"name": "explore", "flavor": "a100-80gb", "gpus": 2})
    assert workspace.state == "queued"
    estimate = estimated_starts(team)[workspace.ref]
    words = page_words(client, member, workspace)
    # By the time of day (and the date too when the bound is tomorrow: near midnight).
    assert "when busy ends" in words and f"{clock(now + timedelta(minutes=30))} at the latest" in words
    body = api.get(f"/api/v1/workspaces/{workspace.pk}/").json()
    assert body["start_estimate"] == words
    assert [datetime.fromisoformat(body[f"estimated_start_{name}"].replace("Z", "+00:00"))
            for name in ("earliest", "at", "latest")] == [estimate.earliest, estimate.at, estimate.latest]
    listed = {row["id"]: row for row in api.get(f"/api/v1/workspaces/?team={team.slug}").json()["results"]}
    assert listed[workspace.pk]["start_estimate"] == words
    # Once it holds its GPUs there is nothing to estimate.
    type(workspace).objects.filter(pk=workspace.pk).update(state="running", started_at=now)
    running = api.get(f"/api/v1/workspaces/{workspace.pk}/").json()
    assert (running["start_estimate"], running["estimated_start_latest"], running["estimated_start_earliest"]) == (
        "", None, None)
