"""The sweep page in a real browser: uPlot from our own static files, under the Content-Security-Policy, draws the
charts from the data the page embeds, the header's polling keeps the trials ticked for Compare, and Compare opens
the compare page of the ticked trials' work; the New sweep page previews a sweep by htmx and creates it — with
nothing logged to the console. Playwright drives Debian's
chromium (offline), like tests/browser/."""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobs.constants import RunState
from jobs.metric_lines import Point
from jobs.metrics import record
from jobs.models import TrainingRun
from quotas.demo import seed_flavors, seed_team_quotas
from sweeps import driver, services
from sweeps.models import Sweep
from teams.models import Role
from tests.browser.support import BROWSER_MARKS, LAPTOP
from tests.factories import add_member, make_team, make_user
from tests.sweeps.support import matrix_sweep

PASSWORD = "pw-Slipway-123"

pytestmark = [*BROWSER_MARKS, pytest.mark.browser_page(viewport=LAPTOP)]

#: What each chart drew: its box, whether it has a canvas, and uPlot's series labels and points.
DRAWN = """() => [...document.querySelectorAll('#sweep-charts [data-chart]')].map(box => ({
  chart: box.dataset.chart + (box.dataset.parameter ? ':' + box.dataset.parameter : ''),
  canvas: !!box.querySelector('canvas'),
  lines: box.plot ? box.plot.series.slice(1).map(s => s.label) : [],
  points: box.plot ? box.plot.data[0].length : 0,
}))"""


def run_of(sweep, number: int) -> TrainingRun:
    return TrainingRun.objects.get(workload__trial__sweep=sweep, workload__trial__number=number)



def log_in_as_mia(browser, base: str) -> list[str]:
    """Log in as the member "mia"; the console's messages from then on (the tests assert none is an error)."""
    messages: list[str] = []
    browser.on("console", lambda message: messages.append(f"{message.type}: {message.text}"))
    browser.goto(f"{base}/login/")
    browser.fill("#id_username", "mia")
    browser.fill("#id_password", PASSWORD)
    browser.click("button[type=submit]")
    browser.wait_for_url(f"{base}/")
    return messages

def test_the_sweep_page_draws_its_charts_and_compares_the_ticked_trials(transactional_db, browser, live_server,
                                                                        monkeypatch):
    monkeypatch.setattr("core.queueing.publish", lambda *args, **kwargs: True)
    team = make_team("ml-research", "ML Research")
    member = make_user("mia", password=PASSWORD)
    add_member(team, member, Role.MEMBER)
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 8})
    sweep = services.create(member, team, matrix_sweep("lr-search"))
    driver.advance(sweep.pk)
    record(run_of(sweep, 1), [Point(10, "loss", 0.9), Point(20, "loss", 0.6), Point(30, "loss", 0.5)], [],
           timezone.now())
    driver.advance(sweep.pk)
    TrainingRun.objects.filter(pk=run_of(sweep, 1).pk).update(state=RunState.SUCCEEDED, finished_at=timezone.now())
    driver.advance(sweep.pk)
    record(run_of(sweep, 2), [Point(10, "loss", 1.2), Point(20, "loss", 0.8)], [], timezone.now())
    driver.advance(sweep.pk)
    first, second = run_of(sweep, 1), run_of(sweep, 2)

    messages = log_in_as_mia(browser, live_server.url)
    browser.goto(f"{live_server.url}/sweeps/{sweep.pk}/")
    browser.wait_for_selector("#sweep-charts [data-chart='curves'] canvas")
    drawn = {d["chart"]: d for d in browser.evaluate(DRAWN)}
    assert list(drawn) == ["best-time", "best-gpu-hours", "parameter:lr", "curves"]
    assert all(d["canvas"] for d in drawn.values())
    assert drawn["best-time"]["lines"] == ["best loss"] and drawn["best-time"]["points"] == 2
    assert drawn["parameter:lr"]["lines"] == ["Completed", "Active"] and drawn["parameter:lr"]["points"] == 2
    assert drawn["curves"]["lines"] == ["lr-search-t001", "lr-search-t002"] and drawn["curves"]["points"] == 3

    # Tick both trials; the header's next poll swaps the table in again, and they stay ticked.
    browser.check(f"input[data-compare-pick][value='{first.pk}']")
    browser.check(f"input[data-compare-pick][value='{second.pk}']")
    browser.evaluate("() => { window.swaps = 0; document.addEventListener('htmx:afterSettle', () => window.swaps++);"
                     " document.querySelector('#sweep-trials').dataset.before = 'yes'; }")
    browser.wait_for_function("() => window.swaps > 0")
    assert browser.evaluate("() => document.querySelector('#sweep-trials').dataset.before") is None  # a new table
    assert browser.locator("input[data-compare-pick]:checked").count() == 2
    assert browser.locator("#sweep-charts [data-chart='curves'] canvas").count() == 1  # drawn again, not twice

    browser.click("#compare-trials")
    browser.wait_for_url(f"{live_server.url}/runs/compare/**")
    assert f"={first.pk}" in browser.url and f"={second.pk}" in browser.url
    assert "lr-search-t002" in browser.content()
    assert not [m for m in messages if m.startswith(("error", "warning"))], messages


def test_new_sweep_previews_its_cost_then_creates_it_and_lands_on_its_page(transactional_db, browser, live_server,
                                                                           monkeypatch):
    """From the list: New sweep, the example as it starts, Preview (the shape and the cost range swapped in, nothing
    created), Create sweep, and the sweep's own page."""
    monkeypatch.setattr("core.queueing.publish", lambda *args, **kwargs: True)
    team = make_team("ml-research", "ML Research")
    member = make_user("mia", password=PASSWORD)
    add_member(team, member, Role.MEMBER)
    seed_flavors()
    seed_team_quotas(team, {"a100-3g.40gb": 4})

    messages = log_in_as_mia(browser, live_server.url)
    browser.goto(f"{live_server.url}/sweeps/")
    browser.click("text=New sweep")
    browser.wait_for_url(f"{live_server.url}/sweeps/new/")
    assert browser.input_value("#id_name") == "lr-batch"
    browser.click("#preview-sweep")
    browser.wait_for_selector("#sweep-shape")
    assert "27, 3 at a time" in browser.inner_text("#shape-trials")
    assert " to " in browser.inner_text("#shape-cost") and "USD" in browser.inner_text("#shape-cost")
    assert not Sweep.objects.exists()  # a preview creates nothing

    browser.click("#create-sweep")
    browser.wait_for_url(f"{live_server.url}/sweeps/*/")
    sweep = Sweep.objects.get()
    assert browser.url == f"{live_server.url}/sweeps/{sweep.pk}/"
    assert "Sweep lr-batch was created" in browser.content()
    assert browser.inner_text("#sweep-state") == "Running"
    assert not [m for m in messages if m.startswith(("error", "warning"))], messages
