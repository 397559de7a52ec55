"""A run's GPU telemetry charts in a real browser: uPlot from our own static files, under the
Content-Security-Policy, drawing the series the page embeds — a line per GPU on each of the four
charts, one legend — with nothing logged to the console."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from cluster.backends.base import GpuReading, WorkloadTelemetry
from jobs.models import TrainingRun
from jobs.services import submit_run
from quotas.demo import seed_flavors, seed_team_quotas
from teams.models import Role
from tests.browser.support import BROWSER_MARKS, LAPTOP
from tests.factories import add_member, make_team, make_user
from tests.jobs.conftest import run_payload
from workloads.telemetry import readings as telemetry

PASSWORD = "pw-Slipway-123"

pytestmark = [*BROWSER_MARKS, pytest.mark.browser_page(viewport=LAPTOP)]

#: What the charts drew: per chart, its series' labels and how many points each has (uPlot's own data).
DRAWN = """() => [...document.querySelectorAll('#gpu-telemetry [data-chart]')].map(box => ({
  chart: box.dataset.chart,
  canvas: !!box.querySelector('canvas'),
  lines: box.plot ? box.plot.series.slice(1).map(s => s.label) : [],
  points: box.plot ? box.plot.data[0].length : 0,
}))"""


def test_the_run_page_draws_a_line_per_gpu_on_each_chart(transactional_db, browser, live_server, monkeypatch):
    monkeypatch.setattr("core.queueing.publish", lambda *args, **kwargs: True)
    team = make_team("ml-research", "ML Research")
    member = make_user("mia", password=PASSWORD)
    add_member(team, member, Role.MEMBER)
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 4}, Decimal("10000"))
    run = submit_run(member, team, {k: v for k, v in run_payload(gpus_per_worker=2).items() if k != "team"})
    now = timezone.now()
    TrainingRun.objects.filter(pk=run.pk).update(started_at=now - timedelta(hours=3))
    for minute in range(180):
        reading = WorkloadTelemetry(tuple(GpuReading(gpu, 40.0 + minute % 50, 30000.0 + 50 * minute, 51920.0 - 50 * minute,
                                                     55.0 + g, 250.0 + g) for g, gpu in enumerate(("GPU-aaaa", "GPU-bbbb"))))
        telemetry.record(None, {run.identity: reading}, now - timedelta(minutes=179 - minute))
    telemetry.compact(now)
    messages: list[str] = []
    browser.on("console", lambda message: messages.append(f"{message.type}: {message.text}"))
    browser.goto(f"{live_server.url}/login/")
    browser.fill("#id_username", "mia")
    browser.fill("#id_password", PASSWORD)
    browser.click("button[type=submit]")
    browser.wait_for_url(f"{live_server.url}/")
    browser.goto(f"{live_server.url}/runs/{run.pk}/")
    browser.wait_for_selector("#gpu-telemetry [data-chart='power'] canvas")
    drawn = browser.evaluate(DRAWN)
    assert [d["chart"] for d in drawn] == ["util", "memory", "temp", "power"] and all(d["canvas"] for d in drawn)
    assert drawn[0]["lines"] == ["GPU 0 (aaaa)", "GPU 1 (bbbb)"]
    assert drawn[1]["lines"] == ["GPU 0 (aaaa) used", "GPU 1 (bbbb) used", "GPU 0 (aaaa) total", "GPU 1 (bbbb) total"]
    assert all(d["points"] > 60 for d in drawn)  # the folded slots and the last hour's minutes
    assert browser.locator("#gpu-telemetry [data-legend] li").all_inner_texts() == ["GPU 0 (aaaa)", "GPU 1 (bbbb)"]
    assert browser.locator("#gpu-now").inner_text() == "Now: 69 % busy, 76.1 of 160 GiB memory in use (2 GPUs)"  # its last minute
    assert not [m for m in messages if m.startswith(("error", "warning"))], messages
