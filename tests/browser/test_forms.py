"""The portal's forms as a person meets them, in a real browser on the seeded demo.

A prefilled form ("Run again", a quota bar's flavor link) shows its price at once and says
what it copies; the preview asks for a flavor rather than calling it required; an error
under a field goes once the field is filled; the dashboard's recent runs and a run's logs
card follow the run without a reload. On a failure the page's screenshot and HTML are kept.
"""

from __future__ import annotations

import pytest

from jobs.models import TrainingRun
from jobs.services import submit_run
from teams.models import Team
from tests.browser.support import BROWSER_MARKS, LAPTOP

pytestmark = [*BROWSER_MARKS, pytest.mark.usefixtures("demo"), pytest.mark.browser_page(viewport=LAPTOP, accept_dialogs=True)]


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


def test_a_required_error_goes_once_its_field_is_filled(live_server, browser):
    log_in(browser, live_server.url)
    browser.goto(f"{live_server.url}/runs/new/")
    browser.click("button[type=submit].primary")  # nothing filled in: sent back with errors
    browser.wait_for_selector("#id_name_errors")
    assert browser.inner_text("#id_name_errors") == "This field is required."
    browser.fill("#id_name", "filled-now")
    assert browser.locator("#id_name_errors").count() == 0  # gone without sending the form again
    # The image starts filled (SLIPWAY_DEFAULT_RUN_IMAGE); the command, still empty, keeps its error.
    assert browser.locator("#id_image_errors").count() == 0
    assert browser.locator("#id_command_errors").count() == 1
    browser.select_option("#id_flavor", "l4")
    assert browser.locator("#id_flavor_errors").count() == 0


def test_the_preview_asks_for_a_flavor_until_one_is_picked(live_server, browser):
    log_in(browser, live_server.url)
    for path in ("/runs/new/", "/endpoints/new/"):
        browser.goto(f"{live_server.url}{path}")
        with browser.expect_response(lambda r: "/preview/" in r.url):
            browser.type("#id_name", "x")  # a keystroke asks for a preview
        text = browser.inner_text("#preview")
        assert "Pick a flavor" in text and "required" not in text, (path, text)


def test_no_page_asks_for_an_icon_that_is_not_there(live_server, browser):
    missing = []
    browser.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
    log_in(browser, live_server.url)
    for path in ("/", "/runs/", "/endpoints/new/", "/usage/"):
        browser.goto(f"{live_server.url}{path}")
        icon = browser.get_attribute("link[rel=icon]", "href")
        assert icon and icon.startswith("/static/"), path  # served with the app, no CDN
        assert browser.request.get(f"{live_server.url}{icon}").ok, icon
    assert browser.request.get(f"{live_server.url}/favicon.ico").ok  # the conventional path too
    assert missing == []


def test_the_dashboard_takes_in_a_new_run_without_a_reload(live_server, browser):
    log_in(browser, live_server.url)
    browser.goto(f"{live_server.url}/")
    assert "api-submitted" not in browser.inner_text("#recent-runs")
    browser.evaluate("() => { window.notReloaded = true; }")
    team = Team.objects.get(slug="ml-research")
    submit_run(team.memberships.get(user__username="alice").user, team, {
        "name": "api-submitted", "image": "registry.example.com/ml/trainer:2.4", "command": ["python", "train.py"],
        "flavor": "l4", "gpus_per_worker": 1, "max_runtime_minutes": 10})
    browser.wait_for_function("() => document.querySelector('#recent-runs').innerText.includes('api-submitted')")
    assert browser.evaluate("() => window.notReloaded") is True


def test_the_logs_card_stops_saying_running_once_the_run_is_cancelled(live_server, browser):
    log_in(browser, live_server.url)
    run = TrainingRun.objects.filter(team__slug="ml-research", state="admitted").first()
    browser.goto(f"{live_server.url}/runs/{run.pk}/")
    assert "refreshing while it is active" in browser.inner_text("#logs h2")
    browser.click("#run-status button.danger")
    browser.wait_for_function("() => document.querySelector('#run-status .badge').innerText === 'Cancelled'")
    # The logs box's next poll is its last (286): it takes the hint away.
    browser.wait_for_function("() => !document.querySelector('#logs h2').innerText.includes('refreshing')")
    assert "(running)" not in browser.inner_text("#logs")
