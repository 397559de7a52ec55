"""Why queued work waits, on every kind's page (issue 39): one function, :func:`workloads.views.queued_detail`.

Each kind's status panel shows, while its workload is queued, the queue's reason from the figures of
now (not the words stored when it was queued), its start estimate and its place in the queue; while
it holds its quota but waits for a node with room, why no start time can be promised. A resumed
workspace goes through admission like new work: it waits with the same words.
"""

from __future__ import annotations

import re

import pytest
from django.utils.html import escape

from inference import services as endpoints
from quotas.queue import queue_positions, queue_reason
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import submit_run_as
from workloads.estimates.forecast import CAPACITY_WAIT, estimated_starts
from workloads.registry import kind_of
from workloads.views import queued_detail
from workspaces import services as workspaces

pytestmark = pytest.mark.django_db

#: What the queued work of these tests waits for: a run holding all 8 of the team's A100s for an hour.
LIMIT_MINUTES = 60
#: The status panel's reason line (workloads/_queued_detail.html).
REASON = re.compile(r'<p class="reason"><strong>Reason:</strong> ([^<]*)</p>')


def fill_quota(member, team):
    """All of the team's A100s taken for :data:`LIMIT_MINUTES` (its end is what the queued work waits for)."""
    return submit_run_as(member, team, name="big", gpus_per_worker=8, max_runtime_minutes=LIMIT_MINUTES)


def queued_one_of_each(member, team) -> list:
    """A run, an endpoint and a workspace, each queued behind :func:`fill_quota`, with stale stored words."""
    run = submit_run_as(member, team, name="waits", gpus_per_worker=4)
    endpoint = endpoints.create_endpoint(member, team, endpoint_payload(min_replicas=1, max_replicas=1))
    workspace = workspaces.create_workspace(member, team, {"name": "explore", "flavor": "a100-80gb", "gpus": 1})
    queued = [run, endpoint, workspace]
    for workload in queued:
        assert workload.state == kind_of(workload).lifecycle.queued
        # The words stored at queueing go stale as the figures move: the page must not show them.
        type(workload).objects.filter(pk=workload.pk).update(reason="stale words from when it was queued")
        workload.refresh_from_db()
    return queued


def page_of(client, workload) -> str:
    return client.get(workload.get_absolute_url()).content.decode()


def test_every_kinds_page_shows_the_queues_reason_now_its_start_estimate_and_place(
        client, member, team, quota, published):
    fill_quota(member, team)
    queued = queued_one_of_each(member, team)
    estimates, positions = estimated_starts(team), queue_positions(team)
    client.force_login(member)
    for workload in queued:
        html = page_of(client, workload)
        reason = queue_reason(team, workload.ref)
        assert reason.startswith("waiting for quota")
        assert REASON.findall(html) == [escape(reason)], workload.ref  # not the stale words
        start = estimates[workload.ref]
        assert start.at is not None and start.after[0].name == "big"  # it starts when big ends
        assert f"<strong>Start:</strong> {escape(start.lead())}, when " in html, workload.ref
        assert f"#{positions[workload.ref]} in queue" in html
    assert sorted(positions[w.ref] for w in queued) == [1, 2, 3]  # the workspace first: it asks for high priority


def test_the_run_and_endpoint_pages_word_the_reason_as_the_queue_does(client, member, team, quota, published):
    fill_quota(member, team)
    run, endpoint, _workspace = queued_one_of_each(member, team)
    client.force_login(member)
    for workload in (run, endpoint):
        shown = REASON.findall(page_of(client, workload))
        assert shown == [escape(queue_reason(team, workload.ref))] == [escape(queued_detail(workload)["reason"])]


def test_a_resumed_workspace_waits_in_the_queue_with_its_reason_and_start_estimate(
        client, member, team, quota, published):
    workspace = workspaces.create_workspace(member, team, {"name": "explore", "flavor": "a100-80gb", "gpus": 1})
    workspaces.pause_by_user(member, workspace)
    fill_quota(member, team)
    workspace = workspaces.resume(member, workspace)
    assert workspace.state == kind_of(workspace).lifecycle.queued and workspace.attempt == 2
    client.force_login(member)
    html = page_of(client, workspace)
    assert f"<strong>Reason:</strong> {escape(queue_reason(team, workspace.ref))}</p>" in html
    estimate = estimated_starts(team)[workspace.ref]
    assert f"<strong>Start:</strong> {escape(estimate.lead())}, when " in html
    assert f">big</a> ends, {escape(estimate.bound())}</p>" in html and "#1 in queue" in html


def test_work_waiting_for_a_node_with_room_says_why_it_has_no_start_time_on_every_kinds_page(
        client, member, team, quota, published):
    run = submit_run_as(member, team, name="wide", gpus_per_worker=4)
    endpoint = endpoints.create_endpoint(member, team, endpoint_payload(min_replicas=1, max_replicas=1))
    workspace = workspaces.create_workspace(member, team, {"name": "explore", "flavor": "a100-80gb", "gpus": 1})
    words = "waiting for capacity: needs 1\u00d7 a100-80gb on one node; no node has a free one"
    client.force_login(member)
    for workload in (run, endpoint, workspace):
        assert workload.state != kind_of(workload).lifecycle.queued  # admitted: it holds its quota
        type(workload).objects.filter(pk=workload.pk).update(reason=words, reason_code="waiting_for_capacity")
        html = page_of(client, workload)
        assert f"<strong>Reason:</strong> {escape(words)}</p>" in html, workload.ref
        assert f"<strong>Start:</strong> {escape(CAPACITY_WAIT)}</p>" in html, workload.ref
        assert " in queue<" not in html
