"""Browser smoke test: log in to a live server with Debian's chromium, see the dashboard.

Playwright drives the system chromium (its own browser download cannot work offline). The
test also proves the portal works offline: htmx loads from static files and no request
leaves localhost. Outside CI it is skipped when chromium is missing; in CI it never is.
"""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from tests.browser.support import BROWSER_MARKS

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}

pytestmark = [*BROWSER_MARKS, pytest.mark.usefixtures("demo")]


@pytest.fixture
def recorded(browser) -> tuple:
    """The browser, and the URL of every request it makes from the start."""
    requested: list[str] = []
    browser.on("request", lambda request: requested.append(request.url))
    return browser, requested


def test_it_logs_in_and_shows_the_dashboard_offline(live_server, recorded):
    page, requested = recorded

    page.goto(f"{live_server.url}/")
    assert urlparse(page.url).path == "/login/"
    page.fill("#id_username", "alice")
    page.fill("#id_password", "slipway-demo")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")

    assert "ML Research" in page.locator("h1").first.inner_text()
    assert page.locator(".username").inner_text() == "alice"
    assert page.locator("#team-select option:checked").inner_text() == "ML Research (member)"
    assert page.locator("nav.mainnav a[aria-current=page]").inner_text() == "Dashboard"
    page.wait_for_function("() => window.htmx !== undefined")
    assert page.evaluate("() => typeof window.htmx.ajax") == "function"

    # The team switcher moves alice to the team she only views.
    page.select_option("#team-select", "vision")
    page.wait_for_load_state("load")
    assert page.locator("#team-select option:checked").inner_text() == "Computer Vision (viewer)"
    assert "Computer Vision" in page.locator("h1").first.inner_text()

    assert any(urlparse(url).path.endswith("/htmx.min.js") for url in requested)
    hosts = {urlparse(url).hostname for url in requested if urlparse(url).scheme in {"http", "https", "ws", "wss"}}
    assert requested and hosts <= LOCAL_HOSTS, f"requests left localhost: {hosts - LOCAL_HOSTS}"
