"""The staff preview of single sign-on (/admin/sso/preview/), the group mappings' admin, and what the settings switch."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.csp import POLICY
from portal.env import env_choice, env_group_map
from teams.models import AuditEvent, GroupMapping, Membership, Role
from tests.factories import add_member, make_team, make_user

URL = "/admin/sso/preview/"


def test_it_shows_the_teams_and_roles_a_claims_document_gives(staff_client, settings):
    settings.SLIPWAY_OIDC_GROUPS_CLAIM = "realm_access.roles"
    ml, cv = make_team("ml", "ML Research"), make_team("cv", "Vision")
    GroupMapping.objects.create(claim_value="ml-users", team=ml, role=Role.MEMBER)
    GroupMapping.objects.create(claim_value="ml-leads", team=ml, role=Role.ADMIN)
    GroupMapping.objects.create(claim_value="cv", team=cv, role=Role.VIEWER)
    page = staff_client.get(URL)
    assert page.status_code == 200 and "<code>realm_access.roles</code>" in page.content.decode()

    claims = '{"sub": "u1", "realm_access": {"roles": ["ml-users", "ml-leads", "cv", "offline_access"]}}'
    html = staff_client.post(URL, {"claims": claims}).content.decode()
    assert ("Groups: <code>ml-users</code>, <code>ml-leads</code>, <code>cv</code>, <code>offline_access</code>."
            in html)
    rows = html.split('id="preview-grants"')[1].split("</table>")[0]
    assert rows.index("Vision") < rows.index("ML Research")  # by team slug
    assert "<td>ML Research (<code>ml</code>)</td><td>admin</td><td><code>ml-leads</code>, <code>ml-users</code></td>" in rows
    assert "<td>Vision (<code>cv</code>)</td><td>viewer</td>" in rows


def test_claims_that_give_no_team_say_whom_the_person_is_told_to_ask(staff_client, settings):
    settings.SLIPWAY_STAFF_CONTACT = "gpu-help@example.com"
    html = staff_client.post(URL, {"claims": '{"groups": ["nobody-maps-this"]}'}).content.decode()
    assert 'id="preview-no-team"' in html and "gpu-help@example.com" in html


def test_the_group_map_variable_is_seeded_by_the_preview_too(staff_client, settings):
    settings.SLIPWAY_OIDC_GROUP_MAP = (("gpu-ml", "ml", "admin"),)
    make_team("ml")
    html = staff_client.post(URL, {"claims": '{"groups": ["gpu-ml"]}'}).content.decode()
    assert "<td>admin</td>" in html and GroupMapping.objects.count() == 1


@pytest.mark.parametrize(("claims", "error"), [
    ("{not json", "Not JSON: Expecting property name enclosed in double quotes (line 1, column 2)."),
    ('["groups"]', "A claims document is a JSON object"),
    ('{"sub": "u1"}', "The identity provider sent no “groups” claim"),
    ('{"groups": null}', "The identity provider sent no “groups” claim"),
    ("", "This field is required."),
])
def test_bad_claims_are_a_form_error(staff_client, claims, error):
    response = staff_client.post(URL, {"claims": claims})
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="claims-error"' in html and error in html.replace("&quot;", '"')
    assert 'id="sso-preview-result"' not in html


def test_the_preview_is_for_staff_only(client, member):
    client.force_login(member)
    response = client.post(URL, {"claims": '{"groups": []}'})
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_staff_edit_group_mappings_in_the_admin_console_audited(staff_client, staff):
    ml = make_team("ml")
    response = staff_client.post("/admin/portal/groupmapping/add/", {"claim_value": "gpu-ml", "team": ml.pk,
                                                                      "role": Role.MEMBER})
    assert response.status_code == 302
    mapping = GroupMapping.objects.get()
    staff_client.post(f"/admin/portal/groupmapping/{mapping.pk}/change/", {"claim_value": "gpu-ml", "team": ml.pk,
                                                                             "role": Role.ADMIN})
    staff_client.post(f"/admin/portal/groupmapping/{mapping.pk}/delete/", {"post": "yes"})
    events = AuditEvent.objects.filter(action=AuditEvent.Action.GROUP_MAPPING_CHANGED).order_by("created_at", "pk")
    assert [(e.actor_id, e.target, e.details["change"], e.details["role"]) for e in events] == [
        (staff.pk, "gpu-ml", "added", "member"), (staff.pk, "gpu-ml", "changed", "admin"),
        (staff.pk, "gpu-ml", "removed", "admin")]
    assert not GroupMapping.objects.exists()


def test_the_login_page_offers_the_provider_only_when_configured(client, settings):
    assert "Sign in with" not in client.get("/login/").content.decode()
    settings.SLIPWAY_OIDC_ISSUER, settings.SLIPWAY_OIDC_CLIENT_ID = "https://id.example.com/realms/corp", "slipway"
    settings.SLIPWAY_OIDC_NAME = "Corp ID"
    response = client.get("/login/")
    html = response.content.decode()
    assert 'action="/accounts/oidc/slipway/login/"' in html and "Sign in with Corp ID" in html
    assert 'id="password-login"' in html and "break-glass" not in html
    # The form posts to Slipway, which redirects to the provider: the policy allows that origin, nothing else changes.
    assert response["Content-Security-Policy"] == POLICY.replace(
        "form-action 'self'", "form-action 'self' https://id.example.com")


def test_the_variables_fail_loudly_with_their_name(monkeypatch):
    monkeypatch.setenv("SLIPWAY_OIDC_GROUP_MAP", " gpu-ml=ml:Admin, team=ops=ops:viewer ,")
    assert env_group_map("SLIPWAY_OIDC_GROUP_MAP") == (("gpu-ml", "ml", "admin"), ("team=ops", "ops", "viewer"))
    for bad in ("gpu-ml", "gpu-ml=ml", "=ml:admin", "gpu-ml=:admin", "gpu-ml=ml:"):
        monkeypatch.setenv("SLIPWAY_OIDC_GROUP_MAP", bad)
        with pytest.raises(ImproperlyConfigured, match="SLIPWAY_OIDC_GROUP_MAP entries look like"):
            env_group_map("SLIPWAY_OIDC_GROUP_MAP")
    monkeypatch.setenv("SLIPWAY_LOCAL_LOGIN", "Staff")
    assert env_choice("SLIPWAY_LOCAL_LOGIN", "all", ("all", "staff")) == "staff"
    monkeypatch.setenv("SLIPWAY_LOCAL_LOGIN", "nobody")
    with pytest.raises(ImproperlyConfigured, match="SLIPWAY_LOCAL_LOGIN must be one of all, staff"):
        env_choice("SLIPWAY_LOCAL_LOGIN", "all", ("all", "staff"))


def test_the_team_page_says_which_memberships_follow_the_groups(client, team, team_admin):
    synced = make_user("uma")
    Membership.objects.create(team=team, user=synced, role=Role.MEMBER, source=Membership.Source.OIDC)
    by_hand = add_member(team, make_user("vic"), Role.VIEWER)
    client.force_login(team_admin)
    html = client.get(f"/teams/{team.slug}/").content.decode()
    rows = {chunk.split('"', 1)[0]: chunk.split("</tr>", 1)[0] for chunk in html.split('<tr id="member-')[1:]}
    assert "via SSO groups" in rows[str(Membership.objects.get(user=synced).pk)]
    assert "via SSO groups" not in rows[str(by_hand.pk)]
