"""The queue, read-only: where a team's queued work stands, why it waits, and what new work would meet.

Positions follow the one order of the queue (:attr:`quotas.models.QueuedRequest.QUEUE_ORDER`:
priority, then FIFO); reasons are :func:`quotas.decide.decide`'s word on each entry against the
figures of this moment (:mod:`quotas.facts`), so a page never words a rule of its own.
:func:`preview` asks the rule what :func:`quotas.admission.admit` would decide now, and
:func:`held_beyond_quota` what no freed quota would start (start estimates).

Nothing here locks or writes: the figures may move as soon as they are read, and the decision
that counts is the admission's, under its lock. Admission answers a replayed, already-queued
request from here (:func:`queue_decision`, :func:`queue_position`), so this module reads the
facts itself and never imports admission.
"""

from __future__ import annotations

from django.db.models import Q
from django.utils import timezone

from billing.services import team_budget_state
from fleet.models import GpuFlavor
from quotas.constants import AdmissionCode, Outcome
from quotas.decide import Decision, ResourceRequest, decide
from quotas.facts import (
    ClusterWaits,
    Windows,
    cohort_figures,
    cohort_of_quotas,
    flavor_quota,
    in_use_of,
    quota_rows,
    request_of,
    team_quotas,
    units_in_use,
)
from quotas.models import QueuedRequest, TeamQuota


def _ahead_of(entry: QueuedRequest) -> Q:
    """Entries admitted before ``entry``: the one tie rule of the queue (:attr:`QueuedRequest.QUEUE_ORDER`).

    Higher priority first; within a priority the earlier submission (``created_at``), and of two
    submitted at the same instant the one recorded first (``pk``). An entry not submitted yet
    (a preview's) is behind everything of its priority, where its submission would land.
    """
    if entry.pk is None:
        return Q(priority__gte=entry.priority)
    return (Q(priority__gt=entry.priority)
            | Q(priority=entry.priority, created_at__lt=entry.created_at)
            | Q(priority=entry.priority, created_at=entry.created_at, pk__lt=entry.pk))


def queue_position(team, entry: QueuedRequest) -> int:
    """``entry``'s 1-based place in the team's queue (one query); an unsaved entry's is where it would land."""
    return QueuedRequest.objects.filter(team=team).filter(_ahead_of(entry)).count() + 1


def queue_positions(team) -> dict[str, int]:
    """``{ref: position}`` of the team's queued workloads, 1-based in admission order (one query)."""
    refs = QueuedRequest.objects.filter(team=team).order_by(*QueuedRequest.QUEUE_ORDER).values_list("ref", flat=True)
    return {ref: i for i, ref in enumerate(refs, start=1)}


def queue_reasons(team) -> dict[str, str]:
    """``{ref: plain-words reason}`` for every queued workload of the team, from current figures."""
    entries = list(QueuedRequest.objects.filter(team=team).select_related("flavor")
                   .order_by(*QueuedRequest.QUEUE_ORDER))
    if not entries:
        return {}
    quotas = team_quotas(team)
    usage = units_in_use(team)
    budget = team_budget_state(team)
    cohort = cohort_of_quotas(quotas)
    waits = ClusterWaits()
    windows = Windows([team.pk], timezone.now())
    reasons = {}
    for entry in entries:
        quota = windows.apply(flavor_quota(entry.flavor, quotas.get(entry.flavor_id), cohort, team.pk),
                              team.pk, entry.flavor_id, entry.for_reservation)
        request = request_of(entry)
        decision = decide(request, usage.get(entry.flavor_id, 0), quota, budget,
                          waits(entry.flavor, entry.spot, request, entry.not_before))
        if decision.admitted:
            # It fits now; the next admit_waiting (at the latest the next reconcile) takes it.
            reasons[entry.ref] = f"about to be admitted: {entry.units}\u00d7 {entry.flavor.name} fit now"
        else:
            reasons[entry.ref] = decision.reason.words
    return reasons


#: Reasons that hold work back for money: no quota freeing up starts it.
MONEY_CODES = (AdmissionCode.WAITING_FOR_BUDGET, AdmissionCode.BUDGET_EXHAUSTED)


def held_beyond_quota(team, candidate: tuple[str, ResourceRequest] | None = None,
                      entries: list[QueuedRequest] | None = None,
                      quotas: dict[int, TeamQuota] | None = None) -> dict[str, Decision]:
    """``{ref: decision}`` of the queued work (and of ``candidate``, a request not submitted yet)
    that would still not be admitted were its flavor's quota all free: waiting for money, for a
    cluster that takes new work (or out a failed provisioning's backoff), or asking for more than the team may ever hold. Work not named here waits for quota alone.

    For start estimates (:mod:`workloads.estimates.forecast`): such work is not ahead of anyone (the
    queue is best-effort, :func:`quotas.admission.admit_waiting` passes it), and no end of other work starts it.
    ``entries`` (with their flavors) and ``quotas`` (:func:`team_quotas`) are the team's when the
    caller read them already.
    """
    if entries is None:
        entries = list(QueuedRequest.objects.filter(team=team).select_related("flavor"))
    if not entries and candidate is None:
        return {}
    quotas = team_quotas(team) if quotas is None else quotas
    budget = team_budget_state(team)
    requests = [(entry.ref, request_of(entry), entry.flavor, entry.not_before) for entry in entries]
    if candidate is not None:
        ref, request = candidate
        flavor = GpuFlavor.objects.filter(name=request.flavor).first()
        requests.append((ref, request, flavor, None))
    cohort = cohort_of_quotas(quotas)
    waits = ClusterWaits()
    windows = Windows([team.pk], timezone.now())
    held = {}
    for ref, request, flavor, not_before in requests:
        quota = quotas.get(flavor.pk) if flavor is not None else None
        facts = windows.apply(flavor_quota(flavor, quota, cohort, team.pk).idle(), team.pk,
                              flavor.pk if flavor is not None else None, request.for_reservation)
        # A backoff after a failed provisioning holds it back too, as admission's own ``waits`` says.
        decision = decide(request, 0, facts, budget, waits(flavor, request.spot, request, not_before))
        if not decision.admitted:
            held[ref] = decision
    return held


def queue_reason(team, ref: str) -> str:
    """The current reason ``ref`` waits, or "" when it is not queued."""
    return queue_reasons(team).get(ref, "")


def queue_decision(team, ref: str) -> Decision:
    """The queued Decision of an already-queued ``ref`` (its current reason and position)."""
    return Decision.of(Outcome.QUEUE, AdmissionCode.WAITING_FOR_QUOTA, queue_reason(team, ref),
                       position=queue_positions(team).get(ref))


def preview(team, request: ResourceRequest) -> Decision:
    """What :func:`quotas.admission.admit` would decide for ``request`` right now, without locking or writing.

    For the portal's live "would it start now?" preview; the real decision is the admission's.
    """
    quota = quota_rows().filter(team=team, flavor__name=request.flavor).first()
    flavor = quota.flavor if quota is not None else GpuFlavor.objects.filter(name=request.flavor).first()
    usage = in_use_of(team, flavor.pk) if quota is not None else 0
    budget = team_budget_state(team) if quota is not None else None
    cohort = cohort_figures(quota.cohort_of_team) if quota is not None else None
    facts = Windows([team.pk], timezone.now()).apply(flavor_quota(flavor, quota, cohort, team.pk), team.pk,
                                                     flavor.pk if flavor is not None else None, request.for_reservation)
    return decide(request, usage, facts, budget, ClusterWaits()(flavor, request.spot, request))
