"""Browser smoke test: log in to a live server with Debian's chromium, see the dashboard.

Playwright drives the system chromium (its own browser download cannot work offline). The
test also proves the portal works offline: htmx loads from static files and no request
leaves localhost. Outside CI it is skipped when chromium is missing; in CI it never is.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

import pytest
from django.core.management import call_command

from tests.browser.support import BROWSER_MARKS, chromium_page

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}

pytestmark = BROWSER_MARKS


@pytest.fixture
def demo_data(transactional_db, settings):
    """The seeded demo world; written before the browser starts (see ``browser_page``)."""
    settings.DEBUG = True  # seed_demo's guard against well-known passwords
    with open(os.devnull, "w") as devnull:
        call_command("seed_demo", stdout=devnull)


@pytest.fixture
def browser_page(demo_data, live_server, monkeypatch):
    requested: list[str] = []
    with chromium_page(monkeypatch) as page:
        page.on("request", lambda request: requested.append(request.url))
        yield page, requested


def test_it_logs_in_and_shows_the_dashboard_offline(live_server, browser_page):
    page, requested = browser_page

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
