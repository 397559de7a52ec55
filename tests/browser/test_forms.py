"""The portal's forms as a person meets them, in a real browser on the seeded demo.

A prefilled form ("Run again", a quota bar's flavor link) shows its price at once and says
what it copies; the preview asks for a flavor rather than calling it required; an error
under a field goes once the field is filled; the dashboard's recent runs and a run's logs
card follow the run without a reload. On a failure the page's screenshot and HTML are kept.
"""

from __future__ import annotations

import os

import pytest
from django.core.management import call_command

from jobs.models import TrainingRun
from tests.browser.conftest import save_evidence
from tests.browser.support import BROWSER_MARKS, chromium_page

pytestmark = BROWSER_MARKS


@pytest.fixture
def demo(transactional_db, settings, monkeypatch):
    settings.DEBUG = True  # seed_demo's guard against well-known passwords
    # No broker in this test: publishes are dropped, the pages are what is tested.
    monkeypatch.setattr("portal.queueing.publish", lambda task, *args, **kwargs: True)
    with open(os.devnull, "w") as devnull:
        call_command("seed_demo", stdout=devnull)


@pytest.fixture
def browser(demo, live_server, monkeypatch, request):
    with chromium_page(monkeypatch) as page:
        page.on("dialog", lambda dialog: dialog.accept())
        page.set_viewport_size({"width": 1366, "height": 900})
        yield page
        save_evidence(request, page)


def log_in(page, base: str, username: str = "alice") -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "slipway-demo")
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/*")


def test_run_again_opens_a_priced_copy_with_a_fresh_name(live_server, browser):
    log_in(browser, live_server.url)
    run = TrainingRun.objects.filter(team__slug="ml-research", state="succeeded").order_by("pk").first()
    browser.goto(f"{live_server.url}/runs/{run.pk}/")
    browser.click("text=Run again…")
    browser.wait_for_url(f"{live_server.url}/runs/new/?from={run.pk}")
    # Priced on load, before anything is touched.
    preview = browser.inner_text("#preview")
    assert "Pick a flavor" not in preview and "per hour" in preview, preview
    assert browser.input_value("#id_name") == f"{run.name}-2"
    copy = browser.locator("#copy-of a")
    assert copy.inner_text() == f"#{run.pk} {run.name}"
    copy.click()
    browser.wait_for_url(f"{live_server.url}/runs/{run.pk}/")


def test_a_flavor_link_opens_a_priced_form(live_server, browser):
    log_in(browser, live_server.url)
    browser.goto(f"{live_server.url}/runs/new/?flavor=a100-80gb")
    assert browser.input_value("#id_flavor") == "a100-80gb"
    preview = browser.inner_text("#preview")
    assert "Pick a flavor" not in preview and "per hour" in preview, preview
    assert browser.locator("#copy-of").count() == 0
