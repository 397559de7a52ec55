"""The audit log's actions: the core ones and those each workload kind declares (no migration per kind)."""

from __future__ import annotations

import pytest
from django.test import Client

from reservations.constants import AUDIT_ACTIONS as RESERVATION_ACTIONS
from sweeps.constants import AUDIT_ACTIONS as SWEEP_ACTIONS
from teams import services
from teams.models import AuditEvent, audit_actions, declare_audit_actions
from workloads.registry import Announces, kinds

pytestmark = pytest.mark.django_db


def test_the_kinds_actions_join_the_core_ones_each_once():
    declared = {action: label for kind in kinds() for action, label in Announces.of(kind).audit_actions.items()}
    assert declared["workspace_paused"] == "Workspace paused"
    # Reservations and sweeps (not kinds) declare theirs from their apps too.
    assert audit_actions() == {**dict(AuditEvent.Action.choices), **declared, **RESERVATION_ACTIONS, **SWEEP_ACTIONS}
    with pytest.raises(ValueError, match="declared twice"):
        declare_audit_actions({AuditEvent.Action.LOGIN: "Something else"})
    with pytest.raises(ValueError, match="longer than its column"):
        declare_audit_actions({"x" * 41: "Too long"})
    declare_audit_actions({"workspace_paused": "Workspace paused"})  # the same again: a re-registration


def test_an_undeclared_action_is_refused_and_nothing_written():
    with pytest.raises(ValueError, match="unknown audit action"):
        services.audit("workspace_exploded", target="ws:1")
    assert not AuditEvent.objects.filter(action="workspace_exploded").exists()


def test_the_admin_shows_and_filters_a_kinds_action_by_its_label(staff):
    services.audit("workspace_paused", actor=staff, target="ws:7")
    services.audit(AuditEvent.Action.LOGIN, actor=staff)
    client = Client()
    client.force_login(staff)
    html = client.get("/admin/portal/auditevent/?action=workspace_paused").content.decode()
    assert "Workspace paused" in html and "ws:7" in html and "Logged in" not in html.split("</table>")[0]
