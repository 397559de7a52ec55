"""Single sign-on in Debian's chromium: the login page's button, the provider's page, back to the dashboard in the
right team, logout; and a refused token on its page. The Content-Security-Policy is the portal's, unchanged but
for the provider's origin as a form target: the browser holds the button's redirect to it.
"""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from teams.models import GroupMapping, Role
from tests.browser.support import BROWSER_MARKS
from tests.factories import make_team
from tests.sso.provider import expired

pytestmark = BROWSER_MARKS


@pytest.fixture
def page(person, browser):
    """The browser, recording every Content-Security-Policy complaint in ``page.csp_errors``."""
    browser.csp_errors = []
    browser.on("console", lambda m: browser.csp_errors.append(m.text) if "Content Security Policy" in m.text else None)
    return browser


def _through_the_provider(page, live_server, sub: str) -> None:
    page.goto(f"{live_server.url}/login/")
    page.click("#sso-login button")
    page.wait_for_selector("input[name=sub]")
    page.fill("input[name=sub]", sub)
    page.click("button:has-text('Authorize')")
    page.wait_for_load_state("load")


def test_a_person_signs_in_with_the_provider_and_lands_in_their_team(sso, live_server, page):
    ml = make_team("ml", "ML Research")
    GroupMapping.objects.create(claim_value="gpu-ml", team=ml, role=Role.MEMBER)
    sso.set_user("u-9009", preferred_username="rita", email="rita@example.com", groups=["gpu-ml"])

    page.goto(f"{live_server.url}/login/")
    assert page.locator("#sso-login button").inner_text() == "Sign in with Example ID"
    page.click("#sso-login button")
    page.wait_for_selector("input[name=sub]")
    assert urlparse(page.url).netloc == urlparse(sso.issuer).netloc  # at the provider, on 127.0.0.1
    page.fill("input[name=sub]", "u-9009")
    page.click("button:has-text('Authorize')")
    page.wait_for_url(f"{live_server.url}/")

    assert "ML Research" in page.locator("h1").first.inner_text()
    assert page.locator(".username").inner_text() == "rita"
    assert page.locator("#team-select option:checked").inner_text() == "ML Research (member)"
    assert page.csp_errors == []

    page.click("button:has-text('Log out')")
    page.wait_for_url(f"{live_server.url}/login/")
    page.goto(f"{live_server.url}/")
    assert urlparse(page.url).path == "/login/"


def test_an_expired_token_ends_on_a_page_that_says_so(sso, live_server, page):
    sso.set_user("u-9010", preferred_username="sam", groups=[])
    sso.misbehaviour.claims = expired
    _through_the_provider(page, live_server, "u-9010")
    assert page.locator("h1").inner_text() == "Sign-in with Example ID failed"
    assert "has expired" in page.locator("#sso-reason").inner_text()
    page.click("text=Back to the login page")
    assert urlparse(page.url).path == "/login/"
    assert page.csp_errors == []
