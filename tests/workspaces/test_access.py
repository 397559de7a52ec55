"""Who reaches a workspace's Jupyter server, and by what: its own host and cookie, never the portal's session.

The ``/workspaces/auth/`` endpoint (the ingress controller's ``auth-url``) answers by the workspace's cookie,
which a one-use ticket from the portal's "Open" is exchanged for: the owner; the team's admins once the owner
shares it; never a teammate otherwise (403); never anyone outside the team (404, as for a workspace that does not
exist, or one deleted); 409 from the check for one that does not run, which the ingress hears as 403. A rotated
token (unshared, a member left, resumed) ends every ticket and cookie issued before.
"""

from __future__ import annotations

from unittest import mock
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core import checks
from django.test import Client
from django.urls import reverse

from teams import sso
from teams.models import AuditEvent, GroupMapping, Membership, Role
from teams.services import change_role, remove_member
from tests.factories import add_member, make_user
from workspaces import access, services
from workspaces.checks import host_problems
from workspaces.constants import WorkspaceState
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db
AUTH = reverse("workspaces:workspace-auth")
ORIGINAL = "https://ws-{pk}.notebooks.slipway.example.com/notebooks/ws-{pk}/"


def running(workspace) -> Workspace:
    Workspace.objects.filter(pk=workspace.pk).update(state=WorkspaceState.RUNNING)
    workspace.refresh_from_db()
    return workspace


def ticket_for(user, workspace) -> str:
    """What the portal's Open puts in the address it sends ``user`` to (:func:`services.open_url`)."""
    return access.issue_ticket(user, workspace.pk, access.credentials(workspace)[1])


def exchange(workspace, ticket: str, client: Client | None = None):
    """The ingress controller's first auth-url call on the workspace host: the ticket in X-Original-URL."""
    client = client or Client()
    original = f"{ORIGINAL.format(pk=workspace.pk)}?{access.TICKET_PARAM}={ticket}"
    return client.get(AUTH, {"workspace": workspace.pk}, HTTP_X_ORIGINAL_URL=original)


def cookie_client(user, workspace) -> Client:
    """A browser on the workspace's host holding the cookie the exchange set (and no portal cookie)."""
    client = Client()
    response = exchange(workspace, ticket_for(user, workspace), client)
    assert response.status_code == 200, response.status_code
    return client


def ask(client: Client, workspace_id):
    return client.get(AUTH, {"workspace": workspace_id}, HTTP_X_ORIGINAL_URL=ORIGINAL.format(pk=workspace_id))


def test_the_portal_session_opens_nothing(create, member):
    """Issue 46 B1: the auth-url let any request carrying the portal's session cookie through, so workspaces had to be
    served where that cookie goes: the owner's container received a visiting admin's sessionid and csrftoken."""
    workspace = running(create())
    portal = Client()
    portal.force_login(member)  # the owner, signed in to the portal: its cookies are not the workspace's
    response = ask(portal, workspace.pk)
    assert response.status_code == 401 and "Authorization" not in response


def test_a_ticket_is_exchanged_once_for_a_host_only_httponly_cookie(create, member):
    workspace = running(create())
    ticket = ticket_for(member, workspace)
    browser = Client()
    response = exchange(workspace, ticket, browser)
    assert response.status_code == 200
    assert response["Authorization"] == f"token {services.token_of(workspace)}"
    assert "no-store" in response["Cache-Control"]
    cookie = response.cookies[access.SECURE_COOKIE]  # over https: __Host- (Secure, Path=/, no Domain)
    assert cookie["secure"] and cookie["httponly"] and cookie["path"] == "/" and not cookie["domain"]
    assert cookie["samesite"] == "Lax" and int(cookie["max-age"]) == 3600
    assert services.token_of(workspace) not in cookie.value  # it names no secret
    # Every later request: by that cookie.
    assert ask(browser, workspace.pk).status_code == 200
    # The ticket is spent: a second exchange (a replay from a log, a history) opens nothing.
    assert exchange(workspace, ticket).status_code == 401
    # A ticket or cookie is good for its own workspace only.
    other = running(create(name="other"))
    assert exchange(other, ticket_for(member, workspace)).status_code == 401
    browser.cookies[access.SECURE_COOKIE] = cookie.value
    assert ask(browser, other.pk).status_code == 401


def test_a_forged_or_stale_ticket_opens_nothing(create, member, settings):
    workspace = running(create())
    assert exchange(workspace, "x" + ticket_for(member, workspace)).status_code == 401
    assert exchange(workspace, "").status_code == 401
    assert services.authorize(workspace.pk, ticket=ticket_for(member, workspace)).status == 200
    # A cookie past its lifetime.
    settings.SLIPWAY_WORKSPACE_COOKIE_SECONDS = -1
    value = access.make_cookie(member, workspace.pk, access.credentials(workspace)[1])
    assert services.authorize(workspace.pk, cookie=value).status == 401


def test_a_teammate_is_refused_and_an_admin_only_once_shared(create, member, viewer, team_admin):
    workspace = running(create())
    assert exchange(workspace, ticket_for(viewer, workspace)).status_code == 403
    assert exchange(workspace, ticket_for(team_admin, workspace)).status_code == 403
    services.set_shared(member, workspace, True)
    admin = cookie_client(team_admin, workspace)
    assert ask(admin, workspace.pk).status_code == 200
    assert exchange(workspace, ticket_for(viewer, workspace)).status_code == 403  # shared with admins only
    services.set_shared(member, workspace, False)
    assert ask(admin, workspace.pk).status_code == 403  # refused at once, on the next request
    assert exchange(workspace, ticket_for(team_admin, workspace)).status_code == 403
    # And the cookie is spent for good: shared again, it opens nothing (its token was rotated meanwhile).
    services.set_shared(member, workspace, True)
    assert ask(admin, workspace.pk).status_code == 401


def test_outside_the_team_it_is_as_if_it_did_not_exist(create, outsider, staff):
    workspace = running(create())
    for user in (outsider, staff):
        answers = {exchange(workspace, ticket_for(user, workspace)).status_code,
                   services.authorize(workspace.pk + 1000, ticket=access.issue_ticket(user, workspace.pk + 1000, "")).status,
                   services.authorize("x", ticket="x").status, services.authorize("").status}
        assert answers <= {404, 401} and 404 in answers


def test_deleted_is_404_and_not_running_is_409_which_the_ingress_hears_as_403(create, member):
    """Issue 46 B3: the auth-url answered 200 for paused and deleted workspaces."""
    workspace = running(create())
    browser = cookie_client(member, workspace)
    Workspace.objects.filter(pk=workspace.pk).update(state=WorkspaceState.PAUSED)
    value = browser.cookies[access.SECURE_COOKIE].value
    assert services.authorize(workspace.pk, cookie=value).status == 409
    assert ask(browser, workspace.pk).status_code == 403  # ingress-nginx knows 2xx, 401, 403 only
    for state in (WorkspaceState.DELETING, WorkspaceState.DELETED):
        Workspace.objects.filter(pk=workspace.pk).update(state=state)
        assert services.authorize(workspace.pk, cookie=value).status == 404
        assert ask(browser, workspace.pk).status_code == 404


def test_a_cookie_ends_with_a_password_change_and_an_inactive_user(create, member):
    workspace = running(create())
    browser = cookie_client(member, workspace)
    member.set_password("another secret 123")
    member.save()
    assert ask(browser, workspace.pk).status_code == 401
    browser = cookie_client(member, workspace)
    type(member).objects.filter(pk=member.pk).update(is_active=False)
    assert ask(browser, workspace.pk).status_code == 401


def test_a_member_who_leaves_keeps_no_way_in(create, member, team_admin, team):
    """Issue 46 B2: the Jupyter token was never rotated; now whoever could open it before cannot after."""
    workspace = running(create())
    services.set_shared(member, workspace, True)
    admin = cookie_client(team_admin, workspace)
    before = services.token_of(workspace)
    Membership.objects.filter(team=team, user=team_admin).delete()
    assert services.token_of(workspace) != before
    assert ask(admin, workspace.pk).status_code == 404  # outside the team now
    # Back in the team, the cookie of before stays spent (the token it was issued under is gone).
    Membership.objects.create(team=team, user=team_admin, role="admin")
    assert ask(admin, workspace.pk).status_code == 401
    # The owner's own ways in are renewed with a new ticket.
    assert ask(cookie_client(member, workspace), workspace.pk).status_code == 200


def test_an_admin_who_loses_the_role_keeps_no_way_into_the_shared_workspaces(create, member, team_admin, team):
    """Review: demoted on the Team page, an admin kept the shared workspace's token they could read in JupyterLab's
    page. Now the demotion rotates it; a role change that takes no way in (the owner to viewer, a promotion) and
    the demoted admin's removal afterwards, which takes nothing more, rotate nothing."""
    bea = make_user("bea")
    add_member(team, bea, Role.ADMIN)
    workspace = running(create())
    services.set_shared(member, workspace, True)
    admin = cookie_client(team_admin, workspace)
    before = services.token_of(workspace)
    change_role(bea, Membership.objects.get(user=team_admin), Role.MEMBER)
    demoted = services.token_of(workspace)
    assert demoted != before
    assert ask(admin, workspace.pk).status_code == 403  # refused by the rule at once
    change_role(bea, Membership.objects.get(user=team_admin), Role.ADMIN)
    assert ask(admin, workspace.pk).status_code == 401  # admin again, the cookie of before stays spent
    assert services.token_of(workspace) == demoted  # a promotion takes nobody's way in
    change_role(bea, Membership.objects.get(user=team_admin), Role.VIEWER)
    demoted_again = services.token_of(workspace)
    assert demoted_again != demoted
    change_role(bea, Membership.objects.get(user=member), Role.VIEWER)  # the owner still opens their own
    remove_member(bea, Membership.objects.get(user=team_admin))  # no way in left to close
    assert services.token_of(workspace) == demoted_again
    assert ask(cookie_client(member, workspace), workspace.pk).status_code == 200


def test_single_sign_ons_sync_that_demotes_an_admin_rotates_the_shared_workspaces_token(create, member, team):
    """Review: an admin moved out of the admins' group at the provider kept the shared workspace's token."""
    GroupMapping.objects.create(claim_value="ml-admins", team=team, role=Role.ADMIN)
    GroupMapping.objects.create(claim_value="ml", team=team, role=Role.MEMBER)
    boss = make_user("boss")
    sso.sync_memberships(boss, {"groups": ["ml-admins"]})
    workspace = running(create())
    services.set_shared(member, workspace, True)
    assert cookie_client(boss, workspace)
    before = services.token_of(workspace)
    sso.sync_memberships(boss, {"groups": ["ml"]})
    assert Membership.objects.get(user=boss).role == Role.MEMBER
    assert services.token_of(workspace) != before


@pytest.mark.parametrize("moved", ["user", "team"])
def test_a_membership_moved_in_the_admin_console_closes_its_old_persons_way_in(
        create, member, team, other_team, staff_client, moved):
    """Review: staff editing a membership to name another person or team (no delete) left its old person's
    workspace token working, though they were out of the team."""
    workspace = running(create())
    browser = cookie_client(member, workspace)
    before = services.token_of(workspace)
    membership = Membership.objects.get(user=member)
    fields = {"team": team.pk, "user": member.pk, "role": Role.MEMBER, "source": "manual"}
    fields[moved] = make_user("newbie").pk if moved == "user" else other_team.pk
    response = staff_client.post(reverse("admin:portal_membership_change", args=[membership.pk]), fields)
    assert response.status_code == 302, response.content[:2000]
    assert not Membership.objects.filter(team=team, user=member).exists()
    assert services.token_of(workspace) != before
    Membership.objects.create(team=team, user=member, role=Role.MEMBER)  # back in the team: the cookie stays spent
    assert ask(browser, workspace.pk).status_code == 401


@pytest.mark.parametrize("original", ["https://[ws-1.example/notebooks/ws-1/?slipway-ticket=x", "http://ws]1/"])
def test_an_unreadable_original_address_is_a_refusal_not_a_500(create, member, original):
    """Review: ``/workspaces/auth/`` answers without credentials, and urllib raised on a malformed
    ``X-Original-URL`` (a 500). Read as an address with no ticket, the answer is the cookie's."""
    workspace = running(create())
    response = Client().get(AUTH, {"workspace": workspace.pk}, HTTP_X_ORIGINAL_URL=original)
    assert response.status_code == 401
    browser = cookie_client(member, workspace)
    assert browser.get(AUTH, {"workspace": workspace.pk}, HTTP_X_ORIGINAL_URL=original).status_code == 200


def test_the_token_rotates_on_unshare_and_resume_and_not_otherwise(create, member, django_capture_on_commit_callbacks):
    workspace = create()
    first = services.token_of(workspace)
    services.set_shared(member, workspace, True)
    assert services.token_of(workspace) == first  # sharing takes nobody's way in
    services.set_shared(member, workspace, False)
    second = services.token_of(workspace)
    assert second != first
    services.set_shared(member, workspace, False)  # already unshared: nothing to take back
    assert services.token_of(workspace) == second
    services.pause_by_user(member, workspace)
    services.resume(member, workspace)
    assert services.token_of(workspace) not in (first, second)


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


def test_open_sends_the_owner_to_the_workspace_host_with_a_ticket_not_the_token(create, member, settings):
    """On a real cluster: ``https://ws-<id>.<SLIPWAY_WORKSPACE_HOST>``; the ticket is the only thing in the address."""
    workspace = running(create())
    settings.SLIPWAY_WORKSPACE_HOST = "notebooks.example.com"
    url = urlsplit(_real_cluster_open(member, workspace))
    assert (url.scheme, url.hostname, url.path) == ("https", f"ws-{workspace.pk}.notebooks.example.com",
                                                    f"/notebooks/ws-{workspace.pk}/lab")
    [ticket] = parse_qs(url.query)[access.TICKET_PARAM]
    assert services.token_of(workspace) not in url.geturl()
    assert services.authorize(workspace.pk, ticket=ticket).status == 200


def _real_cluster_open(user, workspace) -> str:
    """:func:`services.open_url` with the workspace on a real (not sandbox) cluster."""
    backend = mock.Mock()
    backend.name = "kubernetes"
    with mock.patch("workspaces.services.fleet.backend_at", return_value=backend):
        return services.open_url(user, workspace)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_token_is_in_no_page_list_or_audit_entry(create, member, client):
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


@pytest.mark.parametrize(("host", "portal", "cookie_domain", "refused"), [
    ("slipway.example.com", "https://slipway.example.com", None, True),  # the portal's own host
    ("Slipway.Example.com.", "https://slipway.example.com/", None, True),
    ("notebooks.example.com", "https://slipway.example.com", ".example.com", True),  # the session cookie covers it
    ("notebooks.example.com", "https://slipway.example.com", "notebooks.example.com", True),
    ("https://notebooks.example.com", "https://slipway.example.com", None, True),  # not a host name
    ("notebooks.example.com", "https://slipway.example.com", None, False),
    ("notebooks.slipway.example.com", "https://slipway.example.com", "slipway.example.com", True),
    ("notebooks.slipway.example.com", "https://slipway.example.com", None, False),
])
def test_a_workspace_host_where_the_portals_cookies_go_is_refused(host, portal, cookie_domain, refused):
    assert bool(host_problems(host, portal, (cookie_domain, None))) is refused


def test_the_system_check_stops_a_start_with_the_portals_host(settings):
    settings.SLIPWAY_PORTAL_URL = "https://slipway.example.com"
    settings.SLIPWAY_WORKSPACE_HOST = "slipway.example.com"
    assert [m.id for m in checks.run_checks(tags=[checks.Tags.security]) if m.id == "slipway.E004"] == ["slipway.E004"]


def test_a_cookie_in_use_is_renewed_so_its_lifetime_counts_from_its_last_use(create, member, monkeypatch):
    workspace = running(create())
    browser = cookie_client(member, workspace)
    fresh = ask(browser, workspace.pk)
    assert fresh.status_code == 200 and access.SECURE_COOKIE not in fresh.cookies  # young: not issued again
    now = access.time.time()
    monkeypatch.setattr(access.time, "time", lambda: now + access.REFRESH_SECONDS + 1)
    renewed = ask(browser, workspace.pk)
    assert renewed.status_code == 200 and renewed.cookies[access.SECURE_COOKIE].value
    found = access.read_cookie(renewed.cookies[access.SECURE_COOKIE].value, workspace.pk)
    assert found is not None and found.age < 1
