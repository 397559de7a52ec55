"""Portal pages: login/logout, the team switcher, the API tokens page, dashboard, navigation."""

from __future__ import annotations

import pytest
from django.urls import reverse

from teams.middleware import SESSION_KEY
from teams.models import ApiToken, AuditEvent, Role
from teams.services import create_api_token
from tests.factories import add_member, make_team

PASSWORD = "pw-Slipway-123"  # tests.factories.make_user's default


# -- login / logout -----------------------------------------------------------------------


def test_it_shows_the_login_form(client, db):
    response = client.get("/login/")
    assert response.status_code == 200
    assert b'name="username"' in response.content and b'name="password"' in response.content


def test_it_logs_in_and_audits_the_login(client, member):
    response = client.post("/login/", {"username": "mia", "password": PASSWORD}, REMOTE_ADDR="10.0.0.5")
    assert response.status_code == 302 and response.url == reverse("dashboard")
    event = AuditEvent.objects.get(action=AuditEvent.Action.LOGIN)
    assert (event.actor, event.actor_name, event.ip_address) == (member, "mia", "10.0.0.5")


@pytest.mark.parametrize(("proxies", "forwarded", "remote", "recorded"), [
    (0, "203.0.113.7", "10.0.0.5", "10.0.0.5"),  # no proxy trusted: the header is the client's word
    (1, "203.0.113.7", "10.0.0.5", "203.0.113.7"),  # behind an ingress: the address it saw
    (1, "6.6.6.6, 203.0.113.7", "10.0.0.5", "203.0.113.7"),  # a forged entry on the left is ignored
    (2, "203.0.113.7, 10.1.0.1", "10.0.0.5", "203.0.113.7"),  # a load balancer and an ingress
    (2, "203.0.113.7", "10.0.0.5", "10.0.0.5"),  # fewer hops than proxies: not trustworthy
    (1, "not-an-ip", "10.0.0.5", None),  # garbage is recorded as unknown, not stored
    (("10.0.0.0/24",), "203.0.113.7", "10.0.0.5", "203.0.113.7"),  # from a listed proxy: honoured
    (("10.0.0.0/24",), "203.0.113.7", "192.0.2.1", "192.0.2.1"),  # straight to the pod: ignored
    (("10.0.0.0/24", "10.1.0.0/16"), "6.6.6.6, 203.0.113.7, 10.1.0.1", "10.0.0.5", "203.0.113.7"),  # two proxies
    (("10.0.0.0/24",), "10.0.0.9", "10.0.0.5", "10.0.0.9"),  # only proxies on the way: the left-most
])
def test_it_audits_the_client_address_behind_trusted_proxies(client, member, settings, proxies, forwarded, remote,
                                                              recorded):
    settings.SLIPWAY_TRUSTED_PROXIES = proxies
    client.post("/login/", {"username": "mia", "password": PASSWORD}, REMOTE_ADDR=remote,
                HTTP_X_FORWARDED_FOR=forwarded)
    assert AuditEvent.objects.get(action=AuditEvent.Action.LOGIN).ip_address == recorded


def test_it_refuses_a_wrong_password_and_audits_the_failure(client, member):
    response = client.post("/login/", {"username": "mia", "password": "nope"}, REMOTE_ADDR="10.0.0.9")
    assert response.status_code == 200
    assert b"role=\"alert\"" in response.content
    assert "_auth_user_id" not in client.session
    event = AuditEvent.objects.get(action=AuditEvent.Action.LOGIN_FAILED)
    assert (event.actor, event.actor_name, event.ip_address) == (None, "mia", "10.0.0.9")
    assert "nope" not in str(event.details)


def test_it_audits_a_failed_login_for_an_unknown_name(client, db):
    client.post("/login/", {"username": "mallory", "password": "x"})
    assert AuditEvent.objects.filter(action=AuditEvent.Action.LOGIN_FAILED, actor_name="mallory").count() == 1


def test_it_audits_failed_admin_console_logins_too(client, staff):
    client.post("/admin/login/", {"username": "sam", "password": "wrong"})
    assert AuditEvent.objects.filter(action=AuditEvent.Action.LOGIN_FAILED, actor_name="sam").exists()


def test_it_sends_a_logged_in_user_from_the_login_page_to_the_dashboard(client, member):
    client.force_login(member)
    response = client.get("/login/")
    assert response.status_code == 302 and response.url == reverse("dashboard")


def test_it_follows_a_safe_next_after_login(client, member):
    response = client.post("/login/", {"username": "mia", "password": PASSWORD, "next": "/tokens/"})
    assert response.url == "/tokens/"
    client.logout()
    response = client.post("/login/", {"username": "mia", "password": PASSWORD, "next": "https://evil.example/"})
    assert response.url == reverse("dashboard")


def test_it_logs_out_on_post_only(client, member):
    client.force_login(member)
    assert client.get("/logout/").status_code == 405
    assert "_auth_user_id" in client.session
    response = client.post("/logout/")
    assert response.status_code == 302 and response.url == reverse("login")
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize("url", ["/", "/tokens/", "/endpoints/"])
def test_it_sends_anonymous_visitors_to_login(client, db, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response.url == f"{reverse('login')}?next={url}"


@pytest.mark.parametrize(("method", "url"), [("post", "/team/switch/"), ("post", "/tokens/1/revoke/")])
def test_it_sends_anonymous_writes_to_login(client, db, method, url):
    assert getattr(client, method)(url).status_code == 302
    assert not AuditEvent.objects.exclude(action=AuditEvent.Action.LOGIN_FAILED).exists()


# -- page frame: navigation, team switcher, static assets -------------------------------
# Checked on portal pages (the dashboard itself belongs to the jobs app).


def test_it_shows_the_current_team_and_role_in_the_switcher(client, member):
    client.force_login(member)
    html = client.get("/endpoints/").content.decode()
    assert '<option value="ml-research" selected>ML Research (member)</option>' in html
    assert '<span class="username">mia</span>' in html


def test_it_hides_the_switcher_from_a_user_without_a_team(client, staff):
    client.force_login(staff)
    html = client.get("/endpoints/").content.decode()
    assert 'id="team-select"' not in html


def test_it_refuses_posts_to_read_only_pages(client, member):
    client.force_login(member)
    assert client.post("/endpoints/").status_code == 405


def test_it_links_the_endpoints_pages(client, member):
    client.force_login(member)
    response = client.get("/endpoints/")
    assert response.status_code == 200
    assert b'href="/endpoints/"' in response.content


def test_it_renders_the_navigation_with_the_current_page_marked(client, member):
    client.force_login(member)
    html = client.get("/tokens/").content.decode()
    assert '<a href="/">Dashboard</a>' in html
    assert '<a href="/tokens/" aria-current="page">API tokens</a>' in html
    assert '<a href="/endpoints/">Endpoints</a>' in html
    assert '<a href="/runs/">Runs</a>' in html  # the jobs app's list, once its URLs are included
    assert "/admin/" not in html  # the Admin link is for staff


def test_it_links_only_pages_that_exist(client, member, monkeypatch):
    from front import context_processors
    from workloads.registry import NavItem

    monkeypatch.setattr(context_processors, "NAV_ITEMS", (NavItem("Dashboard", "dashboard", 0),
                                                          NavItem("Nowhere", "no-such-page", 1)))
    client.force_login(member)
    html = client.get("/tokens/").content.decode()
    assert "Dashboard" in html and "Nowhere" not in html


def test_it_links_the_admin_console_for_staff(client, staff):
    client.force_login(staff)
    assert '<a href="/admin/">Admin</a>' in client.get("/tokens/").content.decode()


def test_it_serves_htmx_and_css_from_static_files_with_csrf_headers(client, member):
    client.force_login(member)
    html = client.get("/endpoints/").content.decode()
    assert '<script src="/static/vendor/htmx.min.js" defer></script>' in html
    assert 'href="/static/css/slipway.css"' in html
    assert "hx-headers='{\"X-CSRFToken\": \"" in html
    assert "http://" not in html and "https://" not in html and 'src="//' not in html


def test_it_shows_flash_messages(client, member):
    token, _raw = create_api_token(member, "ci")
    client.force_login(member)
    client.post(f"/tokens/{token.pk}/revoke/")
    html = client.get("/endpoints/").content.decode()
    assert '<li class="message success">Token “ci” revoked.</li>' in html


def test_it_renders_the_page_frame_in_a_constant_number_of_queries(client, django_assert_num_queries, member):
    client.force_login(member)
    # session, user, current membership, the switcher's teams, and the (empty) endpoints list:
    # its access check and its count
    with django_assert_num_queries(6):
        assert client.get("/endpoints/").status_code == 200
    for i in range(8):
        add_member(make_team(f"extra-{i}"), member, Role.VIEWER)
    with django_assert_num_queries(6):
        assert client.get("/endpoints/").status_code == 200


# -- team switcher ------------------------------------------------------------------------


def test_it_switches_to_another_team_of_the_user(client, member, other_team):
    add_member(other_team, member, Role.VIEWER)
    client.force_login(member)
    response = client.post("/team/switch/", {"team": "vision", "next": "/tokens/"})
    assert response.status_code == 302 and response.url == "/tokens/"
    assert client.session[SESSION_KEY] == "vision"
    html = client.get("/endpoints/").content.decode()
    assert '<option value="vision" selected>Vision (viewer)</option>' in html
    assert '<option value="ml-research">ML Research (member)</option>' in html


def test_it_answers_404_when_switching_to_someone_elses_team(client, member, other_team):
    client.force_login(member)
    assert client.post("/team/switch/", {"team": "vision"}).status_code == 404
    assert client.post("/team/switch/", {"team": "no-such-team"}).status_code == 404
    assert SESSION_KEY not in client.session


def test_it_never_redirects_off_site_after_a_switch(client, member):
    client.force_login(member)
    response = client.post("/team/switch/", {"team": "ml-research", "next": "https://evil.example/"})
    assert response.url == reverse("dashboard")


def test_it_refuses_get_on_the_team_switcher(client, member):
    client.force_login(member)
    assert client.get("/team/switch/").status_code == 405


def test_it_falls_back_to_a_remaining_team_when_the_chosen_one_is_gone(client, member, other_team):
    membership = add_member(other_team, member, Role.VIEWER)
    client.force_login(member)
    client.post("/team/switch/", {"team": "vision"})
    membership.delete()
    html = client.get("/endpoints/").content.decode()
    assert '<option value="ml-research" selected>ML Research (member)</option>' in html
    assert "Vision" not in html


# -- API tokens page ----------------------------------------------------------------------


def test_it_lists_the_users_tokens_by_prefix_only(client, member, outsider):
    _mine, raw = create_api_token(member, "laptop")
    create_api_token(outsider, "their-token")
    client.force_login(member)
    response = client.get("/tokens/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "laptop" in html and f"{raw[:10]}…" in html
    assert raw not in html
    assert "their-token" not in html


def test_it_shows_a_new_token_exactly_once(client, member):
    client.force_login(member)
    response = client.post("/tokens/", {"name": "ci", "expires_days": "30"})
    assert response.status_code == 200
    token = ApiToken.objects.get(user=member)
    raw = response.context["new_token"]
    assert raw.startswith(token.key_prefix) and f'<pre class="token" id="new-token">{raw}</pre>' in response.content.decode()
    assert "no-store" in response["Cache-Control"]  # no copy in any cache
    assert token.expires_at is not None
    assert raw not in client.get("/tokens/").content.decode()


def test_it_rerenders_the_form_with_errors(client, member):
    client.force_login(member)
    response = client.post("/tokens/", {"name": "", "expires_days": "0"})
    assert response.status_code == 200
    assert response.context["new_token"] is None
    assert set(response.context["form"].errors) == {"name", "expires_days"}
    assert not ApiToken.objects.exists()


def test_it_refuses_other_methods_on_the_tokens_page(client, member):
    client.force_login(member)
    assert client.put("/tokens/").status_code == 405
    assert client.delete("/tokens/").status_code == 405


def test_it_revokes_a_token_with_a_plain_post(client, member):
    token, _raw = create_api_token(member, "ci")
    client.force_login(member)
    response = client.post(f"/tokens/{token.pk}/revoke/", follow=True)
    assert response.redirect_chain == [("/tokens/", 302)]
    token.refresh_from_db()
    assert token.revoked_at is not None
    html = response.content.decode()
    assert "Token “ci” revoked." in html and "revoked</span>" in html


def test_it_revokes_a_token_through_htmx_with_just_the_row(client, member):
    token, _raw = create_api_token(member, "ci")
    client.force_login(member)
    response = client.post(f"/tokens/{token.pk}/revoke/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode().strip()
    assert html.startswith(f'<tr id="token-{token.pk}">') and html.endswith("</tr>")
    assert "revoked</span>" in html and "hx-post" not in html  # nothing left to revoke
    assert "<html" not in html
    token.refresh_from_db()
    assert token.revoked_at is not None
    # No stale flash message waits for the next full page.
    assert "revoked." not in client.get("/tokens/").content.decode()


def test_it_answers_404_for_someone_elses_token(client, member, outsider):
    theirs, _raw = create_api_token(outsider, "theirs")
    client.force_login(member)
    assert client.post(f"/tokens/{theirs.pk}/revoke/").status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_it_refuses_get_on_revoke(client, member):
    token, _raw = create_api_token(member, "ci")
    client.force_login(member)
    assert client.get(f"/tokens/{token.pk}/revoke/").status_code == 405
    token.refresh_from_db()
    assert token.revoked_at is None


def test_it_needs_the_csrf_token_to_revoke(member):
    from django.test import Client

    token, _raw = create_api_token(member, "ci")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(member)
    assert strict.post(f"/tokens/{token.pk}/revoke/").status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None
