"""Receivers turning the lower apps' moves into events (connected in :meth:`NotificationsConfig.ready`).

Each runs inside the transaction of the move it reports (see :mod:`notifications.events`) and
publishes the event's fan-out only after that transaction commits (``core.queueing``).
"""

from __future__ import annotations

from django.db.models.signals import post_save
from django.dispatch import receiver

from core.queueing import publish_on_commit
from notifications import events, tasks
from quotas.models import PreemptionEvent
from teams.models import AuditEvent
from teams.services import listen_for
from workloads.events import alert_opened, preemption_settled, workload_moved
from workloads.models import AlertEpisode


def _fan_out_after_commit(key: str | None) -> None:
    if key is not None:
        publish_on_commit(tasks.fan_out, key)


@receiver(workload_moved, dispatch_uid="notifications.workload_moved")
def on_workload_moved(sender, workload, state: str, reason: str, at, **kwargs) -> None:
    """A run ended, an endpoint degraded (the reconcile cycle, or a failure elsewhere)."""
    _fan_out_after_commit(events.workload_moved(sender, workload, state, reason, at))


@receiver(post_save, sender=PreemptionEvent, dispatch_uid="notifications.preempted")
def on_preempted(sender, instance: PreemptionEvent, created: bool, raw: bool = False, **kwargs) -> None:
    """A workload was preempted without a grace (a spot interruption, an endpoint's burst): its row,
    written in the preempting transaction, is final. One with a grace is told once its pods are gone."""
    if created and not raw and instance.final_when_written:
        _fan_out_after_commit(events.preempted(instance))


@receiver(preemption_settled, sender=PreemptionEvent, dispatch_uid="notifications.preemption_settled")
def on_preemption_settled(sender, event: PreemptionEvent, **kwargs) -> None:
    """A preemption with a grace: its pods are gone and its lost work is final (the same words as the page's)."""
    _fan_out_after_commit(events.preempted(event))


listen_for(AuditEvent.Action.BUDGET_ALERT)  # never written through audit_write, which sends no post_save


@receiver(post_save, sender=AuditEvent, dispatch_uid="notifications.budget_alert")
def on_audit(sender, instance: AuditEvent, created: bool, raw: bool = False, **kwargs) -> None:
    """A team's budget alert (audited once a month, in its own transaction, by quotas.services)."""
    if created and not raw and instance.action == AuditEvent.Action.BUDGET_ALERT and instance.team is not None:
        _fan_out_after_commit(events.budget_alert(instance))


@receiver(alert_opened, sender=AlertEpisode, dispatch_uid="notifications.alert_opened")
def on_alert_opened(sender, episode: AlertEpisode, workload, **kwargs) -> None:
    """An alert episode on a workload's GPUs opened (the reconcile cycle): its one message."""
    _fan_out_after_commit(events.alert_opened(episode, workload))
