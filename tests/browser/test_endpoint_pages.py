"""Endpoint journeys in a real browser, on the simulated cluster driven cycle by cycle (issue 20).

* A member creates an endpoint from the form, whose live preview prices the maximum, says how
  far burst would go now and explains the cold start; load makes it burst. Its page's reason
  follows every observation ("scaling up: 1 of 2 replicas ready", then nothing once both are
  ready — while the page polls, and after a reload), and its replicas chart draws what was
  observed (ready rises when it rose, not at the last instant) with every time label inside it.
* A member lowers a running endpoint's maximum with the edit form: the ceiling, the replicas and
  the cost per hour follow at once, billing never exceeds the new ceiling, and the platform
  admin's Capacity page shows no more running than reserved. Deleting it leaves a page without
  Edit or Delete, and the list hides it until asked to show deleted endpoints.

The test thread plays the Celery worker and beat: it runs the apply tasks the portal published
and the reconcile cycles (tests/inference/sandbox_cluster.py), while the browser polls.
"""

from __future__ import annotations

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.ledger import cost_per_hour
from billing.models import flavor_price
from cluster.backends.base import ClusterAddress
from inference.models import InferenceEndpoint
from quotas.demo import seed_flavors, seed_team_quotas
from teams.models import Role
from tests.browser.support import AN_ENDPOINT_PAGE, BROWSER_MARKS, LAPTOP
from tests.factories import add_member, make_team, make_user
from tests.inference.sandbox_cluster import Cluster

PASSWORD = "pw-Slipway-123"

pytestmark = [*BROWSER_MARKS, pytest.mark.browser_page(viewport=LAPTOP, accept_dialogs=True)]


class RealTimeCluster(Cluster):
    """A simulated cluster whose clock follows the real one, as the pages' clock does.

    Each cycle advances it to now: what the pages show (how long ago, the chart's time axis)
    is then what a person would see. A cycle takes a fraction of a second, so the endpoints
    here load their model in a couple of seconds; a wait for a state is then bounded by wall
    time (``patience``), not by a number of cycles: a pod spends ``PULL_SECONDS`` creating its
    container, which a fast machine covers in many more cycles than a slow one.
    """

    patience = 90.0  #: seconds of wall time :func:`cycle_until` waits for a state

    def cycle(self, seconds: float = 0):
        return super().cycle(max((timezone.now() - self.now).total_seconds(), 0.001))


@pytest.fixture
def world(transactional_db, monkeypatch) -> list[tuple]:
    """A team that may hold 4 A100s, a member and a staff user; the task publishes it records."""
    team = make_team("ml-research", "ML Research")
    add_member(team, make_user("mia", password=PASSWORD), Role.MEMBER)
    make_user("sam", staff=True, password=PASSWORD)
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 4}, Decimal("10000"))
    published: list[tuple] = []
    monkeypatch.setattr("core.queueing.publish", lambda task, *args, **kwargs: published.append((task.name, args)))
    return published


@pytest.fixture
def cluster(world, settings) -> Cluster:
    """The sandbox and the task queue, run by this thread cycle by cycle (5 simulated seconds each)."""
    return Cluster.installed(world, settings)


@pytest.fixture
def realtime(world, settings) -> RealTimeCluster:
    made = RealTimeCluster.installed(world, settings)
    made.now = timezone.now() - timedelta(seconds=1)
    return made


@pytest.fixture
def page(world, browser, live_server):
    """The browser, signed in as mia."""
    log_in(browser, live_server.url, "mia")
    return browser


def log_in(page, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/admin/**" if username == "sam" else f"{base}/")


def enter(page, selector: str, value: str) -> None:
    """Type ``value`` into a field and leave it, as a person does (the live preview listens for that)."""
    page.fill(selector, value)
    page.press(selector, "Tab")


def fetch(pk: int) -> InferenceEndpoint:
    return InferenceEndpoint.objects.select_related("team", "flavor").get(pk=pk)


def cycle_until(cluster: Cluster, pk: int, done, limit: int = 100) -> InferenceEndpoint:
    """Cycle until ``done(endpoint)``: at most ``limit`` cycles, or the cluster's ``patience`` in wall time."""
    deadline = time.monotonic() + getattr(cluster, "patience", 0)
    cycles = 0
    while cycles < limit or time.monotonic() < deadline:
        cluster.cycle()
        cycles += 1
        endpoint = fetch(pk)
        if done(endpoint):
            return endpoint
    raise AssertionError(f"not reached in {cycles} cycles: {fetch(pk).__dict__}")


def value_at(points: list[list[float]], x: float) -> float:
    """The y a step line holds at ``x``."""
    return [py for px, py in points if px <= x][-1]


def reason_shown(page) -> str:
    found = page.locator("#endpoint-status .reason")
    return found.inner_text() if found.count() else ""


#: The replicas chart as drawn: each line's points in chart coordinates, the y of 0 replicas,
#: the plot's right end, and how far the time labels reach (in the SVG's own units).
CHART = """() => {
  const svg = document.querySelector('#replicas-chart svg.chart');
  const lines = {};
  for (const line of svg.querySelectorAll('polyline.series')) {
    lines[line.classList[1]] = line.getAttribute('points').trim().split(/\\s+/).map(p => p.split(',').map(Number));
  }
  const ticks = [...svg.querySelectorAll('text.tick')];
  const zero = ticks.filter(t => t.textContent.trim() === '0').map(t => Number(t.getAttribute('y')))[0];
  const labels = ticks.filter(t => t.getAttribute('text-anchor') !== 'end' || t.getAttribute('x') !== '38');
  const times = [...svg.querySelectorAll('text.tick')].filter(t => t.textContent.includes(':'));
  return {lines, zero, width: svg.viewBox.baseVal.width,
          reach: Math.max(...times.map(t => { const b = t.getBBox(); return b.x + b.width; })),
          start: Math.min(...times.map(t => t.getBBox().x)), labels: labels.length};
}"""


def test_a_member_creates_an_endpoint_whose_reason_and_chart_follow_what_is_observed(live_server, page, realtime):
    cluster = realtime
    base = live_server.url
    # 1. The form: the preview prices the maximum, says how far burst goes now, explains the cold start.
    page.goto(f"{base}/endpoints/new/")
    assert page.locator("label[for=id_gpus_per_replica]").inner_text().startswith("GPUs per replica")
    page.select_option("#id_flavor", "a100-80gb")
    enter(page, "#id_max_replicas", "4")
    page.wait_for_function("() => document.querySelector('#preview').innerText.includes('at the maximum (4 replicas)')")
    preview = page.inner_text("#preview")
    assert "16.40 USD at the maximum" in preview and "burst to all 4 replicas would be granted now" in preview
    assert "Cold start: each new replica serves once its model is loaded" in preview
    page.select_option("#id_metric", "requests_per_second")
    enter(page, "#id_target", "5")
    enter(page, "#id_min_replicas", "0")
    page.wait_for_function("() => document.querySelector('#preview').innerText.includes('at zero replicas')")
    enter(page, "#id_min_replicas", "1")
    page.select_option("#id_metric", "gpu_utilization")
    enter(page, "#id_target", "70")
    page.fill("#id_name", "chat")
    page.fill("#id_image", "registry.example.com/serving/vllm:0.6")
    page.fill("#id_env", "SLIPWAY_SIM_LOAD_SECONDS=2")
    page.click("button[type=submit].primary")
    page.wait_for_url(AN_ENDPOINT_PAGE)
    endpoint = InferenceEndpoint.objects.get(name="chat")
    assert "Cold start" in page.inner_text("#endpoint-status")
    # Half the 70% target: one replica until the test raises the load (the sandbox's demo curve,
    # scaled by the real maximum of 4, would burst it on its own at some moments of the day).
    cluster.backend.set_load(ClusterAddress(endpoint.namespace, endpoint.object_name), 35)

    # 2. Deployed and ready at one replica. The chart draws ready at 1 from then until now: it
    #    drew 0 from creation until now when it plotted only the scaling log (admitted at 0).
    cycle_until(cluster, endpoint.pk, lambda e: e.state == "ready" and e.replicas == 1)
    for _ in range(6):
        cluster.cycle()
    page.reload()
    chart = page.evaluate(CHART)
    ready, right = chart["lines"]["ready"], chart["lines"]["ready"][-1][0]
    assert value_at(ready, right - 2) < chart["zero"], ready  # at 1 before now, not only at now
    cluster.backend.set_load(ClusterAddress(endpoint.namespace, endpoint.object_name), 140)  # 2 × the 70% target
    scaling_up = cycle_until(cluster, endpoint.pk, lambda e: e.reason.startswith("scaling up"))
    assert scaling_up.reason == "scaling up: 1 of 2 replicas ready"
    page.wait_for_function("() => (document.querySelector('#endpoint-status .reason') || {}).innerText"
                           "?.includes('scaling up: 1 of 2 replicas ready')")

    # 3. Both ready: the page, polling, drops the reason (it was left standing before), and a reload agrees.
    cycle_until(cluster, endpoint.pk, lambda e: e.replicas == 2)
    for _ in range(3):
        cluster.cycle()
    page.wait_for_function("() => document.querySelector('#replicas').innerText.startsWith('2 ready')"
                           " && !document.querySelector('#endpoint-status .reason')")
    page.reload()
    assert reason_shown(page) == "" and page.inner_text("#replicas").startswith("2 ready")

    # 4. The chart draws what was observed: 1 ready, then 2, each from when it was seen.
    chart = page.evaluate(CHART)
    ready, right = chart["lines"]["ready"], chart["lines"]["ready"][-1][0]
    two = value_at(ready, right)
    one = (chart["zero"] + two) / 2
    assert value_at(ready, right - 2) == two and any(abs(y - one) < 1 for _x, y in ready), ready
    # Every time label lies inside the chart (the last one used to be cut off at the right edge).
    assert chart["start"] >= 0 and chart["reach"] <= chart["width"], chart
    table = page.locator("#replicas-chart table tbody tr td:nth-child(2)").all_inner_texts()
    assert {"1", "2"} <= set(table)


def test_a_lowered_maximum_applies_at_once_in_the_pages_and_the_capacity_page(live_server, page, cluster):
    base = live_server.url
    page.goto(f"{base}/endpoints/new/")
    page.select_option("#id_flavor", "a100-80gb")
    page.fill("#id_name", "chat")
    page.fill("#id_image", "registry.example.com/serving/vllm:0.6")
    page.fill("#id_max_replicas", "4")
    page.fill("#id_scale_down_delay_seconds", "600")
    page.fill("#id_env", "SLIPWAY_SIM_LOAD_SECONDS=10")
    page.click("button[type=submit].primary")
    page.wait_for_url(AN_ENDPOINT_PAGE)
    endpoint = InferenceEndpoint.objects.get(name="chat")
    cluster.backend.set_load(ClusterAddress(endpoint.namespace, endpoint.object_name), 1000)
    cycle_until(cluster, endpoint.pk, lambda e: e.replicas == 4 and e.replica_ceiling == 4)
    page.reload()
    assert page.inner_text("#replicas").startswith("4 ready")

    # 1. The edit form lowers the maximum to 3, below the four that run: at once the ceiling is 3.
    page.click("#endpoint-status a:text('Edit')")
    page.wait_for_url(f"{base}/endpoints/{endpoint.pk}/edit/")
    assert "A lower maximum applies at once" in page.inner_text("main")
    page.fill("#id_max_replicas", "3")
    page.click("button[type=submit].primary")
    page.wait_for_url(f"{base}/endpoints/{endpoint.pk}/")
    assert "ceiling 3 (min 1, max 3)" in page.inner_text("#replicas")

    # 2. The cluster stops the fourth replica at once; billing never passes the new ceiling.
    rate = cost_per_hour(flavor_price(fetch(endpoint.pk).flavor, False), 3)
    since, before = cluster.now, fetch(endpoint.pk).cost_at(cluster.now)
    for _ in range(4):
        cluster.cycle()
        seen = fetch(endpoint.pk)
        assert seen.open_units <= 3 and seen.cost_per_hour_now <= rate
        hours = Decimal((cluster.now - since).total_seconds()) / 3600
        assert seen.cost_at(cluster.now) - before <= rate * hours + Decimal("0.0001")
    page.wait_for_function("() => document.querySelector('#replicas').innerText.startsWith('3 ready')")
    assert "12.30 USD now" in page.inner_text("#endpoint-status")

    # 3. The endpoints list: one header cell per column, the row's figures in their own cells.
    page.goto(f"{base}/endpoints/")
    heads = page.locator("table.endpoints thead th").all_inner_texts()
    assert [h.lower() for h in heads[:3]] == ["name", "flavor", "state"] and len(heads) == 6
    row = page.locator(f"#endpoint-{endpoint.pk}-live td").all_inner_texts()
    assert len(row) == 6 and row[3].strip() == "3 / 3 / 3" and row[4].strip() == "12.30 USD/h"

    # 4. The Capacity page: no more running in the cluster than reserved.
    page.click("button:text('Log out')")
    log_in(page, base, "sam")
    page.goto(f"{base}/admin/capacity/")
    capacity = page.locator('#capacity tr[data-flavor="a100-80gb"]')
    running, reserved = capacity.locator("td:nth-child(5)").inner_text(), capacity.locator("td.in-use").inner_text()
    assert (int(running), int(reserved)) == (3, 3)

    # 5. Deleting it: the confirmation says what stops; a deleting endpoint offers no Edit or Delete.
    page.click("button:text('Log out')")
    log_in(page, base, "mia")
    page.goto(f"{base}/endpoints/{endpoint.pk}/")
    page.click("#endpoint-status a.danger")
    assert "Its 3 replicas stop serving." in page.inner_text("#delete-consequences")
    assert "the 3 a100-80gb units it holds go back" in page.inner_text("#delete-consequences")
    page.click("button[type=submit].danger")
    page.wait_for_url(f"{base}/endpoints/{endpoint.pk}/")
    assert page.inner_text("#endpoint-status .badge") == "Deleting"
    assert page.locator("#endpoint-status .actions a").count() == 0
    cycle_until(cluster, endpoint.pk, lambda e: e.state == "deleted", limit=10)

    # 6. The list hides it now, until the filter asks for deleted endpoints too.
    page.goto(f"{base}/endpoints/")
    assert page.locator(f"#endpoint-{endpoint.pk}-live").count() == 0
    page.select_option("#f-state", "all")
    page.wait_for_selector(f"#endpoint-{endpoint.pk}-live")
    assert "Deleted" in page.inner_text(f"#endpoint-{endpoint.pk}-live")
