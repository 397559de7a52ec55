"""At 1366×900, a laptop's screen, no page scrolls sideways and no table is cut off (issue 20, point 10).

Every page of the portal and of Slipway's admin pages that shows a table is walked on the
seeded demo world (with its two weeks of history, so the money tables are full). A table may
be wider than its box only where that box scrolls; and the money tables — the Usage page's
daily, per-person, per-flavor and per-workload tables, the showback table — show every
column at this width (the daily table hid H100 and TOTAL, "By person" hid IDLE). Chart
legends are lists without bullets. Runs say how long they ran.

Real layout needs a real browser: Debian chromium via Playwright.
"""

from __future__ import annotations

import csv
import re
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from inference.models import InferenceEndpoint
from jobs.models import TrainingRun
from teams.services import create_api_token
from tests.browser.support import BROWSER_MARKS, LAPTOP

# mid_month first: the demo's history is the two weeks before the day it is seeded, none of it in a month's first day,
# whose money tables are then empty.
pytestmark = [*BROWSER_MARKS, pytest.mark.usefixtures("mid_month", "demo"), pytest.mark.browser_page(viewport=LAPTOP)]

User = get_user_model()

#: Per page: whether it scrolls sideways; per table, the boxes around it that it is wider than:
#: fine where that box scrolls (overflow-x auto or scroll: then the box is what shows further
#: out), cut off where it does not.
LAYOUT = """() => {
  const boxes = [];
  for (const table of document.querySelectorAll('table')) {
    let shown = table.getBoundingClientRect();
    const cut = [], scrolls = [];
    for (let box = table.parentElement; box && box !== document.documentElement; box = box.parentElement) {
      const rect = box.getBoundingClientRect();
      const left = rect.left + box.clientLeft, right = left + box.clientWidth;
      if (shown.right <= right + 1 && shown.left >= left - 1) continue;
      const overflow = getComputedStyle(box).overflowX;
      const what = {box: (box.id || box.className || box.tagName).toString(), overflow,
                    wide: Math.round(shown.width), room: box.clientWidth};
      if (overflow === 'auto' || overflow === 'scroll') { scrolls.push(what); shown = rect; } else { cut.push(what); }
    }
    boxes.push({table: table.id || table.className || '(table)', cut, scrolls});
  }
  const legends = [...document.querySelectorAll('ul.legend li')].map(li => getComputedStyle(li).listStyleType);
  return {page: document.documentElement.scrollWidth, viewport: window.innerWidth, boxes, legends};
}"""

#: Tables whose every column shows at 1366 px (no scrolling needed to read them).
WHOLE = {"daily-table", "person-table", "flavor-table", "workload-table", "burn-table", "showback",
         "showback-daily-table"}


def log_in(page, url: str, username: str, password: str) -> None:
    page.goto(f"{url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")


def log_in_as_staff(page, url: str) -> None:
    """Sign the demo's platform admin in to the admin console (signing out whoever was in)."""
    page.context.clear_cookies()
    page.goto(f"{url}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "slipway-admin")
    page.click("input[type=submit]")
    page.wait_for_url(f"{url}/admin/")


def check(page, url: str, path: str) -> set[str]:
    """Open ``path``, assert its layout, and return the ids of the tables it shows."""
    response = page.goto(f"{url}{path}")
    assert response.status == 200, path
    layout = page.evaluate(LAYOUT)
    assert layout["page"] <= layout["viewport"], (path, "the page scrolls sideways", layout)
    for box in layout["boxes"]:
        assert not box["cut"], (path, box["table"], "is cut off by", box["cut"])
        if box["table"] in WHOLE:
            assert not box["scrolls"], (path, box["table"], "hides columns at 1366 px", box["scrolls"])
    assert all(style == "none" for style in layout["legends"]), (path, "bullets in a chart legend", layout["legends"])
    return {box["table"] for box in layout["boxes"]}


def test_no_table_is_cut_off_and_no_page_scrolls_sideways_at_1366(live_server, browser):
    url = live_server.url
    log_in(browser, url, "alice", "slipway-demo")
    create_api_token(User.objects.get(username="alice"), "laptop")
    run = TrainingRun.objects.filter(team__slug="ml-research").first()
    endpoint = InferenceEndpoint.objects.filter(team__slug="ml-research").first()
    seen: set[str] = set()
    for path in ("/", "/runs/", f"/runs/{run.pk}/", "/endpoints/", f"/endpoints/{endpoint.pk}/", "/usage/",
                 "/teams/ml-research/", "/tokens/"):
        seen |= check(browser, url, path)
    assert {"daily-table", "person-table", "flavor-table", "workload-table", "burn-table"} <= seen
    # How long each run ran, on the list and on its page (the demo's bert-base-sweep ran six hours).
    history = TrainingRun.objects.get(team__slug="ml-research", name="bert-base-sweep")
    browser.goto(f"{url}/runs/")
    assert browser.locator(f"#run-{history.pk}-ran").inner_text() == "ran 6 h 00 min"
    browser.goto(f"{url}/runs/{history.pk}/")
    assert browser.locator("#run-time").inner_text() == "6 h 00 min"

    log_in_as_staff(browser, url)
    for path in ("/admin/", "/admin/workloads/", "/admin/capacity/", "/admin/showback/",
                 "/admin/jobs/trainingrun/", "/admin/inference/inferenceendpoint/", "/admin/billing/usagerecord/",
                 "/admin/billing/teambudget/", "/admin/quotas/teamquota/", "/admin/portal/auditevent/"):
        seen |= check(browser, url, path)
    assert {"workloads", "showback", "showback-daily-table"} <= seen


def download(page, link) -> tuple[str, list[dict]]:
    """Click ``link`` and return the file's suggested name and its rows."""
    with page.expect_download() as caught:
        link.click()
    saved = caught.value
    with open(saved.path(), encoding="utf-8") as handle:
        return saved.suggested_filename, list(csv.DictReader(handle))


def test_csv_downloads_say_what_and_when_and_name_each_workload(live_server, browser):
    """Issue 20, point 11: a download's name says what and when; by workload it names each one, costliest first."""
    url = live_server.url
    log_in(browser, url, "alice", "slipway-demo")
    browser.goto(f"{url}/usage/")
    month = timezone.localtime().strftime("%Y-%m")
    name, rows = download(browser, browser.locator("h2:text('By workload') + a"))
    assert name == f"usage-ml-research-{month}-by-workload.csv"
    assert list(rows[0]) == ["group", "name", "kind", "team", "user", "flavor", "gpu_hours", "cost",
                             "idle_gpu_hours", "idle_cost", "borrowed_gpu_hours", "preempted_gpu_hours",
                             "preempted_cost", "currency", "label", "unit_hours", "physical_gpu_hours"]
    assert all(row["name"] and row["kind"] in ("run", "endpoint") and row["team"] == "ml-research"
               and row["label"] == f"{row['kind']} {row['name']} (#{row['group'].split(':')[1]}) of team ml-research"
               for row in rows)
    costs = [Decimal(row["cost"]) for row in rows]
    assert costs == sorted(costs, reverse=True) and len(costs) > 3
    # Money to the cent, with its currency, as a person reads it (never 0E-10).
    assert all(re.fullmatch(r"\d+\.\d\d", row["cost"]) and re.fullmatch(r"\d+\.\d\d", row["idle_cost"])
               and re.fullmatch(r"\d+\.\d\d", row["preempted_cost"]) and row["currency"] == "USD"
               for row in rows), rows[:3]
    name, rows = download(browser, browser.locator("h2:text('By person') + a"))
    assert name == f"usage-ml-research-{month}-by-user.csv" and rows

    log_in_as_staff(browser, url)
    browser.goto(f"{url}/admin/showback/")
    name, rows = download(browser, browser.locator("#showback-csv"))
    assert name == f"showback-{month}-by-team-and-flavor.csv"
    assert rows and all(re.fullmatch(r"\d+\.\d\d", row["cost"]) and row["currency"] == "USD" for row in rows)
