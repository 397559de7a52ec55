"""``slipway login`` in a browser, end to end: the real command in a subprocess polls a live server
while a real HTTP client signs in to the portal and approves (or denies) on the device page.

No sleeping to synchronise: the test reads the command's output until it prints the link (with
a deadline), and waits for the command to exit (with a deadline); the command itself waits the
server's interval between polls, set to 1 s here.
"""

from __future__ import annotations

import re
import socket

import httpx
import pytest

from teams.models import ApiToken
from tests.cli.command import Command
from tests.factories import make_user

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "pw-Slipway-123"  # tests.factories.make_user's


def open_link_and_sign_in(browser: httpx.Client, link: str, username: str) -> httpx.Response:
    """A browser that is not signed in opens the terminal's link: the portal's login page first, then
    (its ``next``) the device page. Real form posts, CSRF token and all."""
    login = browser.get(link)
    assert login.url.path == "/login/" and login.url.params["next"].startswith("/device/?code=")
    page = browser.post(str(login.url), data={"username": username, "password": PASSWORD,
                                              "next": login.url.params["next"],
                                              "csrfmiddlewaretoken": browser.cookies["csrftoken"]})
    assert page.url.path == "/device/", page.url
    return page


def decide(browser: httpx.Client, link: str, username: str, code: str, decision: str) -> httpx.Response:
    """Sign in through the link, check the page shows the terminal's code, approve or deny."""
    page = open_link_and_sign_in(browser, link, username)
    assert page.status_code == 200 and code in page.text, page.text[:500]
    name = re.search(r'name="name"[^>]* value="([^"]*)"|value="([^"]*)"[^>]* name="name"', page.text)
    return browser.post("/device/", data={"code": code, "name": name[1] or name[2], "expires_days": "",
                                          "decision": decision, "csrfmiddlewaretoken": browser.cookies["csrftoken"]})


@pytest.fixture
def fast_polls(settings, short_lived_connections):
    settings.SLIPWAY_DEVICE_LOGIN_INTERVAL_SECONDS = 1


def test_login_in_the_browser_saves_a_working_profile(fast_polls, live_server, member, tmp_path, cli):
    command = Command("--profile", "lab", "login", "--url", live_server.url, "--no-browser", config=tmp_path / "cfg")
    opened = command.line_matching(r"^Open (\S+)$")
    link = opened[1]
    code = command.line_matching(r"shows the code (\w{4}-\w{4})")[1]
    assert link == f"{live_server.url}/device/?code={code}"
    with httpx.Client(base_url=live_server.url, follow_redirects=True, timeout=10) as browser:
        answer = decide(browser, link, member.username, code, "approve")
    assert answer.status_code == 200 and "Approved" in answer.text

    exit_code, rest, stderr = command.finish()
    assert exit_code == 0, (rest, stderr)
    assert f"Signed in to {live_server.url} (teams: ml-research); profile 'lab' saved in" in rest
    token = ApiToken.objects.exclude(name="cli").get(user=member)  # "cli": the fixture's token for SLIPWAY_TOKEN
    assert token.name == f"slipway CLI on {socket.gethostname()}"[:100]
    config = (tmp_path / "cfg" / "slipway" / "config.toml").read_text()
    assert "[profiles.lab]" in config and token.key_prefix in config
    # The saved profile alone connects.
    listed = cli("--profile", "lab", "ps", SLIPWAY_URL="", SLIPWAY_TOKEN="", XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    assert listed.exit_code == 0, listed.output


def test_a_denied_login_exits_3_and_saves_nothing(fast_polls, live_server, tmp_path):
    make_user("dora")
    command = Command("login", "--url", live_server.url, "--no-browser", config=tmp_path / "cfg")
    link = command.line_matching(r"^Open (\S+)$")[1]
    code = command.line_matching(r"shows the code (\w{4}-\w{4})")[1]
    with httpx.Client(base_url=live_server.url, follow_redirects=True, timeout=10) as browser:
        assert "Denied" in decide(browser, link, "dora", code, "deny").text
    exit_code, _rest, stderr = command.finish()
    assert exit_code == 3
    assert "not signed in: The sign-in was denied in the browser." in stderr and "Traceback" not in stderr
    assert not (tmp_path / "cfg" / "slipway" / "config.toml").exists()
    assert not ApiToken.objects.exists()
