"""Deliveries on a worker of their own, as scripts/run.sh, docker-compose.yml and deploy/ run them: webhooks that
never answer hold that worker's threads, and the cycle, admission and the canary rule go on in the other.

Measured on 2026-11-30 with one worker of two processes taking every queue (the e2e worker's shape), ten webhooks
that never answered and six events (60 deliveries), 40 s watched: the canary rule ran none of its 20 ticks and the
reconcile cycle 2 of its 8 (at the default 5 s): each delivery held a process for the webhook's whole timeout. Here
the notification worker (``-Q notify``, a pool of threads) is held for the whole test, and runs submitted meanwhile
still start and end, and the canary rule still ticks.
"""

from __future__ import annotations

import socket
from decimal import Decimal

import pytest

from jobs.models import TrainingRun
from notifications.constants import DeliveryStatus
from notifications.models import Delivery, Event
from notifications.services import create_webhook
from quotas.demo import seed_flavors, seed_team_quotas
from tests.e2e.conftest import QUEUES, WorkerProcess, started_worker, wait_for
from tests.jobs.conftest import post_run

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(300)]

#: The dead webhooks' timeout: longer than the test, so the notification worker is held from the first event on.
HOLD_SECONDS = 240
DEAD_WEBHOOKS = 10
ENV = {"SLIPWAY_WEBHOOK_ALLOW_LOOPBACK": "true", "SLIPWAY_WEBHOOK_TIMEOUT_SECONDS": str(HOLD_SECONDS)}
CANARY_TICK = "Task inference.tasks.evaluate_canaries["


@pytest.fixture
def dead_url():
    """A webhook address that takes the connection (the kernel's backlog does) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hook"


@pytest.fixture
def cycle_worker(transactional_db, tmp_path):
    """Every queue but ``notify``, with beat: scripts/run.sh's first worker."""
    process = started_worker(tmp_path / "cycle", queues=tuple(q for q in QUEUES if q != "notify"), **ENV)
    yield process
    process.stop()


@pytest.fixture
def notify_worker(cycle_worker, tmp_path):
    """``notify`` alone, a pool of two threads, no beat: scripts/run.sh's notification worker (smaller)."""
    process = WorkerProcess(tmp_path / "notify", queues=("notify",), beat=False, pool="threads", concurrency=2,
                            name="notify", **ENV)
    process.start()
    yield process
    process.stop()


def sending(worker: WorkerProcess) -> int:
    """How many deliveries ``worker`` is inside of now (its own answer to ``inspect active``)."""
    return sum(task["name"] == "notifications.tasks.deliver" for task in worker.active())


def test_webhooks_that_never_answer_hold_the_notification_worker_and_nothing_else(
        cycle_worker, notify_worker, team, team_admin, member, api_client_for, dead_url):
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 8}, Decimal("200000"))
    api = api_client_for(member)
    for n in range(DEAD_WEBHOOKS):
        create_webhook(team_admin, team, f"{dead_url}/{n}", ["run_succeeded"])
    post_run(api, "1s", name="first", gpus_per_worker=1)
    wait_for(lambda: sending(notify_worker) == 2, timeout=120,
             what=lambda: f"both notification threads inside a POST; active: {notify_worker.active()}")

    ticks = cycle_worker.logs().count(CANARY_TICK)
    later = [post_run(api, "1s", name=f"later-{n}", gpus_per_worker=1)["id"] for n in range(2)]
    wait_for(lambda: TrainingRun.objects.filter(pk__in=later, state="succeeded").count() == 2, timeout=120,
             what=lambda: f"the later runs to succeed: {list(TrainingRun.objects.values_list('name', 'state'))}")
    wait_for(lambda: cycle_worker.logs().count(CANARY_TICK) >= ticks + 6, timeout=60,
             what="three more canary ticks (received and succeeded)")

    # Meanwhile the notification worker never let go: still inside its two POSTs, nothing sent, and the later runs'
    # events recorded by the cycle, waiting for it.
    assert sending(notify_worker) == 2
    assert not Delivery.objects.filter(status=DeliveryStatus.SENT).exists()
    assert {f"run:{pk}" for pk in later} <= set(Event.objects.values_list("ref", flat=True))
