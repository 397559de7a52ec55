"""``slipway login`` where people sign in with the company's provider: the device page asks for the
portal's sign-in, which is single sign-on, and the command line gets the person's token (issue 26)."""

from __future__ import annotations

import re

import pytest

from teams.models import ApiToken, GroupMapping, Role
from tests.cli.command import Command
from tests.factories import make_team

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_command_line_signs_in_through_the_provider(sso, person, live_server, settings, tmp_path):
    settings.SLIPWAY_DEVICE_LOGIN_INTERVAL_SECONDS = 1
    GroupMapping.objects.create(claim_value="gpu-ml", team=make_team("ml"), role=Role.MEMBER)
    sso.set_user("u-2002", preferred_username="fox", email="fox@example.com", groups=["gpu-ml"])
    command = Command("login", "--url", live_server.url, "--no-browser", config=tmp_path / "cfg")
    link = command.line_matching(r"^Open (\S+)$")[1]
    code = command.line_matching(r"shows the code (\w{4}-\w{4})")[1]

    # The link asks for a sign-in; "Sign in with Example ID" carries the page along (``next``).
    login_page = person.http.get(link, timeout=10)
    next_page = re.search(r'name="next" value="([^"]+)"', login_page.text)[1].replace("&amp;", "&")
    assert next_page == f"/device/?code={code}"
    at_provider = person.http.post(f"{person.base}/accounts/oidc/slipway/login/",
                                   data={"csrfmiddlewaretoken": person.http.cookies["csrftoken"], "next": next_page},
                                   timeout=10)
    device_page = person.http.post(at_provider.url, data={"sub": "u-2002"}, timeout=10)
    assert device_page.url == f"{person.base}/device/?code={code}" and code in device_page.text
    approved = person.http.post(f"{person.base}/device/", timeout=10, data={
        "code": code, "name": "fox's laptop", "expires_days": "7", "decision": "approve",
        "csrfmiddlewaretoken": person.http.cookies["csrftoken"]})
    assert "Approved" in approved.text

    exit_code, rest, stderr = command.finish()
    assert exit_code == 0, (rest, stderr)
    assert f"Signed in to {live_server.url} (teams: ml)" in rest
    token = ApiToken.objects.get()
    assert (token.user.username, token.name, token.expires_at is not None) == ("fox", "fox's laptop", True)
