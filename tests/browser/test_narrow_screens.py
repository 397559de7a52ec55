"""On a phone-sized screen the portal's pages do not scroll sideways; wide tables scroll in their own box.

(The Usage page is left out: it is being reworked elsewhere and its tables are not wrapped yet.)

Real layout needs a real browser: Debian chromium via Playwright, on the seeded demo world.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from inference.models import InferenceEndpoint
from jobs.models import TrainingRun
from teams.services import create_api_token
from tests.browser.support import BROWSER_MARKS

PHONE = {"width": 360, "height": 740}
User = get_user_model()

pytestmark = [*BROWSER_MARKS, pytest.mark.usefixtures("demo"), pytest.mark.browser_page(viewport=PHONE)]


LAYOUT = """() => ({
  page: document.documentElement.scrollWidth,
  viewport: window.innerWidth,
  boxes: [...document.querySelectorAll('table')].map(t => {
    const box = t.parentElement;
    return {scroll: box.classList.contains('table-scroll'), overflow: getComputedStyle(box).overflowX,
            table: t.getBoundingClientRect().width, box: box.clientWidth, scrollable: box.scrollWidth > box.clientWidth};
  }),
})"""


def test_pages_fit_a_phone_and_tables_scroll_in_their_box(live_server, browser):
    browser.goto(f"{live_server.url}/login/")
    browser.fill("#id_username", "alice")
    browser.fill("#id_password", "slipway-demo")
    browser.click("button[type=submit]")
    browser.wait_for_url(f"{live_server.url}/")
    create_api_token(User.objects.get(username="alice"), "laptop")
    run = TrainingRun.objects.filter(team__slug="ml-research").first()
    endpoint = InferenceEndpoint.objects.filter(team__slug="ml-research").first()
    tables = wide_tables = 0
    for path in ("/", "/runs/", f"/runs/{run.pk}/", "/runs/new/", "/endpoints/", f"/endpoints/{endpoint.pk}/",
                 "/endpoints/new/", "/tokens/", "/teams/ml-research/"):
        browser.goto(f"{live_server.url}{path}")
        layout = browser.evaluate(LAYOUT)
        assert layout["page"] <= layout["viewport"], (path, layout)
        for box in layout["boxes"]:
            assert box["scroll"] and box["overflow"] == "auto", (path, box)
            tables += 1
            wide_tables += box["scrollable"]
    assert tables >= 5  # dashboard (2), runs, endpoints, tokens
    assert wide_tables >= 1  # the runs list is wider than a phone: it scrolls inside its box
