"""A workload's attempts: what each earlier one was (its placement, how it ended, its logs).

An attempt is one go of a workload on a cluster (docs/glossary.md "attempt"), not an apply retry
(``apply_attempts``) nor a pod retry within it (a run's ``max_retries``).

A workload is queued again when it is preempted, its spot node is reclaimed or its cluster is
lost (:func:`workloads.lifecycle.requeue`); its next attempt is another set of pods, perhaps on
another cluster. Its row describes the current attempt; each earlier one is an
:class:`~workloads.models.Attempt`:

* :func:`save_logs` keeps the tail of the current attempt's pod logs before they are gone.
  **Why Slipway saves them** (and does not ask the cluster later): a requeued attempt's objects
  are deleted, and a real cluster serves no log of a deleted pod — the kubelet removes the log
  with the pod, and the API server answers 404 for the pod. Keeping the pods is no option either
  (they would hold the GPUs the preemption frees, and a Job's name is the next attempt's). So
  the preemption reads every pod's tail (at most :data:`SAVED_SOURCES` pods, the picker's first,
  :data:`SAVED_LINES` lines each) just before the delete and again each cycle while the pods
  stop within their grace, when a run prints its last words ("saving checkpoint"). Lines
  printed after the last read are not kept; a lost cluster answers nothing, so nothing is kept.
  The sandbox behaves as a real cluster here: its deleted pods' logs are gone too.
* :func:`close` writes what the attempt was when it is queued again: where it ran and why,
  when it was admitted, applied, started, told to stop and ended, and its last checkpoint;
* :func:`saved_logs` and :func:`attempt_of` serve the pages' and the API's ``?attempt=``.
"""

from __future__ import annotations

import logging
from datetime import datetime

from cluster.errors import ClusterError
from cluster.pods import log_sources
from core.text import whole_number
from workloads.models import Attempt, ReasonCode

logger = logging.getLogger(__name__)

#: Pods whose logs an attempt keeps (the picker's first: a PyTorchJob's Master and first workers,
#: a Job's newest pods), and lines of each (the page shows 200; ``?tail=`` reads up to these).
SAVED_SOURCES = 8
SAVED_LINES = 1000


class UnknownAttempt(LookupError):
    """An attempt number the workload never had (pages and the API answer 404 with these words)."""


def attempt_of(raw: str | None, current: int) -> int | None:
    """The attempt ``?attempt=`` names: None when absent or empty (the current one).

    Raises ``ValueError`` with words for a field error when it is not a whole number of at least
    1, :class:`UnknownAttempt` when the workload has had no such attempt (yet).
    """
    if raw is None or raw == "":
        return None
    # A number too long to read is still a number past the current attempt: a 404 like any other.
    number = whole_number(raw, longer=current + 1)
    if number is None or number < 1:
        raise ValueError(f"Must be a whole number from 1 to {current} (the current attempt).")
    if number > current:
        have = "it has had only attempt 1" if current == 1 else f"its attempts are 1 to {current}"
        # Named as it came, cut: the words of a 404 need not repeat 4,400 digits.
        named = raw.lstrip("0")
        raise UnknownAttempt(f"No attempt {named if len(named) <= 20 else named[:20] + '…'}: {have}.")
    return number


def save_logs(workload, backend, ended_as: str, now: datetime) -> bool:
    """Keep the tail of each of the current attempt's pods' logs (its :class:`Attempt` row, made if need be).

    ``ended_as`` labels pods that have not finished ("preempted"), as the picker labels them once
    the workload has ended. A later read replaces what an earlier one kept of the same pod; a pod
    it no longer finds keeps what was kept of it. False when nothing could be read (the cluster
    did not answer, or the pods are gone already): what an earlier read kept stays.
    """
    try:
        sources = log_sources(backend.pods(workload.address), ended_as)[:SAVED_SOURCES]
    except ClusterError as exc:
        logger.warning("could not read the pods of %s to keep their logs: %s", workload.ref, exc)
        return False
    read = []
    for source in sources:
        try:
            lines = backend.logs(workload.address, source.pod, tail=SAVED_LINES, previous=source.previous)
        except ClusterError:
            continue  # gone between the two calls: what an earlier read kept of it stays
        read.append({"pod": source.pod, "label": source.label, "previous": source.previous, "lines": lines})
    if not read:
        return False
    attempt, _created = Attempt.objects.get_or_create(ref=workload.ref, number=workload.attempt)
    keys = {(entry["pod"], entry["previous"]) for entry in read}
    kept = [entry for entry in attempt.logs if (entry["pod"], entry["previous"]) not in keys]
    Attempt.objects.filter(pk=attempt.pk).update(logs=[*read, *kept], logs_saved_at=now)
    return True


def close(workload, checkpoint: dict | None, now: datetime, reason: str, code: ReasonCode, cause: str = "") -> None:
    """Record what ``workload``'s current attempt was, now that it is queued again (in the caller's
    transaction, with the columns as they were before the requeue cleared them).

    ``checkpoint``: the last one it reported (``{"at", "step", "path"}``), None for none;
    ``cause``: the cause of the preemption that ended it (``PreemptionEvent.Cause``), "" for none.
    """
    kept = None
    if checkpoint is not None:
        kept = {**checkpoint, "at": checkpoint["at"].isoformat() if checkpoint.get("at") else None}
    Attempt.objects.update_or_create(ref=workload.ref, number=workload.attempt, defaults={
        "cluster_id": workload.cluster_id, "placement_reason": workload.placement_reason,
        "placed_at": workload.placed_at, "admitted_at": workload.admitted_at, "applied_at": workload.applied_at,
        "started_at": workload.attempt_started, "stopped_at": workload.preempting_since, "ended_at": now,
        "end_reason_code": code, "cause": cause, "end_reason": reason[:500], "checkpoint": kept,
    })


def earlier(workload) -> list[Attempt]:
    """The workload's earlier attempts that were recorded, oldest first, with their cluster (one query;
    none on a first attempt)."""
    if workload.attempt == 1:
        return []
    return list(Attempt.objects.filter(ref=workload.ref, number__lt=workload.attempt, ended_at__isnull=False)
                .select_related("cluster").order_by("number"))


def saved(workload, number: int) -> Attempt | None:
    """The row of ``workload``'s attempt ``number`` (None: nothing was recorded of it)."""
    return Attempt.objects.filter(ref=workload.ref, number=number).first()
