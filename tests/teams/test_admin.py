"""The staff-only admin console: access, audited membership changes, the read-only audit log."""

from __future__ import annotations

from types import SimpleNamespace

from django.contrib.auth.models import Permission

from teams.admin import audit_membership_changes
from teams.models import ApiToken, AuditEvent, Membership, Role
from teams.services import audit, create_api_token
from tests.factories import make_user


def test_it_keeps_non_staff_out_of_the_admin_console(client, team_admin):
    client.force_login(team_admin)  # a team admin is not platform staff
    response = client.get("/admin/")
    assert response.status_code == 302 and response.url.startswith("/admin/login/")
    assert client.get("/admin/portal/auditevent/").status_code == 302


def test_it_lists_teams_and_the_audit_log_for_staff(client, staff, team, member):
    audit(AuditEvent.Action.LOGIN_FAILED, username="mallory", ip="10.1.2.3")
    client.force_login(staff)
    assert client.get("/admin/portal/team/").status_code == 200
    response = client.get("/admin/portal/auditevent/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "mallory" in html and "10.1.2.3" in html


def test_it_audits_memberships_added_and_removed_in_the_admin(client, staff, team, outsider):
    client.force_login(staff)
    response = client.post("/admin/portal/membership/add/",
                           {"team": team.pk, "user": outsider.pk, "role": Role.VIEWER})
    assert response.status_code == 302, response.content
    membership = Membership.objects.get(team=team, user=outsider)
    client.post(f"/admin/portal/membership/{membership.pk}/delete/", {"post": "yes"})
    assert not Membership.objects.filter(pk=membership.pk).exists()
    events = AuditEvent.objects.filter(action=AuditEvent.Action.MEMBERSHIP_CHANGED).order_by("created_at")
    assert [(e.actor, e.team, e.target, e.details["change"]) for e in events] == [
        (staff, team, "otto", "added"), (staff, team, "otto", "removed")]


def test_it_keeps_the_audit_log_read_only(client, staff):
    event = audit(AuditEvent.Action.LOGIN_FAILED, username="mallory")
    client.force_login(staff)
    assert client.get("/admin/portal/auditevent/add/").status_code == 403
    client.post(f"/admin/portal/auditevent/{event.pk}/change/", {"target": "tampered"})
    client.post(f"/admin/portal/auditevent/{event.pk}/delete/", {"post": "yes"})
    event.refresh_from_db()
    assert event.target == ""


def test_it_lets_staff_revoke_but_not_create_tokens(client, staff, member):
    token, _raw = create_api_token(member, "ci")
    client.force_login(staff)
    assert client.get("/admin/portal/apitoken/add/").status_code == 403
    response = client.post("/admin/portal/apitoken/", {"action": "revoke", "_selected_action": [token.pk]})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert ApiToken.objects.usable().count() == 0
    assert AuditEvent.objects.filter(action=AuditEvent.Action.TOKEN_REVOKED, actor=staff).count() == 1


def test_a_staff_user_who_may_only_view_tokens_cannot_revoke_one(client, member):
    """Revoking is a change (docs/security.md "Staff roles": the model's change permission in the console):
    a staff user given view_apitoken alone reads the list, is offered no revoke and revokes nothing."""
    token, _raw = create_api_token(member, "ci")
    reader = make_user("vera")
    reader.is_staff = True
    reader.save(update_fields=["is_staff"])
    reader.user_permissions.add(Permission.objects.get(codename="view_apitoken"))
    client.force_login(reader)
    page = client.get("/admin/portal/apitoken/")
    assert page.status_code == 200 and 'value="revoke"' not in page.content.decode()
    client.post("/admin/portal/apitoken/", {"action": "revoke", "_selected_action": [token.pk]})
    token.refresh_from_db()
    assert token.revoked_at is None
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.TOKEN_REVOKED).exists()


def test_it_audits_each_membership_change_of_the_team_inline(rf, staff, team, member, viewer, outsider):
    # What TeamAdmin.save_formset hands over after saving the inline formset.
    added = Membership(team=team, user=outsider, role=Role.VIEWER)
    changed = Membership.objects.get(user=member)
    removed = Membership.objects.get(user=viewer)
    formset = SimpleNamespace(new_objects=[added], changed_objects=[(changed, ["role"])], deleted_objects=[removed])
    request = rf.post("/admin/portal/team/1/change/")
    request.user = staff
    audit_membership_changes(request, formset, team)
    events = AuditEvent.objects.filter(action=AuditEvent.Action.MEMBERSHIP_CHANGED).order_by("id")
    assert [(e.target, e.details) for e in events] == [
        ("otto", {"change": "added", "role": "viewer"}),
        ("mia", {"change": "changed", "role": "member", "fields": ["role"]}),
        ("vic", {"change": "removed"}),
    ]
    assert {e.actor_id for e in events} == {staff.pk}


def test_it_audits_each_membership_removed_by_delete_selected(client, staff, team, member, viewer):
    """Review: the changelist's "Delete selected" removed people with no audit event (its own page's delete had one)."""
    client.force_login(staff)
    chosen = list(Membership.objects.filter(user__in=[member, viewer]).values_list("pk", flat=True))
    response = client.post("/admin/portal/membership/", {"action": "delete_selected", "_selected_action": chosen,
                                                         "post": "yes"})
    assert response.status_code == 302
    assert not Membership.objects.filter(pk__in=chosen).exists()
    events = AuditEvent.objects.filter(action=AuditEvent.Action.MEMBERSHIP_CHANGED)
    assert sorted((e.actor, e.team, e.target, e.details["change"], e.details["role"]) for e in events) == [
        (staff, team, "mia", "removed", "member"), (staff, team, "vic", "removed", "viewer")]


def test_a_membership_changed_on_its_page_is_audited_with_what_it_replaced(client, staff, team, other_team, member):
    """Like the Team page's event, the admin console's names the role it replaced; a membership moved to another
    person or team names whom and which it was taken from."""
    client.force_login(staff)
    membership = Membership.objects.get(user=member)
    url = f"/admin/portal/membership/{membership.pk}/change/"
    assert client.post(url, {"team": team.pk, "user": member.pk, "role": Role.VIEWER, "source": "manual"}).status_code == 302
    newcomer = make_user("nina")
    assert client.post(url, {"team": other_team.pk, "user": newcomer.pk, "role": Role.VIEWER,
                             "source": "manual"}).status_code == 302
    events = AuditEvent.objects.filter(action=AuditEvent.Action.MEMBERSHIP_CHANGED).order_by("pk")
    assert [(e.team.slug, e.target, e.details) for e in events] == [
        (team.slug, "mia", {"change": "changed", "role": "viewer", "source": "manual", "old_role": "member"}),
        (other_team.slug, "nina", {"change": "changed", "role": "viewer", "source": "manual", "old_role": "viewer",
                                   "old_user": "mia", "old_team": team.slug}),
    ]
