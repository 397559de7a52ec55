"""Reclaim in action: take borrowed units back for a team under its nominal quota (docs/design.md "Sharing, preemption, clusters").

Reclaim chooses the victims; preemption is what happens to each (docs/glossary.md "reclaim",
"preemption"): notice, graceful delete, back to the queue as its next attempt.

Each reconcile cycle, after queued work was admitted (:func:`reclaim`):

1. for every cohort that reclaims and has queued work, the cohort's figures are read and each
   queued request is put to :func:`quotas.reclaim.choose_victims` (the pure rule: who, and
   why not — the least work lost first, each candidate's last start, checkpoint, price and
   preemptions read from its workload: :func:`candidate_of`);
2. each victim gets its **notice**: a preemption log row (:class:`billing.models.PreemptionEvent`),
   an audit row, the reason "being preempted: …" and ``preempting_since``; then its kind acts —
   the tail of its pods' logs is saved (:mod:`workloads.attempts`: no cluster serves a deleted
   pod's log), a run's objects are deleted with the grace period (its checkpoint contract's
   ``grace_seconds``, else ``SLIPWAY_PREEMPTION_GRACE_SECONDS``; its checkpoint claim stays for
   the next attempt), an endpoint's burst shrinks (:meth:`workloads.registry.Bursts.shrink_burst`);
3. a run being preempted keeps its hold until its objects are gone (:func:`follow`, from
   the cycle's observation, which also gives the notice and the graceful delete again when they
   were lost, and saves their logs again, with what they print while they stop), so the
   reclaiming team's work never runs beside the pods it replaces; then it goes back to
   ``queued`` at its old queue position, its segment billed to that moment (the grace is
   billed), ``preemptions`` counted, no retry spent, and what the attempt was (its placement,
   times, checkpoint) kept beside its saved logs (:func:`workloads.lifecycle.requeue`).

The choice takes no lock: it is advice, and every act on it is a conditional update (a victim
already stopping or ended is skipped), so a cycle replayed or racing a user's action preempts
nothing twice. Work that stops on its own during the grace ends as it would have.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F

import fleet.services as fleet
from billing.ledger import interval_cost, interval_gpu_hours
from billing.models import INTERRUPTIONS, PreemptionEvent, QuotaHold
from cluster.backends.base import NOTICE_ANNOTATION, ObservedWorkload
from cluster.errors import ClusterError
from core.priority import Priority
from quotas import fairshare
from quotas.facts import ClusterWaits, cohort_figures, flavor_quota, team_quotas, units_in_use
from quotas.models import Cohort, QueuedRequest, TeamSharing
from quotas.reclaim import Candidate, Claim, Rules, Verdict, choose_own_victims, choose_victims, lost_span
from teams.models import AuditEvent
from teams.services import audit
from workloads import attempts, lifecycle
from workloads.events import preemption_settled
from workloads.identity import WorkloadId
from workloads.models import STOP_CODES, ReasonCode
from workloads.registry import Bursts, Checkpoints, Reactions, WorkloadKind, kind_for, kinds, labels

logger = logging.getLogger(__name__)

#: How the saved logs label a preempted (interrupted, stopped) attempt's pods that had not finished ("attempt 1 (preempted)").
PREEMPTED_LABEL, INTERRUPTED_LABEL, STOPPED_LABEL = "preempted", "interrupted", "stopped"


def reclaim(now: datetime) -> list[str]:
    """Step 1–2 for every cohort that may reclaim; returns the refs preempted now.

    Each victim is stopped on the cluster it was placed on (a cohort spans every cluster).
    """
    preempted: list[str] = []
    cohorts = (Cohort.objects.exclude(reclaim=Cohort.Reclaim.NEVER)
               .filter(members__team__queued_requests__isnull=False).distinct())
    for cohort in cohorts:
        for victim, claim, claimant in _victims(cohort, now):
            if preempt(victim, claim, claimant, now):
                preempted.append(victim.ref)
    # Within-team priority: full teams that allow it, with high-priority work queued.
    teams = (TeamSharing.objects.filter(within_team_preemption=True,
                                        team__queued_requests__priority=Priority.HIGH.rank)
             .select_related("team", "cohort").distinct())
    for sharing in teams:
        for victim, claim, claimant in _own_victims(sharing, now):
            if preempt(victim, claim, claimant, now, within_team=True):
                preempted.append(victim.ref)
    return preempted


def _own_victims(sharing: TeamSharing, now: datetime) -> list[tuple[Candidate, Claim, int]]:
    """``(victim, claim, team id)`` of a team's queued high-priority work against its own lower-priority
    work (:func:`quotas.reclaim.choose_own_victims`), claims in queue order as for a cohort.

    The delay and min runtime are its cohort's, or a cohort's defaults outside one.
    """
    team = sharing.team
    entries = list(QueuedRequest.objects.filter(team=team, priority=Priority.HIGH.rank).select_related("flavor")
                   .order_by(*QueuedRequest.QUEUE_ORDER))
    cohort = sharing.cohort or Cohort()
    rules = Rules(cohort.reclaim, timedelta(minutes=cohort.min_runtime_minutes),
                  timedelta(seconds=cohort.preemption_delay_seconds))
    figures = cohort_figures(sharing.cohort_id)
    quotas = team_quotas(team)
    usage = units_in_use(team)
    stopping = stopping_refs([team.pk])
    held = list(QuotaHold.objects.held().filter(team=team, priority__lt=Priority.HIGH.rank))
    workloads = held_workloads(held)
    waits = ClusterWaits()
    chosen: list[tuple[Candidate, Claim, int]] = []
    for entry in entries:
        if waits(entry.flavor, entry.spot, None, entry.not_before):
            continue  # it waits for a cluster, not units: stopping others' work would not start it
        candidates = [candidate_of(r, workloads.get(r.ref), {team.pk: team.slug}, stopping, {}, now)
                      for r in held if r.flavor_id == entry.flavor_id]
        claim = Claim(team.slug, entry.ref, entry.units, entry.priority, entry.created_at)
        quota = flavor_quota(entry.flavor, quotas.get(entry.flavor_id), figures, team.pk)
        verdict = choose_own_victims(claim, quota, usage.get(entry.flavor_id, 0), candidates, rules, now)
        for victim in verdict.victims:
            stopping.add(victim.ref)
            chosen.append((victim, claim, team.pk))
    return chosen


def stopping_refs(team_ids) -> set[str]:
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
    figures = cohort_figures(cohort.pk)
    entries = list(QueuedRequest.objects.filter(team_id__in=figures.slugs).select_related("flavor")
                   .order_by(*QueuedRequest.QUEUE_ORDER))
    if not entries:
        return []
    rules = Rules(cohort.reclaim, timedelta(minutes=cohort.min_runtime_minutes),
                  timedelta(seconds=cohort.preemption_delay_seconds))
    stopping = stopping_refs(figures.slugs)
    held = list(QuotaHold.objects.held().filter(team_id__in=figures.slugs, borrowed_units__gt=0))
    workloads = held_workloads(held)
    remembered = fairshare.remembered_units(list(figures.slugs), now)  # victim teams: highest share first
    waits = ClusterWaits()
    chosen: list[tuple[Candidate, Claim, int]] = []
    for entry in entries:
        if waits(entry.flavor, entry.spot, None, entry.not_before):
            continue  # it waits for a cluster, not units: stopping others' work would not start it
        shares = fairshare.shares(figures, entry.flavor_id, remembered)
        candidates = [candidate_of(r, workloads.get(r.ref), figures.slugs, stopping, shares, now)
                      for r in held if r.flavor_id == entry.flavor_id]
        claim = Claim(figures.slugs[entry.team_id], entry.ref, entry.units, entry.priority, entry.created_at)
        key = (entry.team_id, entry.flavor_id)
        quota = flavor_quota(entry.flavor, figures.quotas.get(key), figures, entry.team_id)
        verdict: Verdict = choose_victims(claim, quota, figures.usage.get(key, 0), candidates, rules, now)
        for victim in verdict.victims:
            stopping.add(victim.ref)
            chosen.append((victim, claim, entry.team_id))
    return chosen


def held_workloads(held: list[QuotaHold]) -> dict[str, object]:
    """``{ref: workload}`` of the quota holds' workloads, with their flavor (one query per kind)."""
    by_kind: dict[WorkloadKind, list[int]] = {}
    for hold in held:
        identity = WorkloadId.from_ref(hold.ref)
        kind = kind_for(identity.prefix) if identity is not None else None
        if kind is not None:
            by_kind.setdefault(kind, []).append(identity.pk)
    return {w.ref: w for kind, pks in by_kind.items()
            for w in kind.model.objects.filter(pk__in=pks).select_related("flavor")}


def last_start(workload, now: datetime) -> datetime:
    """When ``workload`` last started, as far as the portal knows: its current attempt's pods' start
    (``attempt_started_at``, as the cycle saw it); else, ``started_at`` being the first attempt's
    and staying, once it was admitted again after a preemption, that admission. Not started at
    all: ``now`` — it has nothing to lose and has not run its min runtime."""
    if workload.attempt_started_at is not None:
        return workload.attempt_started_at
    if workload.started_at is None:
        return now
    return max(workload.started_at, workload.admitted_at or workload.started_at)


def candidate_of(hold: QuotaHold, workload, slugs: dict[int, str], stopping: set[str],
               shares: dict[int, float], now: datetime) -> Candidate:
    identity = WorkloadId.from_ref(hold.ref)
    kind = kind_for(identity.prefix) if identity is not None else None
    burst = kind is not None and isinstance(kind, Bursts)
    facts = {}
    if workload is not None:  # what it would lose (quotas.reclaim.work_lost) and whether it is protected
        facts = {"started_at": last_start(workload, now), "last_checkpoint_at": Checkpoints.of(kind).last_checkpoint_at(workload),
                 "reports_checkpoints": Checkpoints.of(kind).reports_checkpoints(workload),
                 "price_per_hour": workload.unit_price(), "preemptions": workload.preemptions}
    return Candidate(ref=hold.ref, team=slugs[hold.team_id],
                     units=hold.borrowed_units if burst else hold.units,
                     borrowed=hold.borrowed_units, priority=hold.priority,
                     admitted_at=hold.created_at, burst=burst, share=shares.get(hold.team_id, 0.0),
                     stopping=hold.ref in stopping, **facts)


def lost_work(kind: WorkloadKind, workload, units: int, notice: datetime) -> tuple:
    """``(GPU-hours, cost, since, checkpointed)`` of the work a preemption noticed at ``notice`` throws
    away: from where its next attempt resumes to the notice, by :func:`quotas.reclaim.lost_span`
    (never below zero, never more than the attempt ran; a silent run is ranked by the median, but
    what it loses is all since its start as far as anyone knows). Nothing for an endpoint's burst,
    which serves, not computes, and for work not started (``since`` None)."""
    if isinstance(kind, Bursts) or workload.started_at is None:
        return Decimal(0), Decimal(0), None, False
    start = last_start(workload, notice)
    since, _lost = lost_span(start, Checkpoints.of(kind).last_checkpoint_at(workload), notice)
    return (interval_gpu_hours(workload.flavor.gpu_fraction, units, since, notice),
            interval_cost(workload.unit_price(), units, since, notice), since, since != min(start, notice))


def lost_words(since: datetime | None, notice: datetime, checkpointed: bool = False) -> str:
    """The lost work in words, never a figure that contradicts the money: "12 min of work since its
    last checkpoint lost", "under a minute of work …" (a cost of cents, not "0 min"), "no work lost"."""
    seconds = (notice - since).total_seconds() if since is not None else 0
    if seconds <= 0:
        return "no work lost"
    amount = "under a minute" if seconds < 60 else f"{int(seconds // 60)} min"
    return f"{amount} of work since its {'last checkpoint' if checkpointed else 'start'} lost"


def _told_if_final(event: PreemptionEvent) -> None:
    """A preemption without a grace is final as its row is written: told now, in the preempting transaction
    (:data:`workloads.events.preemption_settled`); one with a grace is told by :func:`settle_lost_work`."""
    if event.final_when_written:
        preemption_settled.send(sender=PreemptionEvent, event=event)


def settle_lost_work(kind: WorkloadKind, workload, now: datetime) -> None:
    """Its pods are gone: a checkpoint that landed during the grace (after the notice, before ``now``)
    is where the next attempt resumes, so the preemption's lost work is what remains by that
    checkpoint. Lowers the latest event's figures and words only (a replay changes nothing).

    The figures are final now, so this is where a preemption with a grace is told
    (:data:`workloads.events.preemption_settled`, in the transaction of the lowering): its message says
    what the page, the reason and the preemption log say (issue 46: an e-mail written at the notice said
    "under a minute of work lost" of a run whose notice checkpoint then lost nothing). One without a
    grace (a spot interruption, an endpoint's burst) is final as it is written, and told then."""
    event = PreemptionEvent.objects.filter(ref=workload.ref).select_related("by_team", "flavor", "team").first()
    if event is None:
        return
    with transaction.atomic():
        _lower_lost_work(kind, workload, event, now)
        if not event.final_when_written:
            event.refresh_from_db(fields=["lost_gpu_hours", "lost_cost", "reason"])
            preemption_settled.send(sender=PreemptionEvent, event=event)


def _lower_lost_work(kind: WorkloadKind, workload, event: PreemptionEvent, now: datetime) -> None:
    """:func:`settle_lost_work`'s figures: what a checkpoint written during the grace saved."""
    checkpoint = Checkpoints.of(kind).last_checkpoint_at(workload)
    # An interruption has no grace to save in (its pods go at once), and burst loses no work.
    if event.cause in INTERRUPTIONS or checkpoint is None or checkpoint > now or isinstance(kind, Bursts):
        return
    gpu_hours, cost, since, checkpointed = lost_work(kind, workload, event.units, event.at)
    if gpu_hours >= event.lost_gpu_hours:
        return
    reason = _with_lost(event.reason, lost_words(since, event.at, checkpointed))
    PreemptionEvent.objects.filter(pk=event.pk, lost_gpu_hours__gt=gpu_hours).update(
        lost_gpu_hours=gpu_hours, lost_cost=cost, reason=reason[:500])


def _with_lost(reason: str, lost: str) -> str:
    """A preemption's words (:func:`preempted_reason`) with its lost work said anew: who took what stays as
    written when the notice was given — a reservation's window, a within-team claimant, which the row does not
    keep — and only the last clause, the lost work (:func:`lost_words`, which has no "; "), is replaced."""
    taken, _sep, _lost = reason.rpartition("; ")
    return f"{taken}; {lost}"


def claimant_words(ref: str) -> str:
    """The work a within-team preemption made room for, as its own team's reason says it: "run big (#13)"
    (:meth:`billing.ledger.RefLabel.words`; the sentence names the team), its ref if it is gone."""
    label = labels([ref]).get(ref)
    return label.words(with_team=False) if label is not None else ref


def preempted_reason(within_team: bool, by_team: str, claimant: str, units: int, flavor: str, lost: str,
                     reserved: str = "") -> str:
    """A preemption's words: who took which units, then the work lost ("preempted: team nlp reclaimed
    6× h100-80gb of its quota; 3 min of work since its last checkpoint lost"); ``claimant``: the
    high-priority work a within-team preemption made room for (:func:`claimant_words`).

    Like :func:`interrupted_reason`, the rest of a sentence whose subject is the workload: a
    notification says "Run bert (#12) of team vision" and then this, the verb said once.
    """
    if reserved:
        what = f"team {by_team}'s reservation took back {units}\u00d7 {flavor} {reserved}"
    elif within_team:
        what = f"the team's high-priority {claimant} needed its {units}\u00d7 {flavor}"
    else:
        what = f"team {by_team} reclaimed {units}\u00d7 {flavor} of its quota"
    return f"preempted: {what}; {lost}"


#: What took an interrupted workload's node, by its cause (:data:`billing.models.INTERRUPTIONS`).
INTERRUPTED_BY = {PreemptionEvent.Cause.SPOT: "spot capacity reclaimed",
                  PreemptionEvent.Cause.DISRUPTION: "its node drained or lost"}


def interruption_cause(workload) -> str:
    """A spot workload's node is the provider's to reclaim; an on-demand one's was drained or lost."""
    return PreemptionEvent.Cause.SPOT if workload.spot else PreemptionEvent.Cause.DISRUPTION


def interrupted_reason(cause: str, disrupted: str, lost: str) -> str:
    """An interruption's words ("interrupted: spot capacity reclaimed (DeletionByPodGC); 12 min of work since
    its start lost", or "interrupted: its node drained or lost (EvictionByEvictionAPI); …" for an on-demand
    node): like :func:`preempted_reason`, the rest of a sentence about the workload."""
    return f"interrupted: {INTERRUPTED_BY[cause]} ({disrupted}); {lost}"


def preempt(victim: Candidate, claim: Claim, claimant_id: int, now: datetime, within_team: bool = False,
             reserved: str = "") -> bool:
    """Give one victim its notice and have its kind act; False when it was no longer there to preempt.

    ``within_team``: its own team's high-priority work takes its units (within-team priority);
    ``reserved``: a reserved window takes them ("on east from 09:00", :mod:`workloads.cycle.windows`).
    """
    identity = WorkloadId.from_ref(victim.ref)
    kind = kind_for(identity.prefix) if identity is not None else None
    if kind is None:
        return False
    live = kind.model.objects.filter(pk=identity.pk, state__in=kind.model.HOLDING_STATES, preempting_since__isnull=True)
    workload = live.select_related("team", "flavor", "created_by").first()
    if workload is None:
        return False
    burst = isinstance(kind, Bursts)
    flavor = workload.flavor.name
    if not burst:
        Checkpoints.of(kind).refresh_checkpoint(workload)  # a checkpoint line it printed counts, its pods still being there
    gpu_hours, cost, since, checkpointed = lost_work(kind, workload, victim.units, now)
    claimant = claimant_words(claim.ref) if within_team else ""
    if reserved:
        taking = f"team {claim.team}'s reservation needs {victim.units}\u00d7 {flavor} {reserved}"
    elif within_team:
        taking = f"the team's high-priority {claimant} needs its {victim.units}\u00d7 {flavor}"
    else:
        taking = f"team {claim.team} reclaims {victim.units}\u00d7 {flavor} of its quota"
    reason = preempted_reason(within_team, claim.team, claimant, victim.units, flavor,
                              lost_words(since, now, checkpointed), reserved)
    cause = (PreemptionEvent.Cause.RESERVATION if reserved else
             PreemptionEvent.Cause.WITHIN_TEAM if within_team else PreemptionEvent.Cause.RECLAIM)
    seconds = 0 if burst else Checkpoints.of(kind).preemption_grace(workload)
    changes = {"last_preempted_at": now, "preemptions": F("preemptions") + 1}
    if not burst:
        changes.update(preempting_since=now, reason_code=ReasonCode.PREEMPTING,
                       reason=f"being preempted: {taking}; its pods stop within {seconds} s"[:500])
    with transaction.atomic():
        if not live.update(**changes):
            return False
        event = PreemptionEvent.objects.create(
            ref=workload.ref, team=workload.team, by_team_id=claimant_id, for_ref=claim.ref, user=workload.created_by,
            cause=cause,
            flavor=workload.flavor, units=victim.units, reason=reason[:500], grace_seconds=seconds,
            lost_gpu_hours=gpu_hours, lost_cost=cost, currency=settings.SLIPWAY_CURRENCY, at=now)
        _told_if_final(event)
        audit(AuditEvent.Action.WORKLOAD_PREEMPTED, team=workload.team, target=workload.ref,
              by_team=claim.team, units=victim.units, flavor=flavor, for_ref=claim.ref, reason=reason)
    if burst:
        kind.shrink_burst(workload, victim.units, reason, now)
    else:
        backend = fleet.backend_at(workload.cluster_id)
        attempts.save_logs(workload, backend, PREEMPTED_LABEL, now)  # its pods' logs go with them
        _stop_pods(kind, backend, workload, now + timedelta(seconds=seconds), seconds)
    return True


def _stop_pods(kind: WorkloadKind, backend, workload, deadline: datetime, grace_seconds: int) -> None:
    """The graceful delete, then the notice: in that order, so that its objects are marked for deletion before
    a pod can act on the notice. A pod that checkpoints and exits at the notice fails its node; a JobSet or a
    PyTorchJob not yet marked for deletion then restarts its pods (the runtime's restarts), and those start again
    from the beginning, read the notice at once and exit with nothing saved. Marked, their controllers leave
    them alone (upstream reconciles no object being deleted), and the pods stop for good (seen on the sandbox
    under load: a notice's exit beat the delete, and attempt 1's rank 0 log was a restarted pod's)."""
    _delete(kind, backend, workload, grace_seconds)
    _notify(backend, workload, deadline)


def _notify(backend, workload, deadline: datetime) -> None:
    """The notice: the deadline on its pods (``NOTICE_ANNOTATION``), which a run with the checkpoint
    contract sees in /etc/slipway/notice while its pods stop; lost to a cluster error, the grace remains."""
    try:
        backend.annotate_pods(workload.address, {NOTICE_ANNOTATION: deadline.isoformat()})
    except ClusterError as exc:
        logger.warning("could not give %s its preemption notice: %s", workload.ref, exc)


def interrupt(kind: WorkloadKind, backend, workload, status, now: datetime) -> bool:
    """A workload whose node the cluster took (``status.disrupted``: a spot node reclaimed by the provider, cause
    ``spot``; an on-demand node drained or lost under work its kind requeues, cause ``disruption``): logged like a
    preemption (no team took it: ``by_team`` empty), its objects deleted at once (the node is gone), and queued
    again once they are — :func:`follow`. Not counted in ``preemptions`` (no team took anything). False when
    something else moved it first.

    A checkpoint it printed to its log and never reported is read first, as a reclaim reads it
    (:meth:`workloads.registry.Checkpoints.refresh_checkpoint`), while what is left of its pods still
    answers: its lost work counts from it, and its next attempt resumes from it."""
    Checkpoints.of(kind).refresh_checkpoint(workload)
    units = workload.placement_shape[0]
    gpu_hours, cost, since, checkpointed = lost_work(kind, workload, units, now)
    cause = interruption_cause(workload)
    reason = interrupted_reason(cause, status.disrupted, lost_words(since, now, checkpointed))
    live = kind.model.objects.filter(pk=workload.pk, state__in=kind.model.HOLDING_STATES, preempting_since__isnull=True)
    with transaction.atomic():
        if not live.update(preempting_since=now, reason_code=ReasonCode.PREEMPTING,
                           reason=f"interrupted: {INTERRUPTED_BY[cause]}; its pods are stopping"):
            return False
        event = PreemptionEvent.objects.create(
            ref=workload.ref, team=workload.team, by_team=None, cause=cause,
            user_id=workload.created_by_id, flavor=workload.flavor, units=units, reason=reason[:500],
            grace_seconds=0, lost_gpu_hours=gpu_hours, lost_cost=cost, currency=settings.SLIPWAY_CURRENCY, at=now)
        _told_if_final(event)
    attempts.save_logs(workload, backend, INTERRUPTED_LABEL, now)  # what its pods still answer, before they go
    _delete(kind, backend, workload, 0)
    return True


def give_stop_notice(workload, now: datetime) -> None:
    """A stop's notice (:func:`workloads.lifecycle.stop`, after its commit): the tail of its pods' logs saved,
    the deadline on its pods and the graceful delete, as a preemption gives them; lost to a cluster error or a
    worker killed, :func:`follow` gives them again on the next cycle."""
    kind = kind_for(workload.KIND_PREFIX)
    seconds = Checkpoints.of(kind).preemption_grace(workload)
    try:
        backend = fleet.backend_at(workload.cluster_id)
    except ClusterError as exc:
        logger.warning("could not reach the cluster of %s to stop it: %s", workload.ref, exc)
        return
    attempts.save_logs(workload, backend, STOPPED_LABEL, now)
    _stop_pods(kind, backend, workload, now + timedelta(seconds=seconds), seconds)


def _delete(kind: WorkloadKind, backend, workload, grace_seconds: int) -> None:
    try:
        # Not what outlives attempts (a run's checkpoint claim): the next attempt resumes from it.
        backend.delete(workload.address, kind.attempt_resources, grace_seconds=grace_seconds)
    except ClusterError as exc:  # the next cycle tries again (follow)
        logger.warning("could not delete preempted %s: %s", workload.ref, exc)


def follow(kind: WorkloadKind, backend, workload, obs: ObservedWorkload | None, now: datetime) -> bool:
    """Step 3 for a workload being preempted: requeue it once its objects are gone. True when it was.

    While its pods run, they must have had the notice and the graceful delete: a live pod with
    neither the notice annotation nor a ``deletionTimestamp`` had them lost (to a cluster error,
    or with a worker killed between the preemption's commit and those calls), so both are given
    again, with what is left of the grace — the deadline stays the one the preemption set, and the
    run still gets to save before it. Past the grace its objects are deleted again, at once (a
    delete lost to a cluster error, or pods that ignore SIGTERM). Its quota stays held until they
    are gone.
    """
    stopping = workload.reason_code in STOP_CODES  # stopped on its owner's behalf (a sweep), not preempted
    if obs is None:
        if stopping:
            Checkpoints.of(kind).refresh_checkpoint(workload)  # the one its notice made is kept with it
            lifecycle.finish_stop(kind, workload, now)
            return False  # ended, not queued again
        settle_lost_work(kind, workload, now)
        moved = Reactions.of(kind).after_preemption(workload, now)
        return moved if moved is not None else lifecycle.requeue(kind, workload, now)
    Checkpoints.of(kind).refresh_checkpoint(workload)  # one it writes on the notice, while its pods stop, is where it resumes
    # Their last words come while they stop.
    attempts.save_logs(workload, backend, STOPPED_LABEL if stopping else PREEMPTED_LABEL, now)
    deadline = workload.preempting_since + timedelta(seconds=Checkpoints.of(kind).preemption_grace(workload))
    if now >= deadline:
        _delete(kind, backend, workload, 0)
    elif not_told(obs):
        # Whole seconds, rounded up: the grace promised is never cut short.
        _stop_pods(kind, backend, workload, deadline, math.ceil((deadline - now).total_seconds()))
    return False


def not_told(obs: ObservedWorkload) -> bool:
    """Whether a live pod of ``obs`` lacks the preemption's notice or its graceful delete (pure)."""
    for pod in obs.pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue  # finished: nothing left to tell or stop
        meta = pod.get("metadata") or {}
        if NOTICE_ANNOTATION not in (meta.get("annotations") or {}) or not meta.get("deletionTimestamp"):
            return True
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
