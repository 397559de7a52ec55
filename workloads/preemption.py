"""Reclaim in action: take borrowed units back for a team under its nominal quota (DESIGN §9).

Each reconcile cycle, after queued work was admitted (:func:`reclaim`):

1. for every cohort that reclaims and has queued work, the cohort's figures are read and each
   queued request is put to :func:`quotas.reclaim.choose_victims` (the pure rule: who, and
   why not);
2. each victim gets its **notice**: a preemption log row (:class:`quotas.models.PreemptionEvent`),
   an audit row, the reason "being preempted: …" and ``preempting_since``; then its kind acts —
   a run's objects are deleted with the grace period (its checkpoint contract's ``grace_seconds``, else
   ``SLIPWAY_PREEMPTION_GRACE_SECONDS``; its checkpoint claim stays for the next attempt), an
   endpoint's burst shrinks (:meth:`workloads.registry.WorkloadKind.preempt`);
3. a run being preempted keeps its reservation until its objects are gone (:func:`follow`, from
   the cycle's observation), so the reclaiming team's work never runs beside the pods it
   replaces; then it goes back to ``queued`` at its old queue position, its segment billed to
   that moment (the grace is billed), ``preemptions`` counted, no retry spent
   (:func:`workloads.lifecycle.requeue`).

The choice takes no lock: it is advice, and every act on it is a conditional update (a victim
already stopping or ended is skipped), so a cycle replayed or racing a user's action preempts
nothing twice. Work that stops on its own during the grace ends as it would have.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F

from cluster.errors import ClusterError
from quotas import admission, fairshare
from quotas.ledger import interval_cost, interval_gpu_hours
from quotas.models import Cohort, PreemptionEvent, QueuedRequest, Reservation
from quotas.reclaim import Candidate, Claim, Rules, Verdict, choose_victims
from teams.models import AuditEvent
from teams.services import audit
from workloads import lifecycle
from workloads.identity import WorkloadId
from workloads.models import ReasonCode
from workloads.registry import WorkloadKind, kind_for, kinds

logger = logging.getLogger(__name__)


def reclaim(backend, now: datetime) -> list[str]:
    """Step 1–2 for every cohort that may reclaim; returns the refs preempted now."""
    preempted: list[str] = []
    cohorts = (Cohort.objects.exclude(reclaim=Cohort.Reclaim.NEVER)
               .filter(members__team__queued_requests__isnull=False).distinct())
    for cohort in cohorts:
        for victim, claim, claimant in _victims(cohort, now):
            if _preempt(backend, victim, claim, claimant, now):
                preempted.append(victim.ref)
    return preempted


def _stopping_refs(team_ids) -> set[str]:
    """Refs of the members' work whose pods are stopping for a preemption (one query per kind)."""
    refs: set[str] = set()
    for kind in kinds():
        pks = kind.model.objects.filter(team_id__in=team_ids, preempting_since__isnull=False).values_list("pk", flat=True)
        refs.update(kind.identity(pk).ref for pk in pks)
    return refs


def _victims(cohort: Cohort, now: datetime) -> list[tuple[Candidate, Claim, int]]:
    """``(victim, claim, claimant team id)`` for the cohort's queue, one claim after another.

    Victims chosen for an earlier claim count as stopping for the later ones, so two claims
    never take the same units.
    """
    figures = admission.cohort_figures(cohort.pk)
    entries = list(QueuedRequest.objects.filter(team_id__in=figures.slugs).select_related("flavor")
                   .order_by(*QueuedRequest.QUEUE_ORDER))
    if not entries:
        return []
    rules = Rules(cohort.reclaim, timedelta(minutes=cohort.min_runtime_minutes),
                  timedelta(seconds=cohort.preemption_delay_seconds))
    stopping = _stopping_refs(figures.slugs)
    held = list(Reservation.objects.held().filter(team_id__in=figures.slugs, borrowed_units__gt=0))
    remembered = fairshare.remembered_units(list(figures.slugs), now)  # victim teams: highest share first
    chosen: list[tuple[Candidate, Claim, int]] = []
    for entry in entries:
        shares = fairshare.shares(figures, entry.flavor_id, remembered)
        candidates = [_candidate(r, figures.slugs, stopping, shares) for r in held if r.flavor_id == entry.flavor_id]
        claim = Claim(figures.slugs[entry.team_id], entry.ref, entry.units, entry.priority, entry.created_at)
        key = (entry.team_id, entry.flavor_id)
        quota = admission.flavor_quota(entry.flavor, figures.quotas.get(key), figures, entry.team_id)
        verdict: Verdict = choose_victims(claim, quota, figures.usage.get(key, 0), candidates, rules, now)
        for victim in verdict.victims:
            stopping.add(victim.ref)
            chosen.append((victim, claim, entry.team_id))
    return chosen


def _candidate(reservation: Reservation, slugs: dict[int, str], stopping: set[str],
               shares: dict[int, float]) -> Candidate:
    identity = WorkloadId.from_ref(reservation.ref)
    kind = kind_for(identity.prefix) if identity is not None else None
    burst = kind is not None and kind.preempts_burst
    return Candidate(ref=reservation.ref, team=slugs[reservation.team_id],
                     units=reservation.borrowed_units if burst else reservation.units,
                     borrowed=reservation.borrowed_units, priority=reservation.priority,
                     admitted_at=reservation.created_at, burst=burst, share=shares.get(reservation.team_id, 0.0),
                     stopping=reservation.ref in stopping)


def _lost(workload, units: int, burst: bool, now: datetime) -> tuple:
    """``(GPU-hours, cost, since)`` of the work a preemption throws away: a run's since its start
    (checkpoints come with the next issue); none for an endpoint's burst, which serves, not computes."""
    if burst or workload.started_at is None:
        return Decimal(0), Decimal(0), None
    since, flavor = workload.started_at, workload.flavor
    return (interval_gpu_hours(flavor.gpu_fraction, units, since, now),
            interval_cost(flavor.price(workload.spot), units, since, now), since)


def lost_words(since: datetime | None, now: datetime) -> str:
    if since is None:
        return "no work lost"
    minutes = int((now - since).total_seconds() // 60)
    return f"{minutes} min of work since its start lost"


def _preempt(backend, victim: Candidate, claim: Claim, claimant_id: int, now: datetime) -> bool:
    """Give one victim its notice and have its kind act; False when it was no longer there to preempt."""
    identity = WorkloadId.from_ref(victim.ref)
    kind = kind_for(identity.prefix) if identity is not None else None
    if kind is None:
        return False
    live = kind.model.objects.filter(pk=identity.pk, state__in=kind.model.HOLDING_STATES, preempting_since__isnull=True)
    workload = live.select_related("team", "flavor", "created_by").first()
    if workload is None:
        return False
    burst = kind.preempts_burst
    flavor = workload.flavor.name
    gpu_hours, cost, since = _lost(workload, victim.units, burst, now)
    reason = f"preempted: team {claim.team} reclaimed {victim.units}\u00d7 {flavor} of its quota; {lost_words(since, now)}"
    seconds = 0 if burst else kind.preemption_grace(workload)
    changes = {"last_preempted_at": now, "preemptions": F("preemptions") + 1}
    if not burst:
        changes.update(preempting_since=now, reason_code=ReasonCode.PREEMPTING,
                       reason=(f"being preempted: team {claim.team} reclaims {victim.units}\u00d7 {flavor} of its "
                               f"quota; its pods stop within {seconds} s")[:500])
    with transaction.atomic():
        if not live.update(**changes):
            return False
        PreemptionEvent.objects.create(
            ref=workload.ref, team=workload.team, by_team_id=claimant_id, for_ref=claim.ref, user=workload.created_by,
            flavor=workload.flavor, units=victim.units, reason=reason[:500], grace_seconds=seconds,
            lost_gpu_hours=gpu_hours, lost_cost=cost, currency=settings.SLIPWAY_CURRENCY, at=now)
        audit(AuditEvent.Action.WORKLOAD_PREEMPTED, team=workload.team, target=workload.ref,
              by_team=claim.team, units=victim.units, flavor=flavor, for_ref=claim.ref, reason=reason)
    if burst:
        kind.shrink_burst(workload, victim.units, reason, now)
    else:
        _delete(kind, backend, workload, seconds)
    return True


def _delete(kind: WorkloadKind, backend, workload, grace_seconds: int) -> None:
    try:
        # Not what outlives attempts (a run's checkpoint claim): the next attempt resumes from it.
        backend.delete(workload.address, kind.attempt_resources, grace_seconds=grace_seconds)
    except ClusterError as exc:  # the next cycle tries again (follow)
        logger.warning("could not delete preempted %s: %s", workload.ref, exc)


def follow(kind: WorkloadKind, backend, workload, observed: bool, now: datetime) -> bool:
    """Step 3 for a workload being preempted: requeue it once its objects are gone. True when it was.

    Past the grace its objects are deleted again, at once (a delete lost to a cluster error, or
    pods that ignore SIGTERM); its quota stays held until they are gone.
    """
    if not observed:
        return lifecycle.requeue(kind, workload, now)
    if now >= workload.preempting_since + timedelta(seconds=kind.preemption_grace(workload)):
        _delete(kind, backend, workload, 0)
    return False


def preempted_then(preempted: str, waiting: str) -> str:
    """A preempted workload's reason while it waits again: who took its units, then why it waits now."""
    return f"{preempted}; now {waiting}" if waiting else preempted


def queued_reason(workload, waiting: str) -> str:
    """The reason of a queued ``workload`` given the queue's words for it now (one query when it was preempted)."""
    if workload.reason_code != ReasonCode.PREEMPTED:
        return waiting
    return preempted_then(last_reasons([workload.ref]).get(workload.ref, workload.reason), waiting)


def last_reasons(refs: list[str]) -> dict[str, str]:
    """``{ref: the words of its latest preemption}`` (one query; {} for none)."""
    if not refs:
        return {}
    latest: dict[str, str] = {}
    for ref, reason in PreemptionEvent.objects.filter(ref__in=refs).order_by("ref", "-at", "-pk").values_list(
            "ref", "reason"):
        latest.setdefault(ref, reason)
    return latest
