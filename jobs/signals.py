"""Receivers that connect jobs to the quotas app's signals (quotas never imports jobs)."""

from __future__ import annotations

from django.dispatch import receiver
from django.utils import timezone

from jobs.constants import Reason, RunState
from jobs.models import TrainingRun
from quotas.signals import workload_admitted


@receiver(workload_admitted, dispatch_uid="jobs.run_admitted")
def run_admitted(sender, ref: str, team, **kwargs) -> None:
    """A queued run got its reservation: mark it admitted and have its objects created.

    Runs inside ``admit_waiting``'s transaction, so the state change commits together with
    the reservation; the task is published only after that commit.
    """
    pk = TrainingRun.pk_from_ref(ref)
    if pk is None:
        return
    updated = TrainingRun.objects.filter(pk=pk, state=RunState.QUEUED).update(
        state=RunState.ADMITTED, admitted_at=timezone.now(), reason=Reason.WAITING_FOR_WORKER
    )
    if updated:
        from jobs.services import enqueue_create

        enqueue_create(pk)
