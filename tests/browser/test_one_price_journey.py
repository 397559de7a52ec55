"""Issue 34's proof in a real browser: one price everywhere, and a drain that makes new work wait.

On the demo's two sandbox clusters (``sandbox/inventory.yaml``) an on-demand L4 costs 0.75 on
east and the list price 0.80 elsewhere, and only east has on-demand L4 nodes. A member submits an
L4 run in the portal's form: the price the form's flavor picker and its preview quote, the dry
run's, the run page's, the API's, ``slipway describe``'s and the usage report's rows once it has
run are one figure. Then staff drain east: the next L4 run waits with the drain's reason (the
preview says so before the submission), and runs once east is ready again.

The cluster and the clock are the scripted timeline's (:class:`tests.workloads.timeline.FleetTimeline`):
the test moves them, and the live server's pages show what the reconcile cycles made of it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from click.testing import CliRunner
from django.conf import settings as django_settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.utils import timezone
from rest_framework.test import APIClient

from billing.services import seed_cluster_prices
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.demo import seed_team_quotas
from slipway.cli import cli as slipway_cli
from teams.models import Role
from teams.services import create_api_token
from tests.browser.support import BROWSER_MARKS, LAPTOP
from tests.factories import add_member, make_team, make_user
from tests.workloads.timeline import FleetTimeline

pytestmark = [*BROWSER_MARKS, pytest.mark.usefixtures("world"), pytest.mark.browser_page(viewport=LAPTOP)]

PASSWORD = "pw-Slipway-123"
#: What an on-demand L4-hour is quoted before placement: east's price, the range across the clusters.
QUOTED = "0.75 USD/h on east (0.75\u20130.80)"
DRAINED = "waiting: l4 is only offered by east, which is draining"


@pytest.fixture
def world(transactional_db, published, monkeypatch, settings, flavors):
    """Team vision (2 L4s, a large budget), its member mia, the two sandbox clusters priced from the
    inventory, and the timeline that drives them and the clock."""
    settings.SLIPWAY_SANDBOX_INVENTORY = str(django_settings.BASE_DIR / "sandbox" / "inventory.yaml")
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    # The live server's request threads close their connections, so the test database can be dropped.
    monkeypatch.setitem(connections.settings[DEFAULT_DB_ALIAS], "CONN_MAX_AGE", 0)
    # The scripted clock starts at the real time: the browser keeps the session cookie only until its
    # expiry, which the server sets from that clock.
    timeline = FleetTimeline(published, datetime.now(UTC).replace(microsecond=0))
    monkeypatch.setattr(timezone, "now", lambda: timeline.now)
    team = make_team("vision")
    seed_team_quotas(team, {"l4": 2}, Decimal("100000"))
    seed_cluster_prices()
    mia = make_user("mia", password=PASSWORD)
    add_member(team, mia, Role.MEMBER)
    timeline.cycle()  # the clusters' nodes recorded, as every cycle does: what quotes read
    return {"timeline": timeline, "team": team, "mia": mia}


def log_in(page, base: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", "mia")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/*")


def fill_run(page, base: str, name: str, duration: str) -> None:
    """The new-run form filled for one L4 that runs ``duration`` in the sandbox; the preview answered."""
    page.goto(f"{base}/runs/new/")
    page.fill("#id_name", name)
    page.fill("#id_image", "registry.example.com/ml/trainer:1.4")
    page.fill("#id_command", "python train.py")
    page.fill("#id_env", f"SLIPWAY_SIM_DURATION={duration}")
    page.select_option("#id_flavor", "l4")
    page.wait_for_selector("#preview-price")  # the preview of the L4 (before a flavor it has no price)


def until(timeline: FleetTimeline, run_id: int, state: str, seconds: int = 5, cycles: int = 12) -> TrainingRun:
    for _ in range(cycles):
        timeline.cycle(seconds)
        run = TrainingRun.objects.get(pk=run_id)
        if run.state == state:
            return run
    raise AssertionError(f"run {run_id} not {state} after {cycles} cycles: {run.state} ({run.reason})")


def cli_describe(base: str, user, run_id: int, tmp_path) -> str:
    _token, raw = create_api_token(user, "journey")
    result = CliRunner().invoke(slipway_cli, ["describe", str(run_id)], catch_exceptions=False,
                                env={"SLIPWAY_URL": base, "SLIPWAY_TOKEN": raw, "XDG_CONFIG_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    return result.output


def test_one_price_from_the_form_to_the_usage_rows_and_a_drain_that_makes_the_next_run_wait(
        live_server, browser, world, staff, tmp_path):
    base, timeline, mia = live_server.url, world["timeline"], world["mia"]
    api = APIClient()
    api.force_authenticate(mia)
    log_in(browser, base)

    # 1. Before submitting: the flavor picker, the preview and the dry run quote one price.
    fill_run(browser, base, "train-l4", "1h")
    option = browser.inner_text("#id_flavor option[value=l4]")
    assert QUOTED in option, option
    assert browser.inner_text("#preview-price") == f"A unit: {QUOTED}"
    assert "Starts now" in browser.inner_text("#preview")
    dry = api.post("/api/v1/runs/?dry_run=1", {
        "team": "vision", "name": "train-l4", "image": "registry.example.com/ml/trainer:1.4",
        "command": ["python", "train.py"], "flavor": "l4", "gpus_per_worker": 1}, format="json").json()
    assert (Decimal(dry["price_per_hour"]), dry["cluster"]) == (Decimal("0.75"), "east")

    # 2. Submitted and placed: the page, the API and the CLI say what it is charged, the same figure.
    browser.click("form.run-form button[type=submit]")
    browser.wait_for_url(re.compile(r".*/runs/\d+/$"))
    run_id = int(browser.url.rstrip("/").rsplit("/", 1)[1])
    assert until(timeline, run_id, RunState.RUNNING).cluster.name == "east"
    browser.reload()
    assert browser.inner_text("#run-price") == "0.75 USD/h on east a unit"
    body = api.get(f"/api/v1/runs/{run_id}/").json()
    assert (Decimal(body["price_per_hour"]), body["cluster"]) == (Decimal("0.75"), "east")
    described = cli_describe(base, mia, run_id, tmp_path)
    price_row = next(line for line in described.splitlines() if line.startswith("Price"))
    assert Decimal(re.search(r"([\d.]+) USD/h a unit on east", price_row).group(1)) == Decimal("0.75"), price_row

    # 3. It runs its hour and ends: the usage rows charge that price for every GPU-hour, to the cent.
    until(timeline, run_id, RunState.SUCCEEDED, seconds=600, cycles=12)
    since = (timeline.now - timedelta(days=1)).date().isoformat()
    rows = api.get(f"/api/v1/usage/?team=vision&group_by=workload&since={since}").json()
    row = next(r for r in rows["results"] if r["group"] == f"run:{run_id}")
    assert Decimal(row["gpu_hours"]) >= Decimal("1")
    assert Decimal(row["cost"]) == (Decimal(row["gpu_hours"]) * Decimal("0.75")).quantize(Decimal("0.01"))

    # 4. East drains: the next L4 run's preview says it will wait and why; submitted, it waits so.
    ops = APIClient()
    ops.force_authenticate(staff)
    assert ops.patch("/api/v1/clusters/east/", {"state": "draining"}, format="json").json()["state"] == "draining"
    fill_run(browser, base, "next-l4", "10m")
    preview = browser.inner_text("#preview")
    assert DRAINED in preview and "Starts now" not in preview, preview
    browser.click("form.run-form button[type=submit]")
    browser.wait_for_url(re.compile(r".*/runs/\d+/$"))
    waiting = int(browser.url.rstrip("/").rsplit("/", 1)[1])
    timeline.cycles(6)
    run = TrainingRun.objects.get(pk=waiting)
    assert (run.state, run.reason) == (RunState.QUEUED, DRAINED)
    browser.reload()
    assert DRAINED in browser.inner_text("main")
    assert not timeline.unapplied  # nothing was retried towards a failure

    # 5. East ready again: the waiting run is placed there and runs, at the quoted price.
    assert ops.patch("/api/v1/clusters/east/", {"state": "ready"}, format="json").json()["state"] == "ready"
    assert until(timeline, waiting, RunState.RUNNING).cluster.name == "east"
    browser.reload()
    assert browser.inner_text("#run-price") == "0.75 USD/h on east a unit"
