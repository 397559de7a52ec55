"""Pause and resume: pods deleted, quota released, the home volume kept; resuming is admission again.
The idle rule (notebook activity and GPU), preemption pausing, the owner told with the money saved."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from billing.models import QuotaHold
from cluster.deployments import DeploymentPhase
from cluster.status import WorkloadStatus
from core.formatting import format_rate
from notifications.delivery import fan_out
from notifications.events import long_waits
from notifications.models import Delivery, Event
from teams.models import Role
from tests.factories import add_member, make_user
from workloads.registry import kind_for
from workloads.tasks import apply_workload
from workspaces import idle, services
from workspaces.constants import PauseCause, WorkspaceState
from workspaces.models import Workspace
from workspaces.tasks import stop_pods

pytestmark = pytest.mark.django_db


def test_a_pause_releases_the_quota_and_keeps_the_home_volume(create, member, published,
                                                              django_capture_on_commit_callbacks):
    first, second = create(name="one"), create(name="two")
    waiting = create(name="three")
    assert waiting.state == WorkspaceState.QUEUED
    with django_capture_on_commit_callbacks(execute=True):
        paused = services.pause_by_user(member, first)
    assert (paused.state, paused.pause_cause) == (WorkspaceState.PAUSED, PauseCause.MANUAL)
    assert paused.reason == "paused by mia; its home volume (20 GB) is kept"
    assert not QuotaHold.objects.held().filter(ref=first.ref).exists()
    assert ("workspaces.tasks.stop_pods", (first.pk,)) in published
    # The freed slice went to the queued workspace at once.
    waiting.refresh_from_db()
    assert waiting.state == WorkspaceState.ADMITTED
    with pytest.raises(services.WorkspaceConflict):
        services.pause_by_user(member, paused)
    assert second.state == WorkspaceState.ADMITTED


def test_a_workspace_resumed_into_the_queue_is_told_it_waits_after_its_new_stay_not_at_once(create, member, settings):
    settings.SLIPWAY_NOTIFY_QUEUED_MINUTES = 30
    first, _second = create(name="one"), create(name="two")
    services.pause_by_user(member, first)
    create(name="three")  # takes the freed slice
    Workspace.objects.filter(pk=first.pk).update(created_at=timezone.now() - timedelta(days=2))  # made two days ago
    resumed = services.resume(member, Workspace.objects.get(pk=first.pk))
    assert resumed.state == WorkspaceState.QUEUED and resumed.attempt == 2
    now = timezone.now()
    assert long_waits(now + timedelta(minutes=1)) == []  # it was told it waited 30 min, a minute in
    assert long_waits(now + timedelta(minutes=31)) == [f"queue_waiting:{resumed.ref}:2"]


def test_resume_goes_through_admission_and_may_wait_in_the_queue(create, member):
    first, _second = create(name="one"), create(name="two")
    services.pause_by_user(member, first)
    create(name="three")  # takes the freed slice
    resumed = services.resume(member, Workspace.objects.get(pk=first.pk))
    assert resumed.state == WorkspaceState.QUEUED and resumed.attempt == 2
    assert resumed.reason == "waiting for quota: needs 1× a100-1g.10gb, 2 of 2 in use"
    with pytest.raises(services.WorkspaceConflict):
        services.resume(member, resumed)


def test_who_may_pause_is_who_may_delete(create, viewer, team, team_admin):
    workspace = create()
    with pytest.raises(PermissionDenied):
        services.pause_by_user(viewer, workspace)
    teammate = make_user("tom")
    add_member(team, teammate, Role.MEMBER)
    team.members_may_cancel_teammates_work = False
    team.save()
    with pytest.raises(PermissionDenied):
        services.pause_by_user(teammate, workspace)  # the team does not let members stop teammates' work
    assert services.pause_by_user(team_admin, workspace).state == WorkspaceState.PAUSED


def test_deleting_ends_it_and_releases_its_quota(create, member, published, django_capture_on_commit_callbacks):
    workspace = create()
    services.pause_by_user(member, workspace)
    with django_capture_on_commit_callbacks(execute=True):
        deleted = services.delete_workspace(member, Workspace.objects.get(pk=workspace.pk))
    assert deleted.state == WorkspaceState.DELETING
    assert deleted.reason == "deleted by mia, with its home volume (20 GB)"
    assert ("workloads.tasks.delete_workload", ("ws", workspace.pk)) in published
    assert ("workspaces.tasks.remove_local", (workspace.pk,)) in published
    with pytest.raises(services.WorkspaceConflict):
        services.delete_workspace(member, deleted)


T0 = timezone.now().replace(microsecond=0)


@pytest.mark.parametrize(("activity", "gpu_idle_since", "minutes", "due"), [
    (idle.Activity(T0 - timedelta(minutes=61), 0), T0 - timedelta(minutes=90), 60, True),
    (idle.Activity(T0 - timedelta(minutes=30), 0), T0 - timedelta(minutes=90), 60, False),  # a cell ran lately
    (idle.Activity(T0 - timedelta(minutes=90), 1), T0 - timedelta(minutes=90), 60, False),  # a kernel is busy
    (idle.Activity(T0 - timedelta(minutes=90), 0), T0 - timedelta(minutes=10), 60, False),  # the GPU worked lately
    (idle.Activity(T0 - timedelta(minutes=90), 0), None, 60, False),  # the GPU is busy, or not measured
    (None, T0 - timedelta(minutes=90), 60, False),  # the server did not answer: unknown is not idle
    (idle.Activity(T0 - timedelta(minutes=5), 0), T0 - timedelta(minutes=6), 5, True),
])
def test_the_idle_rule_needs_both_the_notebook_and_the_gpu(activity, gpu_idle_since, minutes, due):
    assert idle.due(activity, gpu_idle_since, minutes, T0) is due


def running(workspace: Workspace, **columns) -> Workspace:
    Workspace.objects.filter(pk=workspace.pk).update(state=WorkspaceState.RUNNING, **columns)
    return Workspace.objects.select_related("team", "flavor", "created_by").get(pk=workspace.pk)


READY = WorkloadStatus(DeploymentPhase.READY, "")


def test_idle_for_its_window_it_pauses_and_its_owner_is_told_what_it_saves(create, member, settings):
    member.email = "mia@example.com"
    member.save()
    workspace = running(create(idle_minutes=5), last_activity_at=T0 - timedelta(minutes=7), kernels_busy=0,
                        activity_checked_at=T0, idle_since=T0 - timedelta(minutes=6))
    assert kind_for("ws").after_observation(workspace, READY, T0 + timedelta(seconds=1)) is True
    workspace.refresh_from_db()
    assert (workspace.state, workspace.pause_cause) == (WorkspaceState.PAUSED, PauseCause.IDLE)
    saved = format_rate(workspace.running_cost_per_hour).removesuffix(" USD")  # money per hour's one rounding: 0.5857
    assert saved == str(workspace.running_cost_per_hour.quantize(Decimal("0.0001"))) != "0.00"
    assert f"saves {saved} USD/h while paused" in workspace.reason
    event = Event.objects.get(event_kind="workspace_paused")
    assert event.title == f"Workspace explore (#{workspace.pk}) of team ml-research paused"
    assert event.text.startswith(f"Workspace explore (#{workspace.pk}) of team ml-research paused: idle for 5 min")
    assert f"saves {saved} USD/h" in event.text

    fan_out(event.key)
    # Its owner is told, though subscribed to nothing.
    assert list(Delivery.objects.values_list("target", flat=True)) == ["mia@example.com"]


def test_a_recent_cell_or_a_busy_gpu_keeps_it_running(create):
    workspace = running(create(idle_minutes=5), last_activity_at=T0 - timedelta(minutes=2), activity_checked_at=T0,
                        idle_since=T0 - timedelta(minutes=30))
    assert kind_for("ws").after_observation(workspace, READY, T0) is False
    busy_gpu = running(create(name="gpu", idle_minutes=5), last_activity_at=T0 - timedelta(minutes=30),
                       activity_checked_at=T0, idle_since=None)
    assert kind_for("ws").after_observation(busy_gpu, READY, T0) is False
    assert set(Workspace.objects.values_list("state", flat=True)) == {WorkspaceState.RUNNING}


def test_a_preempted_workspace_is_paused_with_its_home_volume(create):
    workspace = running(create(), preempting_since=T0)
    assert kind_for("ws").after_preemption(workspace, T0 + timedelta(seconds=30)) is True
    workspace.refresh_from_db()
    assert (workspace.state, workspace.pause_cause, workspace.preempting_since) == (
        WorkspaceState.PAUSED, PauseCause.PREEMPTED, None)
    assert not QuotaHold.objects.held().filter(ref=workspace.ref).exists()
    assert "home volume (20 GB) kept" in workspace.reason
    # Not a second time (a replayed cycle).
    assert kind_for("ws").after_preemption(workspace, T0 + timedelta(seconds=31)) is False


def test_a_resumed_workspace_that_cannot_start_again_is_paused_not_failed(create, member):
    workspace = create()
    services.pause_by_user(member, workspace)
    resumed = services.resume(member, Workspace.objects.get(pk=workspace.pk))
    failed = WorkloadStatus(DeploymentPhase.FAILED, "ProgressDeadlineExceeded")
    kind = kind_for("ws")
    assert kind.state_for(failed, resumed) == WorkspaceState.STARTING  # not failed: its home would go with it
    resumed = running(resumed)
    assert kind.after_observation(resumed, failed, T0) is True
    resumed.refresh_from_db()
    assert (resumed.state, resumed.pause_cause) == (WorkspaceState.PAUSED, PauseCause.FAILED)


def test_a_late_stop_never_touches_the_attempt_a_resume_started(create, member, fake_backend):
    """The pause's task runs after its commit; if the owner resumed meanwhile, it deletes nothing."""
    workspace = create()
    services.pause_by_user(member, workspace)
    services.resume(member, Workspace.objects.get(pk=workspace.pk))
    assert apply_workload("ws", workspace.pk) == "applied"
    assert stop_pods(workspace.pk) == 0
    assert (workspace.namespace, "Deployment", workspace.object_name) in fake_backend.objects
