"""When will queued work start? Estimates from the expected ends of the work ahead of it.

For each queued workload of a team, :func:`estimated_starts` replays the team's queue on its
flavor: units free now, then the admitted work's expected ends in time order, each queued
entry ahead starting — and later ending — as units free up, in queue order. An endpoint runs
until deleted (no end), but its burst replicas above its minimum are reclaimed for queued
work at the next cycle, so those units count as free now.

A run's expected running time (:func:`_duration`) is the median of the same job's earlier
runs — the team's runs of that kind with the same name, flavor and image that ended on their
own (succeeded or failed; a cancel says nothing about how long the work takes) — cut at its
runtime limit; without such history, its runtime limit; else unknown. The median is *not*
taken over every run of a flavor and image: one trainer image serves ten-minute evaluations
and ten-hour pre-training alike, and that population put a 15-minute run's end 9 hours out
(issue 20: "about 9 h", started in 9 min). A run already past its median is expected at its
limit. When no known end frees enough units the estimate is unknown, and says so rather
than guessing.

Work the team's quota alone does not hold back gets no time: work waiting for money starts
when the budget allows it (an admin raises it, committed work ends early, the month turns),
which no end of other work decides; it is not ahead of anyone either (the queue is
best-effort). Work admitted but waiting for room on the cluster's nodes gets no time either,
and :data:`CAPACITY_WAIT` says why.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from quotas import admission
from quotas.admission import ResourceRequest
from quotas.constants import Priority, Reason
from quotas.ledger import cost_per_hour, hours_left_in_month, month_end
from quotas.models import QueuedRequest, Reservation
from quotas.services import budget_summary
from workloads.identity import WorkloadId
from workloads.registry import kind_for, kind_of

#: Why work admitted but Pending for room on the nodes gets no start time (shown where it waits).
CAPACITY_WAIT = (
    "start time unknown: it holds its quota and waits for a node with room. Room frees when work on "
    "those nodes ends — other teams' work too, and on a real cluster work Slipway does not run — and the "
    "scheduler does not take waiting pods in order, so no time can be promised: it starts as soon as a "
    "node has room.")

#: Why work whose end nothing ahead of it tells gets no start time.
NOTHING_KNOWN = "start time unknown: nothing ahead of it has a known end"


@dataclass(frozen=True)
class Ahead:
    """Work whose end a queued workload waits for: its name and page (empty for a dry run's own request)."""

    name: str
    url: str = ""


@dataclass(frozen=True)
class StartEstimate:
    at: datetime | None  #: None: unknown (``unknown`` says why)
    after: tuple[Ahead, ...] = ()  #: the work whose ends it waits for
    unknown: str = NOTHING_KNOWN  #: the words when ``at`` is None

    def lead(self, now: datetime | None = None) -> str:
        """"starts in about 40 min", or why it is unknown."""
        if self.at is None:
            return self.unknown
        minutes = max(round((self.at - (now or timezone.now())).total_seconds() / 60), 0)
        when = "in about a minute" if minutes <= 1 else (
            f"in about {minutes} min" if minutes < 120 else f"in about {round(minutes / 60)} h")
        return f"starts {when}"

    @property
    def ends(self) -> str:
        """"ends" or "end", to follow the names of :attr:`after`."""
        return "ends" if len(self.after) == 1 else "end"

    def words(self, now: datetime | None = None) -> str:
        """"starts in about 40 min, when bert-finetune ends", or why it is unknown."""
        if self.at is None or not self.after:
            return self.lead(now)
        names = [a.name for a in self.after]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        return f"{self.lead(now)}, when {listed} {self.ends}"


def _ahead(workload) -> Ahead:
    url = workload.get_absolute_url() if hasattr(workload, "get_absolute_url") else ""
    return Ahead(workload.name, url)


def _held(decision: admission.Decision, now: datetime) -> StartEstimate:
    """The estimate of work held back by more than its quota (``admission.held_beyond_quota``)."""
    if decision.reason in admission.MONEY_REASONS:
        turn = timezone.localtime(month_end(now))
        return StartEstimate(None, unknown=(
            "start time unknown: it waits for money, not GPUs — it starts when the budget allows it (an admin "
            f"raises the budget, committed work ends early, or the month turns on {turn:%Y-%m-%d})"))
    return StartEstimate(None, unknown=f"start time unknown: {decision.message}")


def _workloads(refs: list[str]) -> dict[str, object]:
    """The workloads behind ``refs``, one query per kind."""
    by_kind: dict[str, list[int]] = {}
    for ref in refs:
        identity = WorkloadId.from_ref(ref)
        if identity is not None and kind_for(identity.prefix) is not None:
            by_kind.setdefault(identity.prefix, []).append(identity.pk)
    found = {}
    for prefix, pks in by_kind.items():
        # With its flavor: the kind's resource request (its guaranteed units) reads it.
        for workload in kind_for(prefix).model.objects.filter(pk__in=pks).select_related("flavor"):
            found[workload.ref] = workload
    return found


#: Earlier runs a median duration is taken over (the most recent ones of the same job).
MEDIAN_SAMPLE = 50


def _job(workload) -> tuple:
    """What makes two runs the same job, for its median duration: the model and its kind's ``job_fields``."""
    return type(workload), *(getattr(workload, field) for field in kind_of(workload).job_fields)


def median_durations(team, workloads: list) -> dict[tuple, timedelta]:
    """``{job: median running time}`` of the team's earlier runs of the jobs of ``workloads`` (one query per kind).

    A job (:func:`_job`) is a kind and its ``job_fields`` (a run's name, flavor and image); runs
    that ended on their own count (a cancel, a preemption or a budget stop ends work for reasons
    of its own). Only kinds with a runtime limit end on their own: the others (an endpoint)
    run until ended, so have no duration to predict.
    """
    wanted: dict[type, set[tuple]] = {}
    for workload in workloads:
        if kind_of(workload).runtime_limit is not None:
            wanted.setdefault(type(workload), set()).add(_job(workload))
    spans: dict[tuple, list[float]] = {}
    for model, jobs in wanted.items():
        kind = kind_for(model.KIND_PREFIX)
        ended_on_their_own = [s for s in model.FINAL_STATES if s not in kind.lifecycle.removed]
        same = {f"{field}__in": {job[1 + i] for job in jobs} for i, field in enumerate(kind.job_fields)}
        rows = (model.objects.filter(team=team, state__in=ended_on_their_own, started_at__isnull=False,
                                     finished_at__isnull=False, **same)
                .order_by("-finished_at").values_list(*kind.job_fields, "started_at", "finished_at"))
        for *fields, start, end in rows:
            job = (model, *fields)
            sample = spans.setdefault(job, [])
            if job in jobs and end > start and len(sample) < MEDIAN_SAMPLE:
                sample.append((end - start).total_seconds())
    return {job: timedelta(seconds=statistics.median(sample)) for job, sample in spans.items() if sample}


def _expected_end(workload, start: datetime, now: datetime, medians: dict[tuple, timedelta]) -> datetime | None:
    """When ``workload`` (running since ``start``, or starting then) should end; None when unknown.

    The same job's median running time, cut at its runtime limit; once past the median, the
    limit; without history, the limit. Never before ``now``. Work of a kind without a runtime
    limit runs until ended: None.
    """
    column = kind_of(workload).runtime_limit
    if column is None:
        return None
    limit = getattr(workload, column)
    median = medians.get(_job(workload))
    bounds = sorted(start + d for d in (median, timedelta(minutes=limit) if limit else None) if d is not None)
    if not bounds:
        return None
    return next((end for end in bounds if end >= now), max(bounds[-1], now))


def estimated_starts(team, now: datetime | None = None,
                     candidate: tuple[QueuedRequest, timedelta | None] | None = None,
                     held: dict[str, admission.Decision] | None = None) -> dict[str, StartEstimate]:
    """``{ref: StartEstimate}`` for every queued workload of ``team``.

    ``candidate`` is a request not submitted yet (an unsaved queue entry and its expected
    duration): it is placed behind everything of its priority, as a submission would be.
    ``held`` is :func:`quotas.admission.held_beyond_quota` when the caller has it already.
    """
    now = now or timezone.now()
    queue = list(QueuedRequest.objects.filter(team=team).select_related("flavor").order_by(*QueuedRequest.QUEUE_ORDER))
    if not queue and candidate is None:
        return {}
    quotas = admission.team_quotas(team)
    if held is None:
        held = admission.held_beyond_quota(team, entries=queue, quotas=quotas)
    if candidate is not None:
        entry, _duration_of_candidate = candidate
        queue.insert(admission.queue_position(team, entry) - 1, entry)  # the queue's own tie rule
    if not queue:
        return {}
    reservations = list(Reservation.objects.held().filter(team=team, flavor_id__in={q.flavor_id for q in queue}))
    workloads = _workloads([r.ref for r in reservations] + [q.ref for q in queue])
    limits = {flavor_id: quota.limit for flavor_id, quota in quotas.items()}
    medians = median_durations(team, list(workloads.values()))
    estimates: dict[str, StartEstimate] = {}
    for flavor_id in {q.flavor_id for q in queue}:
        free = limits.get(flavor_id, 0)
        ends: list[tuple[datetime, int, int, Ahead]] = []  # (expected end, order, units, whose)
        order = itertools.count()  # ties end in the order they were seen
        for reservation in (r for r in reservations if r.flavor_id == flavor_id):
            free -= reservation.units
            workload = workloads.get(reservation.ref)
            if workload is None:
                continue
            kind = kind_of(workload)
            # What it holds beyond what it asked at admission (an endpoint's burst) is reclaimed for queued work.
            free += reservation.units - kind.resource_request(workload).units
            if kind.runtime_limit is None:
                continue  # it runs until ended: no end frees its units
            # Admitted but not started yet (pending): its time starts when it does, now at the earliest.
            end = _expected_end(workload, workload.started_at or now, now, medians)
            if end is not None:
                heapq.heappush(ends, (end, next(order), reservation.units, _ahead(workload)))
        at, waited_for = now, []
        for entry in (q for q in queue if q.flavor_id == flavor_id):
            if entry.ref in held:  # not ahead of anyone, and no end of other work starts it
                estimates[entry.ref] = _held(held[entry.ref], now)
                continue
            while free < entry.units and ends:
                end, _tie, units, whose = heapq.heappop(ends)
                free, at = free + units, max(at, end)
                waited_for.append(whose)
            if free < entry.units:
                estimates[entry.ref] = StartEstimate(None)
                continue
            estimates[entry.ref] = StartEstimate(at, tuple(waited_for))
            free -= entry.units
            if candidate is not None and entry is candidate[0]:
                end = at + candidate[1] if candidate[1] is not None else None
                whose = Ahead("the new request")
            else:
                workload = workloads.get(entry.ref)
                end = _expected_end(workload, at, now, medians) if workload is not None else None
                whose = _ahead(workload) if end is not None else None
            if end is not None:
                heapq.heappush(ends, (end, next(order), entry.units, whose))
    return estimates


@dataclass(frozen=True)
class Forecast:
    """What submitting a request would do now (a dry run: nothing is written)."""

    outcome: str  #: "admit" | "queue" | "reject" | "invalid"
    message: str
    cost_per_hour: Decimal | None = None
    estimated_total: Decimal | None = None  #: with a known end
    share_of_budget_left: Decimal | None = None  #: committed_cost's share of what the month's budget leaves
    queue_position: int | None = None
    estimated_start_at: datetime | None = None
    start: str = ""  #: the estimate in words
    #: What the budget gate counts (ResourceRequest.committed_cost): its estimate until the
    #: month's end at most; without a runtime limit, its cost until the month's end.
    committed_cost: Decimal | None = None
    #: Units it would borrow from the team's cohort (Decision.borrows): any makes it preemptible.
    borrows: int = 0
    #: :func:`borrow_words` for the form's preview ("" when it borrows none); not part of the API's answer.
    borrow_note: str = ""

    @property
    def preemptible(self) -> bool:
        return self.borrows > 0

    def as_dict(self) -> dict:
        return {"outcome": self.outcome, "message": self.message, "cost_per_hour": self.cost_per_hour,
                "estimated_total": self.estimated_total, "share_of_budget_left": self.share_of_budget_left,
                "queue_position": self.queue_position, "estimated_start_at": self.estimated_start_at,
                "start": self.start, "committed_cost": self.committed_cost, "borrows": self.borrows,
                "preemptible": self.preemptible}


def borrow_words(decision: admission.Decision, flavor: str) -> str:
    """"borrows 2× a100-80gb from the cohort; preemptible (nlp may take them back)", or "" when
    ``decision`` borrows nothing: what a borrowing admission means for the work, in the forms' words."""
    if not decision.borrows:
        return ""
    names = list(decision.lent_by)
    who = (" and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else names[0]) if names else "the cohort"
    return f"borrows {decision.borrows}\u00d7 {flavor} from the cohort; preemptible ({who} may take them back)"


def forecast(team, request: ResourceRequest, flavor, duration: timedelta | None) -> Forecast:
    """Price, budget share and admission outcome of ``request`` (for ``flavor``) — with a queue position
    and start estimate when it would wait for quota."""
    now = timezone.now()
    rate = cost_per_hour(flavor.price(request.spot), request.units) if flavor is not None else None
    total = request.estimated_cost
    committed = request.committed_cost(hours_left_in_month(now))
    decision = admission.preview(team, request)
    share = None
    budget = budget_summary(team, now)
    if committed is not None and budget["monthly_limit"] is not None:
        left = budget["left"]
        share = (committed / left).quantize(Decimal("0.0001")) if left > 0 else None
    result = Forecast(decision.outcome, decision.message, rate, total, share, committed_cost=committed,
                      borrows=decision.borrows, borrow_note=borrow_words(decision, request.flavor))
    if not decision.queued or flavor is None:
        return result
    entry = QueuedRequest(team=team, ref="dry-run", flavor=flavor, units=request.units,
                          units_per_node=request.units_per_node, priority=Priority(request.priority).rank,
                          spot=request.spot)
    position = admission.queue_position(team, entry)
    held = admission.held_beyond_quota(team, (entry.ref, request))
    if decision.reason == Reason.WAITING_FOR_QUOTA:
        estimate = estimated_starts(team, now, candidate=(entry, duration), held=held).get(entry.ref)
    else:
        estimate = _held(held.get(entry.ref, decision), now)
    return dataclasses.replace(result, queue_position=position, estimated_start_at=estimate.at if estimate else None,
                               start=estimate.words(now) if estimate else "")
