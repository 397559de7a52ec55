"""Who reaches a workspace's Jupyter server: the ``/workspaces/auth/`` endpoint (the ingress controller's
``auth-url``) and the portal's "Open". The owner; the team's admins once the owner shares it; never a
teammate otherwise (403); never anyone outside the team (404, as for a workspace that does not exist)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from teams.models import AuditEvent
from workspaces import services

pytestmark = pytest.mark.django_db
AUTH = reverse("workspaces:workspace-auth")


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def ask(client: Client, workspace_id) -> object:
    return client.get(AUTH, {"workspace": workspace_id})


def test_the_owner_is_let_in_with_the_token_for_the_jupyter_server(create, member):
    workspace = create()
    response = ask(signed_in(member), workspace.pk)
    assert response.status_code == 200
    assert response["Authorization"] == f"token {services.token_of(workspace)}"
    assert "no-store" in response["Cache-Control"]


def test_without_a_session_it_answers_401(create):
    workspace = create()
    response = ask(Client(), workspace.pk)
    assert response.status_code == 401 and "Authorization" not in response


def test_a_teammate_is_refused_and_an_admin_only_once_shared(create, member, viewer, team_admin, team):
    workspace = create()
    assert ask(signed_in(viewer), workspace.pk).status_code == 403
    admin = signed_in(team_admin)
    assert ask(admin, workspace.pk).status_code == 403
    services.set_shared(member, workspace, True)
    assert ask(admin, workspace.pk).status_code == 200
    assert ask(signed_in(viewer), workspace.pk).status_code == 403  # shared with admins, not with everyone
    services.set_shared(member, workspace, False)
    assert ask(admin, workspace.pk).status_code == 403


def test_outside_the_team_it_is_as_if_it_did_not_exist(create, outsider, staff):
    workspace = create()
    for client in (signed_in(outsider), signed_in(staff)):
        answers = {ask(client, workspace.pk).status_code, ask(client, workspace.pk + 1000).status_code,
                   ask(client, "x").status_code, ask(client, "").status_code}
        assert answers == {404}


def test_only_the_owner_shares_it(create, team_admin):
    workspace = create()
    with pytest.raises(services.PermissionDenied):
        services.set_shared(team_admin, workspace, True)


def test_open_hands_the_way_in_only_to_those_allowed(create, member, viewer, outsider):
    workspace = create()
    open_path = reverse("workspaces:workspace-open", args=[workspace.pk])
    assert signed_in(outsider).get(open_path).status_code == 404
    assert signed_in(viewer).get(open_path).status_code == 403
    # The owner: not running yet, so back to its page with why (no address handed out).
    response = signed_in(member).get(open_path)
    assert response.status_code == 302 and response["Location"] == workspace.get_absolute_url()
    assert not AuditEvent.objects.filter(action="workspace_opened").exists()


def test_the_token_is_in_no_page_list_or_audit_entry(create, member, team_admin, client):
    workspace = create()
    token = services.token_of(workspace)
    client.force_login(member)
    pages = [client.get(reverse("workspaces:workspace-list")), client.get(workspace.get_absolute_url()),
             client.get(reverse("workspaces:workspace-state", args=[workspace.pk]))]
    assert all(page.status_code == 200 for page in pages)
    assert not any(token in page.content.decode() for page in pages)
    services.pause_by_user(member, workspace)
    services.resume(member, workspace)
    assert not any(token in str(row.details) + row.target for row in AuditEvent.objects.all())
