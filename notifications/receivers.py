"""Receivers turning the lower apps' signals into events (connected in :meth:`NotificationsConfig.ready`;
docs/architecture.md "Upward: signals").

Each runs inside the transaction of the move it reports (see :mod:`notifications.events`) and
publishes the event's fan-out only after that transaction commits (``core.queueing``).
"""

from __future__ import annotations

from django.dispatch import receiver

from billing.events import budget_alert
from billing.models import PreemptionEvent
from core.queueing import publish_on_commit
from notifications import events, tasks
from reservations.events import reservation_moved
from reservations.models import Reservation
from sweeps.events import sweep_finished
from sweeps.models import Sweep
from teams.models import AuditEvent
from workloads.events import alert_opened, preemption_settled, workload_moved
from workloads.models import AlertEpisode


def _fan_out_after_commit(key: str | None) -> None:
    if key is not None:
        publish_on_commit(tasks.fan_out, key)


@receiver(workload_moved, dispatch_uid="notifications.workload_moved")
def on_workload_moved(sender, workload, state: str, reason: str, at, **kwargs) -> None:
    """A run ended, an endpoint degraded (the reconcile cycle, or a failure elsewhere)."""
    _fan_out_after_commit(events.workload_moved(sender, workload, state, reason, at))


@receiver(preemption_settled, sender=PreemptionEvent, dispatch_uid="notifications.preemption_settled")
def on_preemption_settled(sender, event: PreemptionEvent, **kwargs) -> None:
    """A preemption's lost work is final (the same words as the page's): as its row is written when it
    has no grace (a spot interruption, an endpoint's burst), once its pods are gone when it has one."""
    _fan_out_after_commit(events.preempted(event))


@receiver(budget_alert, sender=AuditEvent, dispatch_uid="notifications.budget_alert")
def on_budget_alert(sender, audit_event: AuditEvent, **kwargs) -> None:
    """A team's budget alert (audited once a month, in its own transaction, by quotas.services)."""
    if audit_event.team is not None:
        _fan_out_after_commit(events.budget_alert(audit_event))


@receiver(alert_opened, sender=AlertEpisode, dispatch_uid="notifications.alert_opened")
def on_alert_opened(sender, episode: AlertEpisode, workload, **kwargs) -> None:
    """An alert episode on a workload's GPUs opened (the reconcile cycle): its one message."""
    _fan_out_after_commit(events.alert_opened(episode, workload))


@receiver(reservation_moved, sender=Reservation, dispatch_uid="notifications.reservation_moved")
def on_reservation_moved(sender, reservation, move: str, at, **kwargs) -> None:
    """A booking made, approved, declined or cancelled (reservations.services)."""
    _fan_out_after_commit(events.reservation_moved(reservation, move, at))


@receiver(sweep_finished, sender=Sweep, dispatch_uid="notifications.sweep_finished")
def on_sweep_finished(sender, sweep, at, **kwargs) -> None:
    """A sweep ended (sweeps.driver): its best trial and its money."""
    _fan_out_after_commit(events.sweep_finished(sweep, at))
