"""Receivers connecting the shared machinery to the quotas app's signals (quotas never imports workloads)."""

from __future__ import annotations

from django.dispatch import receiver
from django.utils import timezone

from quotas.events import workload_admitted
from workloads.constants import Message
from workloads.identity import WorkloadId
from workloads.models import ReasonCode
from workloads.registry import kind_for
from workloads.services import enqueue_apply


@receiver(workload_admitted, dispatch_uid="workloads.workload_admitted")
def admitted_from_queue(sender, ref: str, team, **kwargs) -> None:
    """A queued workload got its hold: mark it admitted and have its objects applied.

    Runs inside ``admit_waiting``'s transaction, so the state change commits together with
    the hold; the task is published only after that commit.
    """
    identity = WorkloadId.from_ref(ref)
    kind = kind_for(identity.prefix) if identity else None
    if kind is None:
        return
    updated = kind.model.objects.filter(pk=identity.pk, state=kind.lifecycle.queued).update(
        state=kind.lifecycle.admitted, admitted_at=timezone.now(), reason=Message.WAITING_FOR_WORKER,
        reason_code=ReasonCode.WAITING_FOR_WORKER)
    if updated:
        enqueue_apply(identity)
