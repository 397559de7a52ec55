"""The run form's live preview in a real browser, on the seeded demo: ML Research shares the
cohort "research" with NLP Platform, so past its nominal H100 quota a run starts on NLP's idle
H100s, and the preview says it borrows them and may be preempted. On a failure the page's
screenshot and HTML are kept."""

from __future__ import annotations

import pytest

from jobs.models import TrainingRun
from jobs.services import cancel_run
from tests.browser.support import BROWSER_MARKS, LAPTOP
from tests.browser.test_forms import log_in

pytestmark = [*BROWSER_MARKS, pytest.mark.usefixtures("demo"), pytest.mark.browser_page(viewport=LAPTOP)]


def test_the_run_form_says_a_run_past_the_nominal_quota_borrows_and_is_preemptible(live_server, browser):
    # The demo's llama-pretrain holds ML Research's 8 H100s. Its borrowed llama-ablation is
    # cancelled, so NLP's 6 idle H100s are there to borrow again.
    ablation = TrainingRun.objects.get(team__slug="ml-research", name="llama-ablation")
    cancel_run(ablation.created_by, ablation)
    log_in(browser, live_server.url)
    browser.goto(f"{live_server.url}/runs/new/")
    with browser.expect_response(lambda r: "/runs/preview/" in r.url):
        browser.select_option("#id_flavor", "h100-80gb")
    with browser.expect_response(lambda r: "/runs/preview/" in r.url):
        browser.fill("#id_gpus_per_worker", "2")
        browser.dispatch_event("#id_gpus_per_worker", "change")
    browser.wait_for_selector("#preview-borrows")
    preview = browser.inner_text("#preview")
    assert "Starts now — borrows 2× h100-80gb from the cohort; preemptible (nlp may take them back)" in preview, preview
    assert "10 of 8 now in use, 2 borrowed from the cohort" in preview, preview
    # Within the nominal quota (another flavor of the team) nothing is borrowed.
    with browser.expect_response(lambda r: "/runs/preview/" in r.url):
        browser.fill("#id_gpus_per_worker", "1")
        browser.dispatch_event("#id_gpus_per_worker", "change")
    with browser.expect_response(lambda r: "/runs/preview/" in r.url):
        browser.select_option("#id_flavor", "l4")
    browser.wait_for_function("() => document.querySelector('#preview').innerText.includes('1 of 2 now in use')")
    assert browser.locator("#preview-borrows").count() == 0 and "Starts now" in browser.inner_text("#preview")
