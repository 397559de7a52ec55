"""End to end with a real Celery worker process: a run ends in the sandbox, the worker's reconcile
cycle records the event, and the worker delivers it to a real receiver on 127.0.0.1 — retried
after a 500, and once per event across a SIGKILL of the worker in the middle of a POST.

Nothing is eager: the API publishes to Redis, ``celery worker -B`` (tests/e2e/conftest.py, one for
the module) runs the reconcile cycle every half second and the notification sweep every second.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest

from jobs.models import TrainingRun
from notifications.constants import DeliveryStatus
from notifications.models import Delivery, Event
from notifications.services import create_webhook
from quotas.demo import seed_flavors, seed_team_quotas
from tests.e2e.conftest import WorkerProcess, lend, module_worker, wait_for
from tests.jobs.conftest import post_run

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def shared_notify_worker(django_db_setup, tmp_path_factory):
    """The module's e2e worker with the receiver allowed, quick retries and a sweep every second."""
    yield from module_worker(tmp_path_factory, SLIPWAY_WEBHOOK_ALLOW_LOOPBACK="true",
                             SLIPWAY_WEBHOOK_BACKOFF_SECONDS="0.5", SLIPWAY_WEBHOOK_TIMEOUT_SECONDS="1",
                             SLIPWAY_WEBHOOK_MAX_ATTEMPTS="30", SLIPWAY_NOTIFY_SWEEP_SECONDS="1")


@pytest.fixture
def notify_worker(transactional_db, shared_notify_worker):
    """The module's worker, lent to one test (tests/e2e/conftest.py :func:`lend`)."""
    yield from lend(shared_notify_worker)


@pytest.fixture
def api(team, member, api_client_for):
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 8}, Decimal("200000"))
    return api_client_for(member)


@pytest.fixture
def hooked(team, team_admin, receiver):
    _hook, receiver.secret = create_webhook(team_admin, team, receiver.url, ["run_succeeded"])
    return receiver


def sent(count: int):
    return lambda: Delivery.objects.filter(status=DeliveryStatus.SENT).count() >= count


def test_a_finished_run_is_delivered_signed_and_retried_after_a_500(notify_worker: WorkerProcess, api, hooked):
    hooked.statuses = [500]
    run = post_run(api, "1s", name="notified", gpus_per_worker=1)
    wait_for(sent(1), timeout=90, what=f"the delivery to be sent; worker log:\n{notify_worker.logs()[-3000:]}")
    event = Event.objects.get()
    assert (event.event_kind, event.ref) == ("run_succeeded", f"run:{run['id']}")
    assert [(got.delivery, got.verified) for got in hooked.got] == [(str(event.pk), True)] * 2
    assert hooked.got[0].body["text"] == f"Run notified (#{run['id']}) of team ml-research succeeded."
    row = Delivery.objects.get()
    assert (row.attempts, row.response_code, row.last_error) == (2, 200, "")


def test_each_event_is_delivered_once_across_a_worker_sigkill_mid_post(notify_worker: WorkerProcess, api, hooked):
    hooked.hold = True  # the first POST stays open: the worker is inside it when it is killed
    runs = [post_run(api, "1s", name=f"kill-{n}", gpus_per_worker=1) for n in range(3)]
    assert hooked.holding.wait(90), notify_worker.logs()[-3000:]
    notify_worker.kill()
    held = hooked.got[0].delivery
    # What the worker had recorded sent when it died: those are never sent again. The others may be: the held
    # POST surely, and any other the second pool process had in flight (its POST may have reached the
    # receiver, its "sent" not the database).
    sent_at_kill = {str(event_id) for event_id in Delivery.objects.filter(status=DeliveryStatus.SENT)
                    .values_list("event_id", flat=True)}
    hooked.release.set()
    notify_worker.start()
    wait_for(sent(3), timeout=120, what=f"three deliveries sent; worker log:\n{notify_worker.logs()[-3000:]}")
    # 1. One event per run, one delivery per event, each recorded sent once.
    assert sorted(Event.objects.values_list("ref", flat=True)) == sorted(f"run:{r['id']}" for r in runs)
    assert Delivery.objects.count() == 3
    assert TrainingRun.objects.filter(state="succeeded").count() == 3
    # 2. The receiver saw every event, each request signed; only a POST the kill cut off came again (the
    #    held one, and one the other pool process had in flight, if any), once, with the same delivery id,
    #    which is what a receiver dedupes on; none the worker had recorded sent.
    ids = Counter(got.delivery for got in hooked.got)
    assert set(ids) == {str(pk) for pk in Event.objects.values_list("pk", flat=True)}
    assert all(got.verified for got in hooked.got)
    again = {delivery: n for delivery, n in ids.items() if n > 1}
    assert again[held] == 2 and set(again.values()) == {2}, again
    assert not set(again) & sent_at_kill, (again, sent_at_kill)
    # 3. Nothing is sent again later: let the sweep run a few more times, then count again.
    sweeps = notify_worker.logs().count("notifications.tasks.sweep")
    wait_for(lambda: notify_worker.logs().count("notifications.tasks.sweep") >= sweeps + 6, timeout=30,
             what="two more sweeps")
    assert Counter(got.delivery for got in hooked.got) == ids
