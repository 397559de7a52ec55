"""Follow mode in a real browser: the log box keeps its newest line in view as polls swap it,
and a reader who scrolled up is not snapped back (static/js/logs.js).

The cluster is the scriptable fake, whose log grows between polls; Playwright drives Debian's
chromium (offline), like tests/browser/.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from cluster.backends.base import ClusterEvent
from jobs import services
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.demo import seed_flavors, seed_team_quotas
from teams.models import Role
from tests.backends import use_backend
from tests.browser.support import BROWSER_MARKS
from tests.factories import add_member, make_team, make_user
from tests.fakes import FakeBackend, pod
from tests.jobs.conftest import run_payload

PASSWORD = "pw-Slipway-123"
AT_BOTTOM = "b => b.scrollHeight - b.scrollTop - b.clientHeight <= 8"

pytestmark = BROWSER_MARKS


@pytest.fixture
def world(transactional_db, monkeypatch, settings):
    """A running run with one pod whose log is long enough to scroll, on the fake cluster."""
    team = make_team("ml-research", "ML Research")
    user = make_user("mia", password=PASSWORD)
    add_member(team, user, Role.MEMBER)
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 8})
    monkeypatch.setattr("core.queueing.publish", lambda task, *args, **kwargs: None)
    backend = FakeBackend()
    use_backend(settings, backend)
    run = services.submit_run(user, team, {k: v for k, v in run_payload().items() if k != "team"})
    now = timezone.now()
    TrainingRun.objects.filter(pk=run.pk).update(state=RunState.RUNNING, applied_at=now, started_at=now)
    backend.pod_lists[(run.namespace, run.object_name)] = [pod(run.object_name, "Running", 2)]
    lines = [f"step {i}" for i in range(300)]
    backend.log_lines[f"{run.object_name}-abcde"] = lines  # the test appends to it: the log grows
    return run, lines


@pytest.fixture
def page(world, browser, live_server):
    """The browser, signed in as mia."""
    browser.goto(f"{live_server.url}/login/")
    browser.fill("#id_username", "mia")
    browser.fill("#id_password", PASSWORD)
    browser.click("button[type=submit]")
    browser.wait_for_url(f"{live_server.url}/")
    return browser


def newest_line_shown(page, line: str) -> None:
    page.wait_for_function("line => document.querySelector('[data-log-box]').innerText.trim().endsWith(line)",
                           arg=line, timeout=10_000)


def test_it_follows_the_newest_line_and_leaves_a_reader_who_scrolled_up_where_they_are(live_server, page, world):
    run, lines = world
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    box = page.locator("[data-log-box]")
    follow = page.locator("[data-log-follow]")

    # 1. On arrival the newest line is at the bottom and in view.
    assert box.evaluate("b => b.scrollHeight > b.clientHeight"), "the log must be long enough to scroll"
    assert box.evaluate(AT_BOTTOM) and follow.is_checked()

    # 2. New lines arrive with the next poll: the box follows them.
    lines.extend(f"step {i}" for i in range(300, 310))
    newest_line_shown(page, "step 309")
    assert page.locator("[data-log-box]").evaluate(AT_BOTTOM)

    # 3. The reader scrolls up: following pauses, and the next poll does not snap the box back.
    page.locator("[data-log-box]").evaluate("b => { b.scrollTop = 40; }")
    page.wait_for_function("() => !document.querySelector('[data-log-follow]').checked")
    lines.extend(f"step {i}" for i in range(310, 320))
    newest_line_shown(page, "step 319")
    assert page.locator("[data-log-box]").evaluate("b => b.scrollTop") == 40
    assert not follow.is_checked()

    # 4. Ticking "Follow" again goes back to the newest line, and keeps to it.
    follow.check()
    assert page.locator("[data-log-box]").evaluate(AT_BOTTOM)
    lines.extend(f"step {i}" for i in range(320, 330))
    newest_line_shown(page, "step 329")
    assert page.locator("[data-log-box]").evaluate(AT_BOTTOM)


def test_it_says_why_a_run_waits_for_capacity_with_the_schedulers_words_one_click_away(live_server, page, world,
                                                                                        settings):
    run, _lines = world
    words = "waiting for capacity: needs 2\u00d7 a100-80gb on one node; the largest free block is 1 (node a100-1)"
    raw = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    TrainingRun.objects.filter(pk=run.pk).update(state=RunState.PENDING, reason=words,
                                                     reason_code="waiting_for_capacity")
    backend = FakeBackend()
    use_backend(settings, backend)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    assert page.inner_text("#run-status .reason") == f"Reason: {words}"
    assert page.locator("#run-status details").count() == 0  # the scheduler has said nothing yet

    # The scheduler speaks: the status panel and the events refresh with it, without a reload.
    backend.warnings[(run.namespace, run.object_name)].append(
        ClusterEvent("Warning", "FailedScheduling", raw, f"Pod/{run.object_name}-abcde", "2026-11-22T10:00:01Z"))
    page.wait_for_function("raw => document.querySelector('#workload-events').innerText.includes(raw)", arg=raw,
                           timeout=10_000)
    page.wait_for_selector("#run-status details summary", timeout=10_000)
    assert page.inner_text("#run-status .reason") == f"Reason: {words}"  # the plain words stay first
    assert not page.locator("#run-status details pre").is_visible()  # the raw words wait behind a click
    page.click("#run-status details summary")
    assert page.inner_text("#run-status details pre") == raw
    # The next polls of the status panel leave it open.
    with page.expect_response(lambda r: r.url.endswith(f"/runs/{run.pk}/")):
        pass
    with page.expect_response(lambda r: r.url.endswith(f"/runs/{run.pk}/")):
        pass
    assert page.locator("#run-status details pre").is_visible()
