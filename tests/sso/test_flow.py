"""Single sign-on end to end over HTTP: a live Slipway, a real OpenID provider on 127.0.0.1, a client that
follows redirects. Discovery, the redirect, the code exchange, the ID token's checks, the group sync, logout;
and every kind of bad answer from the provider ending on a page that says what went wrong (never a 500).
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model

from teams.models import AuditEvent, GroupMapping, Membership, Role
from teams.sso import SYNC_REASON
from tests.factories import add_member, make_team, make_user
from tests.sso.conftest import CLIENT_ID, reason
from tests.sso.provider import expired, issued_by, issued_for


def test_a_new_person_signs_in_and_finds_their_teams_then_follows_their_groups(sso, person):
    ml, vision, infra = make_team("ml"), make_team("vision"), make_team("infra")
    GroupMapping.objects.create(claim_value="gpu-ml", team=ml, role=Role.MEMBER)
    GroupMapping.objects.create(claim_value="gpu-vision", team=vision, role=Role.VIEWER)
    GroupMapping.objects.create(claim_value="gpu-leads", team=vision, role=Role.ADMIN)
    sso.set_user("u-1001", preferred_username="dana", email="dana@example.com", name="Dana Scully",
                 groups=["gpu-ml", "gpu-vision", "staff-lunch"])

    login_page = person.http.get(f"{person.base}/login/", timeout=10)
    assert "Sign in with Example ID" in login_page.text
    # The button posts to Slipway, which redirects to the authorization endpoint its discovery found.
    token = person.csrf()
    start = person.http.post(f"{person.base}/accounts/oidc/slipway/login/", data={"csrfmiddlewaretoken": token},
                             allow_redirects=False, timeout=10)
    assert start.status_code == 302
    authorize = urlparse(start.headers["Location"])
    query = parse_qs(authorize.query)
    assert f"{authorize.scheme}://{authorize.netloc}{authorize.path}" == f"{sso.issuer}/oauth2/authorize"
    assert query["client_id"] == [CLIENT_ID] and query["response_type"] == ["code"]
    assert "openid" in query["scope"][0].split() and query["code_challenge_method"] == ["S256"]
    assert query["redirect_uri"] == [f"{person.base}/accounts/oidc/slipway/login/callback/"]

    landed = person.sign_in("u-1001")
    assert landed.status_code == 200 and landed.url == f"{person.base}/"
    dana = get_user_model().objects.get(username="dana")
    assert (dana.email, dana.first_name, dana.last_name, dana.has_usable_password()) == (
        "dana@example.com", "Dana", "Scully", False)
    assert SocialAccount.objects.get(user=dana).uid == "u-1001"
    held = {m.team.slug: (m.role, m.source) for m in Membership.objects.filter(user=dana)}
    assert held == {"ml": (Role.MEMBER, "oidc"), "vision": (Role.VIEWER, "oidc")}
    assert '<span class="username">dana</span>' in landed.text
    added = AuditEvent.objects.filter(action=AuditEvent.Action.MEMBERSHIP_CHANGED, target="dana")
    assert sorted((e.team.slug, e.details["change"], e.details["reason"]) for e in added) == [
        ("ml", "added", SYNC_REASON), ("vision", "added", SYNC_REASON)]

    # Logout ends the session: the dashboard asks for a sign-in again.
    assert person.log_out().url == f"{person.base}/login/"
    assert urlparse(person.http.get(f"{person.base}/", timeout=10).url).path == "/login/"

    # Their groups change at the provider: the next sign-in adds, promotes and removes to match.
    GroupMapping.objects.create(claim_value="gpu-infra", team=infra, role=Role.MEMBER)
    sso.set_user("u-1001", preferred_username="dana", email="dana@example.com", groups=["gpu-leads", "gpu-infra"])
    assert person.sign_in("u-1001").url == f"{person.base}/"
    held = {m.team.slug: (m.role, m.source) for m in Membership.objects.filter(user=dana)}
    assert held == {"vision": (Role.ADMIN, "oidc"), "infra": (Role.MEMBER, "oidc")}
    changes = {(e.team.slug, e.details["change"]) for e in added.filter(pk__gt=max(e.pk for e in added[:2]))}
    assert changes == {("ml", "removed"), ("vision", "changed"), ("infra", "added")}
    assert get_user_model().objects.filter(username__startswith="dana").count() == 1  # the same person again


def test_memberships_added_by_hand_survive_every_sign_in(sso, person):
    ml, ops = make_team("ml"), make_team("ops")
    GroupMapping.objects.create(claim_value="gpu-ml", team=ml, role=Role.VIEWER)
    sso.set_user("u-2002", preferred_username="erin", groups=["gpu-ml"])
    assert person.sign_in("u-2002").url == f"{person.base}/"
    erin = get_user_model().objects.get(username="erin")
    # An admin adds erin to ops by hand and pins her ml membership by making it manual and admin.
    add_member(ops, erin, Role.MEMBER)
    Membership.objects.filter(user=erin, team=ml).update(source=Membership.Source.MANUAL, role=Role.ADMIN)
    person.log_out()

    sso.set_user("u-2002", preferred_username="erin", groups=[])
    assert person.sign_in("u-2002").url == f"{person.base}/"
    held = {m.team.slug: (m.role, m.source) for m in Membership.objects.filter(user=erin)}
    assert held == {"ml": (Role.ADMIN, "manual"), "ops": (Role.MEMBER, "manual")}


def test_someone_whose_groups_map_to_no_team_is_told_their_groups_and_whom_to_ask(sso, person, settings):
    settings.SLIPWAY_STAFF_CONTACT = "#gpu-platform on Slack"
    make_team("ml")
    sso.set_user("u-3003", preferred_username="finn", groups=["marketing", "all-staff"])
    landed = person.sign_in("u-3003")
    assert landed.url == f"{person.base}/" and landed.status_code == 200
    assert "You are not in any team yet" in landed.text
    assert "<code>marketing</code>, <code>all-staff</code>" in landed.text
    assert "#gpu-platform on Slack" in landed.text


def test_the_groups_claim_may_be_a_dotted_path(sso, person, settings):
    settings.SLIPWAY_OIDC_GROUPS_CLAIM = "realm_access.roles"
    ml = make_team("ml")
    GroupMapping.objects.create(claim_value="ml-admins", team=ml, role=Role.ADMIN)
    sso.set_user("u-4004", preferred_username="gus", realm_access={"roles": ["offline_access", "ml-admins"]})
    assert person.sign_in("u-4004").url == f"{person.base}/"
    assert Membership.objects.get(user__username="gus").role == Role.ADMIN


def test_the_group_map_variable_seeds_mappings_once_at_first_sign_in(sso, person, settings):
    settings.SLIPWAY_OIDC_GROUP_MAP = (("gpu-ml", "ml", "member"), ("gpu-later", "later", "viewer"))
    make_team("ml")
    sso.set_user("u-5005", preferred_username="hana", groups=["gpu-ml"])
    assert person.sign_in("u-5005").url == f"{person.base}/"
    assert [str(m) for m in GroupMapping.objects.all()] == ["gpu-ml → ml (member)"]  # "later" has no team yet
    assert Membership.objects.get(user__username="hana").team.slug == "ml"
    # Staff change the seeded mapping; a later sign-in does not seed it again.
    GroupMapping.objects.filter(claim_value="gpu-ml").update(role=Role.ADMIN)
    person.log_out()
    make_team("later")
    assert person.sign_in("u-5005").url == f"{person.base}/"
    assert sorted(str(m) for m in GroupMapping.objects.all()) == ["gpu-later → later (viewer)", "gpu-ml → ml (admin)"]
    assert Membership.objects.get(user__username="hana").role == Role.ADMIN


def _refused(response, status: int = 403) -> str:
    assert response.status_code == status, response.text[:500]
    assert "Sign-in with Example ID failed" in response.text
    return reason(response)


def test_a_missing_groups_claim_is_refused_with_a_page_that_says_so(sso, person):
    sso.set_user("u-6006", preferred_username="ivan", email="ivan@example.com")
    text = _refused(person.sign_in("u-6006"))
    assert "sent no “groups” claim" in text and "SLIPWAY_OIDC_GROUPS_CLAIM" in text
    assert not get_user_model().objects.filter(username="ivan").exists()  # refused before anyone was created
    assert urlparse(person.http.get(f"{person.base}/", timeout=10).url).path == "/login/"


def test_a_missing_groups_claim_strips_no_team_from_someone_who_had_them(sso, person):
    ml = make_team("ml")
    GroupMapping.objects.create(claim_value="gpu-ml", team=ml, role=Role.MEMBER)
    sso.set_user("u-6007", preferred_username="jo", groups=["gpu-ml"])
    person.sign_in("u-6007")
    person.log_out()
    sso.set_user("u-6007", preferred_username="jo")
    _refused(person.sign_in("u-6007"))
    assert Membership.objects.get(user__username="jo").team == ml


def test_an_expired_id_token_is_refused(sso, person):
    sso.set_user("u-7001", preferred_username="kim", groups=[])
    sso.misbehaviour.claims = expired
    assert "has expired" in _refused(person.sign_in("u-7001"))
    assert not get_user_model().objects.filter(username="kim").exists()


def test_an_id_token_from_another_issuer_is_refused(sso, person):
    sso.set_user("u-7002", preferred_username="lee", groups=[])
    sso.misbehaviour.claims = issued_by("https://evil.example.com")
    assert "another identity provider" in _refused(person.sign_in("u-7002"))


def test_an_id_token_for_another_audience_is_refused(sso, person):
    sso.set_user("u-7003", preferred_username="max", groups=[])
    sso.misbehaviour.claims = issued_for("some-other-app")
    assert "another application" in _refused(person.sign_in("u-7003"))


def test_an_id_token_about_another_subject_than_the_userinfo_is_refused(sso, person):
    """OIDC Core 5.3.2: the userinfo answer's ``sub`` must be the ID token's (security review 4 #4)."""
    sso.set_user("u-7009", preferred_username="ola", groups=["gpu-ml"])
    sso.misbehaviour.claims = lambda claims: {**claims, "sub": "u-someone-else"}
    assert "two different people" in _refused(person.sign_in("u-7009"))
    assert not get_user_model().objects.filter(username="ola").exists()
    assert not SocialAccount.objects.filter(uid__in=["u-7009", "u-someone-else"]).exists()


def test_an_id_token_with_a_bad_signature_is_refused(sso, person):
    """The token came straight from the token endpoint, where allauth alone would skip the signature."""
    sso.set_user("u-7004", preferred_username="ned", groups=[])
    sso.misbehaviour.rogue_signature = True
    assert "signature does not match" in _refused(person.sign_in("u-7004"))
    assert not get_user_model().objects.filter(username="ned").exists()


def test_an_id_token_whose_algorithm_does_not_fit_the_key_it_names_is_refused(sso, person):
    """Review: an ES256 token naming the published RSA key made PyJWT raise TypeError, a 500 (not a PyJWTError)."""
    sso.set_user("u-7010", preferred_username="pia", groups=[])
    sso.misbehaviour.foreign_algorithm = True
    assert "does not fit the identity provider's signing key" in _refused(person.sign_in("u-7010"))
    assert not get_user_model().objects.filter(username="pia").exists()


@pytest.mark.parametrize("body", [b"<html>Maintenance</html>", b"[]"])
def test_a_jwks_that_is_no_key_set_is_refused(sso, person, body):
    """Review: a JWKS answer that is not JSON (a proxy's page) read as "unreachable", and JSON of another shape
    (a list) made PyJWT's reader raise AttributeError, a 500. Both say the keys could not be read."""
    sso.set_user("u-7011", preferred_username="quin", groups=[])
    sso.misbehaviour.jwks_body = body
    assert "signing keys (its JWKS) could not be read" in _refused(person.sign_in("u-7011"))
    assert not get_user_model().objects.filter(username="quin").exists()


def test_a_token_signed_by_the_providers_second_key_is_accepted(sso, person):
    """The control of the tests above: the re-signing itself is not what they refuse."""
    sso.set_user("u-7005", preferred_username="ola", groups=[])
    sso.misbehaviour.claims = lambda claims: claims
    assert person.sign_in("u-7005").url == f"{person.base}/"


def test_a_discovery_document_naming_another_issuer_stops_the_sign_in_before_the_provider(sso, person):
    sso.misbehaviour.discovery_issuer = "https://login.example.org"
    token = person.csrf()
    response = person.http.post(f"{person.base}/accounts/oidc/slipway/login/", data={"csrfmiddlewaretoken": token},
                                timeout=10)
    text = _refused(response)
    assert "misconfigured" in text and "https://login.example.org" in text and sso.issuer in text


def test_an_unreachable_provider_is_a_502_page(sso, person, settings):
    settings.SLIPWAY_OIDC_ISSUER = "http://127.0.0.1:9"  # the discard port: nothing listens
    token = person.csrf()
    response = person.http.post(f"{person.base}/accounts/oidc/slipway/login/", data={"csrfmiddlewaretoken": token},
                                timeout=20)
    assert "could not reach the identity provider" in _refused(response, 502)


def test_a_forged_or_replayed_callback_is_refused(sso, person):
    token = person.csrf()
    start = person.http.post(f"{person.base}/accounts/oidc/slipway/login/", data={"csrfmiddlewaretoken": token},
                             allow_redirects=False, timeout=10)
    state = parse_qs(urlparse(start.headers["Location"]).query)["state"][0]
    forged = person.http.get(f"{person.base}/accounts/oidc/slipway/login/callback/",
                             params={"code": "made-up", "state": state}, timeout=10)
    assert "did not accept the sign-in" in _refused(forged)  # its token endpoint refused the code
    unknown_state = person.http.get(f"{person.base}/accounts/oidc/slipway/login/callback/",
                                    params={"code": "made-up", "state": "nope"}, timeout=10)
    assert "did not complete" in _refused(unknown_state)


def test_a_sign_in_cancelled_at_the_provider_says_so(sso, person):
    token = person.csrf()
    at_provider = person.http.post(f"{person.base}/accounts/oidc/slipway/login/",
                                   data={"csrfmiddlewaretoken": token}, timeout=10)
    denied = person.http.post(at_provider.url, data={"action": "deny"}, timeout=10)
    assert "did not complete" in _refused(denied)


def test_password_sign_in_is_for_staff_only_when_so_configured(sso, person, settings):
    settings.SLIPWAY_LOCAL_LOGIN = "staff"
    make_user("olga", password="pw-Slipway-123")
    make_user("root", staff=True, password="pw-Slipway-123")
    page = person.http.get(f"{person.base}/login/", timeout=10)
    assert "kept for platform staff (break-glass)" in page.text

    token = person.csrf()
    refused = person.http.post(f"{person.base}/login/", timeout=10, data={
        "csrfmiddlewaretoken": token, "username": "olga", "password": "pw-Slipway-123"})
    assert refused.status_code == 200 and "Password sign-in is kept for platform staff" in refused.text
    assert urlparse(person.http.get(f"{person.base}/", timeout=10).url).path == "/login/"
    allowed = person.http.post(f"{person.base}/login/", timeout=10, data={
        "csrfmiddlewaretoken": person.csrf(), "username": "root", "password": "pw-Slipway-123"})
    assert urlparse(allowed.url).path != "/login/"


@pytest.mark.parametrize("where", ["body", "query", "both"])
@pytest.mark.parametrize("process", ["connect", "redirect"])
def test_a_forged_connect_links_nothing_and_is_no_500(sso, person, process, where):
    """Security review 4 #2: posting the button with ``process=connect`` while signed in (as staff here)
    once linked the provider's subject to that account behind a 500. Only "login" is accepted, from the
    body or the query string, which allauth reads too (review 5 #9a: the query's passed the first gate)."""
    make_user("root", staff=True, password="pw-Slipway-123")
    person.http.post(f"{person.base}/login/", timeout=10, data={
        "csrfmiddlewaretoken": person.csrf(), "username": "root", "password": "pw-Slipway-123"})
    sso.set_user("u-9001", preferred_username="mallory", groups=["gpu-ml"])
    before = SocialAccount.objects.count()
    data = {"csrfmiddlewaretoken": person.csrf("/"), **({} if where == "query" else {"process": process})}
    query = f"?process={process}" if where != "body" else ""
    refused = person.http.post(f"{person.base}/accounts/oidc/slipway/login/{query}", timeout=10, data=data,
                               allow_redirects=False)
    assert refused.status_code == 400 and "only to sign in" in refused.text
    assert SocialAccount.objects.count() == before == 0
    assert not get_user_model().objects.filter(username="mallory").exists()


def test_without_single_sign_on_nothing_changes(person, settings):
    assert settings.SLIPWAY_OIDC_ISSUER == ""
    page = person.http.get(f"{person.base}/login/", timeout=10)
    assert "Sign in with" not in page.text and 'id="password-login"' in page.text
    assert "form-action 'self';" in page.headers["Content-Security-Policy"]
    token = person.csrf()
    assert person.http.post(f"{person.base}/accounts/oidc/slipway/login/", data={"csrfmiddlewaretoken": token},
                            timeout=10).status_code == 404


def test_a_deactivated_person_is_told_so_after_the_provider_vouched_for_them(sso, person):
    sso.set_user("u-8008", preferred_username="pia", groups=[])
    assert person.sign_in("u-8008").url == f"{person.base}/"
    person.log_out()
    get_user_model().objects.filter(username="pia").update(is_active=False)
    text = _refused(person.sign_in("u-8008"))
    assert "deactivated" in text
    assert urlparse(person.http.get(f"{person.base}/", timeout=10).url).path == "/login/"


def test_a_provider_name_already_taken_locally_gets_a_separate_account(sso, person):
    """Never merged by name or e-mail: whoever controls a provider account must not take over a local one."""
    local = make_user("tom")  # tom@example.com
    ml = make_team("ml")
    add_member(ml, local, Role.ADMIN)
    sso.set_user("u-8009", preferred_username="tom", email="tom@example.com", groups=[])
    landed = person.sign_in("u-8009")
    assert landed.url == f"{person.base}/"
    newcomer = SocialAccount.objects.get(uid="u-8009").user
    assert newcomer.pk != local.pk and newcomer.username != "tom"
    assert f'<span class="username">{newcomer.username}</span>' in landed.text
    assert list(Membership.objects.filter(user=newcomer)) == []


def test_a_username_that_imitates_a_colleagues_gets_a_plainly_different_one(sso, person):
    """Security review 4 #9: Cyrillic "а" for Latin "a" would pass for alice in every list."""
    make_user("alice")
    sso.set_user("u-9101", preferred_username="\u0430lice", groups=[])  # Cyrillic а
    person.sign_in("u-9101")
    newcomer = SocialAccount.objects.get(uid="u-9101").user
    assert newcomer.username == "sso-u-9101"
    # A name in one script that imitates no one is kept as it is.
    person.log_out()
    sso.set_user("u-9102", preferred_username="\u043e\u043b\u044f", groups=[])  # "оля", all Cyrillic
    person.sign_in("u-9102")
    assert SocialAccount.objects.get(uid="u-9102").user.username == "\u043e\u043b\u044f"


def test_look_alikes_the_provider_sends_are_renamed_too(sso, person):
    """Security review 5 #3: ⅾave (U+217E), fullwidth ａｄｍｉｎ and aIice (a capital I) were kept: the
    sign-in and the admin console now share one rule (teams.usernames)."""
    for name in ("dave", "admin", "alice"):
        make_user(name)
    for number, sent in enumerate(("\u217eave", "\uff41\uff44\uff4d\uff49\uff4e", "aIice")):
        uid = f"u-95{number:02d}"
        sso.set_user(uid, preferred_username=sent, groups=[])
        person.sign_in(uid)
        assert SocialAccount.objects.get(uid=uid).user.username == f"sso-{uid}", sent
        person.log_out()
