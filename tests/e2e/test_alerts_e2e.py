"""GPU alerts end to end (issue 38's proof): the API → a real Celery worker on Redis → the sandbox's
simulated DCGM exporter → the reconcile cycle's one reading → the alert episodes → one notification each.

Two runs at once, with the alert windows shortened to a minute (``SLIPWAY_ALERT_*_MINUTES``): one goes
idle five seconds after it starts and stays so (``SLIPWAY_SIM_IDLE_AFTER``), the other's GPU memory
leaks until it is full (``SLIPWAY_SIM_GPU_MEMORY_LEAK``) while it keeps its GPU busy. Each gives exactly
one alert, of its own kind, in the team's notifications — however many cycles see it meanwhile.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from core.formatting import format_money
from fleet.models import Cluster
from notifications.models import Event
from quotas.demo import seed_flavors, seed_team_quotas
from tests.e2e.conftest import lend, module_worker, wait_for
from workloads.models import AlertEpisode

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def alerting_worker(django_db_setup, tmp_path_factory):
    yield from module_worker(tmp_path_factory, SLIPWAY_ALERT_IDLE_MINUTES="1", SLIPWAY_ALERT_MEMORY_MINUTES="1",
                             SLIPWAY_ALERT_CLEAR_MINUTES="1")


@pytest.fixture
def worker(transactional_db, alerting_worker):
    yield from lend(alerting_worker)


@pytest.fixture
def api(team, member, api_client_for):
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 4}, Decimal("100000"))
    return api_client_for(member)


def submit(api, name: str, **env: str) -> dict:
    response = api.post("/api/v1/runs/", {
        "team": "ml-research", "name": name, "image": "registry.example.com/ml/train:1", "command": ["python", "t.py"],
        "flavor": "a100-80gb", "gpus_per_worker": 1, "env": {"SLIPWAY_SIM_DURATION": "10m", **env}}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def events(kind: str, ref: str) -> list[Event]:
    return list(Event.objects.filter(kind=kind, ref=ref))


def test_an_idle_run_and_a_leaking_run_each_give_exactly_one_alert(worker, api):
    idle = submit(api, "forgotten", SLIPWAY_SIM_IDLE_AFTER="5s")
    leaking = submit(api, "leaky", SLIPWAY_SIM_GPU_MEMORY_LEAK="200", SLIPWAY_SIM_GPU_UTIL="90")
    idle_ref, leaking_ref = f"run:{idle['id']}", f"run:{leaking['id']}"

    # Idle for the (shortened) minute: one alert naming the run, its team and what it wastes per hour.
    [alert] = wait_for(lambda: events("gpu_idle", idle_ref), timeout=150, interval=1, what="the idle alert")
    assert alert.title.startswith("Run forgotten (#") and "of team ml-research" in alert.title
    per_hour = Decimal(api.get(f"/api/v1/runs/{idle['id']}/").json()["estimated_cost_per_hour"])
    assert f"wasting {format_money(per_hour, precise=True)} per hour" in alert.title
    assert f"/runs/{idle['id']}/cancel/" in alert.text

    # Memory over 95 % for the minute: one OOM-risk alert, and the busy run is not idle.
    [risk] = wait_for(lambda: events("gpu_memory", leaking_ref), timeout=150, interval=1, what="the OOM-risk alert")
    assert risk.title.startswith("Run leaky (#") and "OOM risk" in risk.title

    # Later cycles see both conditions still holding: the episodes stay open, nothing more is sent.
    opened = AlertEpisode.objects.get(ref=idle_ref, kind="gpu_idle").opened_at
    later = max(alert.created_at, risk.created_at) + timedelta(seconds=5)  # ten cycles at the worker's 0.5 s
    wait_for(lambda: Cluster.objects.filter(last_seen__gt=later).exists(), timeout=60, interval=0.5,
             what="the cycles after both alerts")
    assert api.get(f"/api/v1/runs/{idle['id']}/").json()["state"] == "running"
    assert len(events("gpu_idle", idle_ref)) == 1 and len(events("gpu_memory", leaking_ref)) == 1
    assert not events("gpu_idle", leaking_ref) and not events("gpu_memory", idle_ref)
    episode = AlertEpisode.objects.get(ref=idle_ref, kind="gpu_idle")
    assert (episode.state, episode.opened_at) == ("open", opened)
