"""Workspaces as the third workload kind: registered, validated, admitted by the one admission, billed while running."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.utils import timezone

from billing.models import QuotaHold
from core.priority import Priority
from quotas.models import QueuedRequest
from teams.models import AuditEvent
from workloads.cycle import reconcile as rec
from workloads.models import SecretEnv
from workloads.registry import kind_for, kinds, resource_kinds
from workloads.tasks import apply_workload
from workspaces import services
from workspaces.constants import WorkspaceState
from workspaces.models import Workspace, WorkspacePolicy

pytestmark = pytest.mark.django_db


def test_it_is_a_registered_kind_with_its_own_resources():
    kind = kind_for("ws")
    assert kind in kinds() and kind.noun == "workspace" and kind.model is Workspace
    declared = {(r.kind, r.kept_across_attempts) for r in kind.resources}
    assert ("PersistentVolumeClaim", True) in declared and ("Ingress", False) in declared
    # The cycle observes what any kind declares: the Ingress and NetworkPolicy are deleted, not observed.
    assert {r.kind for r in resource_kinds()} >= {"Deployment", "PersistentVolumeClaim", "Ingress", "NetworkPolicy"}
    assert kind.attempt_resources[-1].deleted is False  # a pause keeps the home claim


def test_it_admits_a_workspace_against_the_team_quota_with_high_priority(create, published):
    workspace = create()
    assert workspace.state == WorkspaceState.ADMITTED
    assert workspace.priority == Priority.HIGH  # interactive work: the team's default
    hold = QuotaHold.objects.held().get(ref=workspace.ref)
    assert (hold.units, hold.flavor.name, hold.priority) == (1, "a100-1g.10gb", Priority.HIGH.rank)
    assert ("workloads.tasks.apply_workload", ("ws", workspace.pk)) in published
    assert workspace.idle_minutes == 60 and workspace.home_gb == 20
    assert workspace.image == "quay.io/jupyter/pytorch-notebook:cuda12-python-3.11"


def test_the_token_is_sealed_apart_and_never_audited(create):
    workspace = create()
    token = services.token_of(workspace)
    assert token and len(token) >= 40
    row = SecretEnv.objects.get(ref=workspace.ref)
    assert row.names == [] and token not in row.sealed  # not a name people see; encrypted at rest
    audited = AuditEvent.objects.get(action="workspace_created")
    assert audited.target == f"workspace {workspace.pk} (explore)" and token not in str(audited.details)


def test_the_team_policy_sets_priority_and_caps_the_idle_window(create, team):
    WorkspacePolicy.objects.create(team=team, default_priority=Priority.NORMAL, max_idle_minutes=30)
    workspace = create()
    assert (workspace.priority, workspace.idle_minutes) == (Priority.NORMAL, 30)
    with pytest.raises(ValidationError) as refused:
        create(name="long", idle_minutes=45)
    assert refused.value.message_dict == {"idle_minutes": ["At most 30 minutes in team ml-research (set by platform "
                                                           "staff)."]}
    assert create(name="low", priority="low", idle_minutes=10).priority == Priority.LOW


def test_it_queues_what_the_quota_cannot_take_with_the_usual_reason(create):
    create(name="one"), create(name="two")
    third = create(name="three")
    assert third.state == WorkspaceState.QUEUED
    assert third.reason == "waiting for quota: needs 1× a100-1g.10gb, 2 of 2 in use"
    assert QueuedRequest.objects.get(ref=third.ref).priority == Priority.HIGH.rank


@pytest.mark.parametrize(("fields", "errors"), [
    ({"name": "Bad_Name"}, {"name"}),
    ({"flavor": "nope"}, {"flavor"}),
    ({"home_gb": 0, "idle_minutes": 0, "cpu": "x"}, {"home_gb", "idle_minutes", "cpu"}),
    ({"env": {"JUPYTER_TOKEN": "mine"}}, {"env"}),
    ({"volumes": [{"claim": "data", "mount_path": "/home/jovyan"}]}, {"volumes"}),
    ({"priority": "urgent", "shape": 1}, {"priority", "non_field_errors"}),
    ({"flavor": "t4-ts4", "gpus": 2}, {"gpus"}),  # a shared GPU's pod takes one unit
    ({"flavor": "a100-80gb", "gpus": 2}, {"gpus"}),  # more than the team's quota
])
def test_bad_input_is_a_field_error_and_writes_nothing(create, fields, errors):
    with pytest.raises(ValidationError) as refused:
        create(**fields)
    assert set(refused.value.message_dict) == errors
    assert not Workspace.objects.exists() and not SecretEnv.objects.exists()


def test_a_name_is_taken_while_unfinished(create):
    create()
    with pytest.raises(ValidationError) as refused:
        create()
    assert "already has a workspace named 'explore'" in refused.value.message_dict["name"][0]


def test_access_needs_a_member_of_the_team(create, viewer, outsider, team):
    with pytest.raises(PermissionDenied):
        services.create_workspace(viewer, team, {"name": "x", "flavor": "a100-1g.10gb"})
    with pytest.raises(Http404):
        services.create_workspace(outsider, team, {"name": "x", "flavor": "a100-1g.10gb"})
    workspace = create()
    with pytest.raises(Http404):
        services.get_workspace_for_user(outsider, workspace.pk)


def test_it_is_billed_only_while_its_pod_runs(create, fake_backend):
    workspace = create()
    assert apply_workload("ws", workspace.pk) == "applied"
    kinds_applied = [obj["kind"] for obj in fake_backend.applied[-1]]
    assert kinds_applied[-5:] == ["PersistentVolumeClaim", "NetworkPolicy", "Deployment", "Service", "Ingress"]
    workspace.refresh_from_db()
    assert workspace.state == WorkspaceState.STARTING and workspace.open_units == 0

    ns, name = workspace.namespace, workspace.object_name
    t0 = timezone.now().replace(microsecond=0)
    stamp = t0.strftime("%Y-%m-%dT%H:%M:%SZ")
    deployment = fake_backend.objects[(ns, "Deployment", name)]
    deployment["status"] = {"readyReplicas": 1, "conditions": [
        {"type": "Available", "status": "True", "lastTransitionTime": stamp}]}
    fake_backend.pod_lists[(ns, name)] = [{
        "kind": "Pod", "metadata": {"name": f"{name}-abc"},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}]
    report = rec.reconcile(fake_backend, now=t0 + timedelta(seconds=5))
    assert (workspace.ref, "starting", "running") in report.transitions
    workspace.refresh_from_db()
    assert (workspace.state, workspace.open_units, workspace.started_at) == (WorkspaceState.RUNNING, 1, t0)
    # One MIG slice for an hour: its unit-hour's price (the one price function), and nothing before it ran.
    assert workspace.cost_at(t0 + timedelta(hours=1)) == workspace.unit_price() > Decimal(0)
    assert workspace.cost_at(t0) == Decimal(0)
