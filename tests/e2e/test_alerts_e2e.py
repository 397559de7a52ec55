"""GPU alerts end to end (issue 38's proof): the API → a real Celery worker and beat → the sandbox's
simulated DCGM exporter → the reconcile cycle's alerts → the team's webhook, signed.

The team tightens its alert rules through the API (idle and OOM risk after one minute: the
shortened window). A run whose GPUs idle at 2 % triggers exactly one idle alert, naming the run,
its team and what its idle GPUs cost per hour — the run's own ``estimated_cost_per_hour`` from
the API — with a link to cancel it; a run holding 78 of an A100's 80 GB triggers exactly one
OOM-risk alert. Neither says anything more while the cycles go on, and the idle run's page shows
its alert; cancelling the run closes its episode.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from core.formatting import format_money
from notifications.constants import EventKind
from notifications.services import create_webhook
from quotas.demo import seed_flavors, seed_team_quotas
from tests.e2e.conftest import WorkerProcess, lend, module_worker, wait_for
from tests.jobs.conftest import post_run
from tests.notifications.conftest import receiver  # noqa: F401  (the signed-webhook receiver fixture)
from workloads.models import AlertEpisode
from workloads.telemetry.alert_rules import AlertKind

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(300)]

PORTAL = "https://slipway.example.com"
#: Reconcile cycles (one every 0.5 s) that must pass after both alerts opened, none saying more.
MORE_CYCLES = 20


def cycles(log: str) -> int:
    """Cycles of the cluster the worker's log says it ran (Celery's line of each reconcile_cluster that observed)."""
    return sum(1 for line in log.splitlines()
               if "workloads.tasks.reconcile_cluster[" in line and "succeeded in" in line and "'observed=" in line)


@pytest.fixture(scope="module")
def shared_alert_worker(django_db_setup, tmp_path_factory):
    """The module's e2e worker: webhooks to the receiver on 127.0.0.1, quick retries and sweeps, links to PORTAL."""
    yield from module_worker(tmp_path_factory, SLIPWAY_WEBHOOK_ALLOW_LOOPBACK="true",
                             SLIPWAY_WEBHOOK_BACKOFF_SECONDS="0.5", SLIPWAY_NOTIFY_SWEEP_SECONDS="1",
                             SLIPWAY_PORTAL_URL=PORTAL)


@pytest.fixture
def alert_worker(transactional_db, shared_alert_worker):
    yield from lend(shared_alert_worker)


def received(hook, kind: EventKind) -> list[dict]:
    return [got.body for got in hook.got if got.body["type"] == kind]


def test_an_idle_run_and_a_nearly_full_gpu_each_alert_once(alert_worker: WorkerProcess, team, member, team_admin,
                                                            api_client_for, receiver, settings):  # noqa: F811
    settings.SLIPWAY_WEBHOOK_ALLOW_LOOPBACK = True  # the receiver is on 127.0.0.1 (the worker's env allows it too)
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 8}, Decimal("200000"))
    # 1. The team's admin tightens its rules (the shortened window) and hooks the alerts to a receiver.
    tightened = api_client_for(team_admin).patch("/api/v1/teams/ml-research/alerts/",
                                                 {"idle_minutes": 1, "memory_minutes": 1}, format="json")
    assert tightened.status_code == 200, tightened.content
    _hook, receiver.secret = create_webhook(team_admin, team, receiver.url, [EventKind.GPU_IDLE, EventKind.GPU_MEMORY])
    # 2. A member's two runs: one whose GPUs idle, one that fills an A100's memory (busy, so not idle).
    api = api_client_for(member)
    idle = post_run(api, "15m", name="idle-notebook", gpus_per_worker=2, env={"SLIPWAY_SIM_GPU_UTIL": "2"})
    full = post_run(api, "15m", name="big-batch", gpus_per_worker=1, gpu_memory_gb=78,
                    env={"SLIPWAY_SIM_GPU_UTIL": "90"})  # busy from its start (no loading phase to look idle)
    # 3. Both alerts reach the receiver, signed.
    wait_for(lambda: received(receiver, EventKind.GPU_IDLE) and received(receiver, EventKind.GPU_MEMORY),
             timeout=200, what=f"both alerts delivered; worker log:\n{alert_worker.logs()[-4000:]}")
    # 4. The cycles go on, the conditions still hold: nothing more is said.
    opened_at = alert_worker.logs().rindex("alert gpu_")  # workloads.telemetry.alerts logs each opening
    wait_for(lambda: cycles(alert_worker.logs()[opened_at:]) >= MORE_CYCLES, timeout=60,
             what=f"{MORE_CYCLES} more reconcile cycles")
    [idle_alert], [memory_alert] = received(receiver, EventKind.GPU_IDLE), received(receiver, EventKind.GPU_MEMORY)
    assert all(got.verified for got in receiver.got) and len(receiver.got) == 2
    # The idle alert: the run, its team, the money per hour (the API's figure of the one rule), the link.
    run = api.get(f"/api/v1/runs/{idle['id']}/").json()
    per_hour = Decimal(run["estimated_cost_per_hour"])
    assert idle_alert["ref"] == f"run:{idle['id']}" and idle_alert["team"] == "ml-research"
    assert Decimal(idle_alert["details"]["cost_per_hour"]) == per_hour > 0
    money = format_money(per_hour, precise=True)
    assert idle_alert["title"] == (f"Run idle-notebook (#{idle['id']}) of team ml-research: GPUs idle for 1 min, "
                                   f"wasting {money} per hour")
    assert idle_alert["text"].endswith(f"cancel it: {PORTAL}/runs/{idle['id']}/cancel/")
    # The OOM-risk alert: the other run, over 95 % of its GPU's memory.
    assert memory_alert["ref"] == f"run:{full['id']}"
    used = memory_alert["details"]["value"]  # 78 of the A100's 80 GiB: 97.5 %
    assert used == pytest.approx(97.5, abs=0.1) and memory_alert["details"]["gpu"].startswith("GPU-")
    assert memory_alert["title"] == (f"Run big-batch (#{full['id']}) of team ml-research: GPU memory {used:.0f}% full "
                                     "(OOM risk)")
    # 5. The idle run's page shows its open alert.
    page = Client()
    page.force_login(member)
    assert 'id="alert-gpu_idle"' in page.get(f"/runs/{idle['id']}/").content.decode()
    # 6. Cancelled, the run's episode closes, silently.
    assert api.post(f"/api/v1/runs/{idle['id']}/cancel/").status_code == 202
    wait_for(lambda: AlertEpisode.objects.filter(ref=f"run:{idle['id']}", alert_kind=AlertKind.IDLE,
                                                 state=AlertEpisode.State.CLOSED).exists(),
             timeout=60, what="the cancelled run's idle episode to close")
    assert len(received(receiver, EventKind.GPU_IDLE)) == 1
