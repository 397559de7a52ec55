"""Old events go with their deliveries once they are done; anything still to be delivered stays."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from notifications import delivery, events, tasks
from notifications.constants import DeliveryStatus
from notifications.models import Delivery, Event
from notifications.services import set_email_kinds

pytestmark = pytest.mark.django_db


@pytest.fixture
def subscribed(team, member):
    set_email_kinds(member, team, ["run_failed"])
    return member


def event(team, name: str, days_old: float, status: str | None = DeliveryStatus.SENT) -> str:
    """Event ``name`` recorded ``days_old`` days ago; fanned out with its one delivery in ``status``
    (None: never fanned out)."""
    key = events.record("run_failed", team, f"run_failed:{name}", f"Run {name} failed", "OOMKilled.")
    if status is not None:
        delivery.fan_out(key)
        Delivery.objects.filter(event__key=key).update(status=status)
    Event.objects.filter(key=key).update(created_at=timezone.now() - timedelta(days=days_old))
    return key


def test_done_events_past_the_keep_days_go_with_their_deliveries(team, subscribed, settings):
    settings.SLIPWAY_NOTIFY_KEEP_DAYS = 90
    sent, failed = event(team, "sent", 91), event(team, "failed", 120, DeliveryStatus.FAILED)
    recent = event(team, "recent", 89)
    pending = event(team, "pending", 200, DeliveryStatus.PENDING)  # a retry still due: delivered first
    sending = event(team, "sending", 200, DeliveryStatus.SENDING)
    unfanned = event(team, "unfanned", 200, status=None)  # the sweep fans it out first
    assert Delivery.objects.count() == 5
    assert tasks.prune() == 2
    assert set(Event.objects.values_list("key", flat=True)) == {recent, pending, sending, unfanned}
    assert not Delivery.objects.filter(event__key__in=[sent, failed]).exists()
    assert Delivery.objects.count() == 3
    assert tasks.prune() == 0  # nothing more to do


def test_zero_keep_days_keeps_every_event(team, subscribed, settings):
    settings.SLIPWAY_NOTIFY_KEEP_DAYS = 0
    event(team, "ancient", 3650)
    assert tasks.prune() == 0
    assert Event.objects.count() == 1


def test_a_large_backlog_goes_in_batches(team, subscribed, settings):
    settings.SLIPWAY_NOTIFY_KEEP_DAYS = 1
    for i in range(5):
        event(team, f"old{i}", 2)
    assert [delivery.prune(timezone.now(), batch=2) for _ in range(4)] == [2, 2, 1, 0]
    assert not Event.objects.exists() and not Delivery.objects.exists()


def test_beat_prunes_every_hour(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["notifications-prune"]
    assert entry["task"] == tasks.prune.name and entry["schedule"] == 3600.0
