"""Where notifications wait on the real broker: a burst of them leaves the ``default`` queue to the beat tasks.

An event fans out to one delivery task per webhook or subscriber, and a delivery to a slow or dead webhook holds a
worker for up to its timeout. On the ``default`` queue (first in, first out) such a burst sat in front of the canary
rule's and the stdout reader's beat messages, which expire after two of their own periods: measured with a real
worker (ten webhooks answering in 1 s each, six events, 40 s), the canary rule ran 4 of its 20 ticks and 6 of 21, the
rest expired unrun; 20 of 20 with the deliveries on a queue of their own. Deliveries now wait on the ``notify``
queue, which workers of their own consume (test_notify_worker_e2e.py; docs/operations.md "A slow boot"). Here the
burst is published while no worker consumes, and Redis's lists are read as they are.
"""

from __future__ import annotations

import pytest
from django.conf import settings

from inference.tasks import evaluate_canaries
from notifications import events
from notifications.models import Delivery
from notifications.services import create_webhook
from notifications.tasks import fan_out

pytestmark = [pytest.mark.django_db, pytest.mark.redis]
WEBHOOKS = 5


def tasks(broker, queue: str) -> list[str]:
    """The tasks of the messages waiting on ``queue``, oldest first."""
    return [headers["task"] for headers in broker.waiting(queue)]


def test_an_events_deliveries_wait_on_their_own_queue_not_in_front_of_the_beat_tasks(broker, team, team_admin):
    for n in range(WEBHOOKS):
        create_webhook(team_admin, team, f"https://hooks.example.com/{n}", ["run_succeeded"])
    keys = [events.record("run_succeeded", team, f"burst:{n}", "Run done", "It ended.") for n in range(2)]
    for key in keys:
        fan_out.apply_async(args=(key,))  # as the cycle publishes it after recording the event
        fan_out(key)  # a worker runs it: one delivery task per webhook
    evaluate_canaries.apply_async(**settings.CELERY_BEAT_SCHEDULE["canary-evaluate"]["options"])

    assert tasks(broker, "default") == ["inference.tasks.evaluate_canaries"]  # nothing ahead of it
    notify = tasks(broker, "notify")
    assert notify.count("notifications.tasks.fan_out") == len(keys)
    assert notify.count("notifications.tasks.deliver") == len(keys) * WEBHOOKS == Delivery.objects.count()
