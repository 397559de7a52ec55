"""When will queued work start? Estimates from the expected ends of the work ahead of it.

For each queued workload of a team, :func:`estimated_starts` replays the team's queue on its
flavor: units free now, then the admitted work's expected ends in time order (a run's
``max_runtime_minutes``, else the team's median duration for that flavor and image, else
unknown), each queued entry ahead starting — and later ending — as units free up, in queue
order. An endpoint runs until deleted (no end), but its burst replicas above its minimum are
reclaimed for queued work at the next cycle, so those units count as free now. When no known
end frees enough units the estimate is unknown, and says so rather than guessing.

It assumes quota is what the work waits for; work waiting for budget is unknown (it starts
when an admin raises the budget or the month turns).
"""

from __future__ import annotations

import heapq
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from quotas import admission
from quotas.admission import ResourceRequest
from quotas.constants import Priority, Reason
from quotas.ledger import cost_per_hour
from quotas.models import QueuedRequest, Reservation, TeamQuota
from quotas.services import budget_summary
from workloads.identity import WorkloadId
from workloads.registry import kind_for


@dataclass(frozen=True)
class StartEstimate:
    at: datetime | None  #: None: unknown
    after: tuple[str, ...] = ()  #: cluster names of the work whose ends it waits for

    def words(self, now: datetime | None = None) -> str:
        """"starts in about 40 min (when run-17 and run-19 end)", or why it is unknown."""
        if self.at is None:
            return "start time unknown: nothing ahead of it has a known end"
        minutes = max(round((self.at - (now or timezone.now())).total_seconds() / 60), 0)
        when = "in about a minute" if minutes <= 1 else (
            f"in about {minutes} min" if minutes < 120 else f"in about {round(minutes / 60)} h")
        after = f" (when {_and(self.after)} end{'s' if len(self.after) == 1 else ''})" if self.after else ""
        return f"starts {when}{after}"


def _and(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _workloads(refs: list[str]) -> dict[str, object]:
    """The workloads behind ``refs``, one query per kind."""
    by_kind: dict[str, list[int]] = {}
    for ref in refs:
        identity = WorkloadId.from_ref(ref)
        if identity is not None and kind_for(identity.prefix) is not None:
            by_kind.setdefault(identity.prefix, []).append(identity.pk)
    found = {}
    for prefix, pks in by_kind.items():
        for workload in kind_for(prefix).model.objects.filter(pk__in=pks):
            found[workload.ref] = workload
    return found


#: Finished runs a median duration is taken over (the most recent ones of a flavor and image).
MEDIAN_SAMPLE = 50


def median_durations(team, workloads: list) -> dict[tuple, timedelta]:
    """``{(model, flavor_id, image): median running time}`` of the team's finished work (one query per kind)."""
    wanted: dict[type, set[tuple[int, str]]] = {}
    for workload in workloads:
        if hasattr(workload, "image") and not hasattr(workload, "base_replicas"):  # endpoints never end
            wanted.setdefault(type(workload), set()).add((workload.flavor_id, workload.image))
    spans: dict[tuple, list[float]] = {}
    for model, keys in wanted.items():
        rows = (model.objects.filter(team=team, state__in=model.FINAL_STATES, started_at__isnull=False,
                                     finished_at__isnull=False, flavor_id__in={f for f, _i in keys},
                                     image__in={i for _f, i in keys})
                .order_by("-finished_at").values_list("flavor_id", "image", "started_at", "finished_at"))
        for flavor_id, image, start, end in rows:
            sample = spans.setdefault((model, flavor_id, image), [])
            if end > start and len(sample) < MEDIAN_SAMPLE:
                sample.append((end - start).total_seconds())
    return {key: timedelta(seconds=statistics.median(sample)) for key, sample in spans.items() if sample}


def _duration(workload, medians: dict[tuple, timedelta]) -> timedelta | None:
    """A run's runtime limit, else the team's median for its flavor and image, else unknown."""
    limit = getattr(workload, "max_runtime_minutes", None)
    if limit:
        return timedelta(minutes=limit)
    return medians.get((type(workload), workload.flavor_id, getattr(workload, "image", None)))


def estimated_starts(team, now: datetime | None = None,
                     candidate: tuple[QueuedRequest, timedelta | None] | None = None) -> dict[str, StartEstimate]:
    """``{ref: StartEstimate}`` for every queued workload of ``team``.

    ``candidate`` is a request not submitted yet (an unsaved queue entry and its expected
    duration): it is placed behind everything of its priority, as a submission would be.
    """
    now = now or timezone.now()
    queue = list(QueuedRequest.objects.filter(team=team).order_by(*QueuedRequest.QUEUE_ORDER))
    if candidate is not None:
        entry, _duration_of_candidate = candidate
        ahead = [q for q in queue if q.priority >= entry.priority]
        queue = ahead + [entry] + [q for q in queue if q.priority < entry.priority]
    if not queue:
        return {}
    reservations = list(Reservation.objects.active().filter(team=team, flavor_id__in={q.flavor_id for q in queue}))
    workloads = _workloads([r.ref for r in reservations] + [q.ref for q in queue])
    limits = dict(TeamQuota.objects.filter(team=team).values_list("flavor_id", "limit"))
    medians = median_durations(team, list(workloads.values()))
    estimates: dict[str, StartEstimate] = {}
    for flavor_id in {q.flavor_id for q in queue}:
        free = limits.get(flavor_id, 0)
        ends: list[tuple[datetime, int, str]] = []  # (expected end, units, cluster name)
        for reservation in (r for r in reservations if r.flavor_id == flavor_id):
            free -= reservation.units
            workload = workloads.get(reservation.ref)
            if workload is None:
                continue
            base = getattr(workload, "base_replicas", None)
            if base is not None:  # an endpoint: its burst is reclaimed for queued work
                free += reservation.units - base * workload.gpus_per_replica
                continue
            duration = _duration(workload, medians)
            if duration is not None:
                end = max((workload.started_at or workload.admitted_at or now) + duration, now)
                heapq.heappush(ends, (end, reservation.units, workload.cluster_name))
        at, waited_for = now, []
        for entry in (q for q in queue if q.flavor_id == flavor_id):
            while free < entry.units and ends:
                end, units, name = heapq.heappop(ends)
                free, at = free + units, max(at, end)
                waited_for.append(name)
            workload = workloads.get(entry.ref)
            if free < entry.units:
                estimates[entry.ref] = StartEstimate(None)
                continue
            estimates[entry.ref] = StartEstimate(at, tuple(waited_for))
            free -= entry.units
            if candidate is not None and entry is candidate[0]:
                duration = candidate[1]
            else:
                duration = _duration(workload, medians) if workload is not None else None
            if duration is not None:
                heapq.heappush(ends, (at + duration, entry.units, workload.cluster_name))
    return estimates


@dataclass(frozen=True)
class Forecast:
    """What submitting a request would do now (a dry run: nothing is written)."""

    outcome: str  #: "admit" | "queue" | "reject" | "invalid"
    message: str
    cost_per_hour: Decimal | None = None
    estimated_total: Decimal | None = None  #: with a known end
    share_of_budget_left: Decimal | None = None  #: of what the month's budget leaves (spent and committed counted)
    queue_position: int | None = None
    estimated_start_at: datetime | None = None
    start: str = ""  #: the estimate in words

    def as_dict(self) -> dict:
        return {"outcome": self.outcome, "message": self.message, "cost_per_hour": self.cost_per_hour,
                "estimated_total": self.estimated_total, "share_of_budget_left": self.share_of_budget_left,
                "queue_position": self.queue_position, "estimated_start_at": self.estimated_start_at,
                "start": self.start}


def forecast(team, request: ResourceRequest, flavor, duration: timedelta | None) -> Forecast:
    """Price, budget share and admission outcome of ``request`` (for ``flavor``) — with a queue position
    and start estimate when it would wait for quota."""
    now = timezone.now()
    rate = cost_per_hour(flavor, request.units, request.spot) if flavor is not None else None
    total = request.estimated_cost
    decision = admission.preview(team, request)
    share = None
    budget = budget_summary(team, now)
    if total is not None and budget["monthly_limit"] is not None:
        left = budget["monthly_limit"] - budget["spent_month"] - budget["committed"]
        share = (total / left).quantize(Decimal("0.0001")) if left > 0 else None
    result = Forecast(decision.outcome, decision.message, rate, total, share)
    if not decision.queued or flavor is None:
        return result
    entry = QueuedRequest(team=team, ref="dry-run", flavor=flavor, units=request.units,
                          units_per_node=request.units_per_node, priority=Priority(request.priority).rank,
                          spot=request.spot)
    position = QueuedRequest.objects.filter(team=team, priority__gte=entry.priority).count() + 1
    estimate = estimated_starts(team, now, candidate=(entry, duration)).get("dry-run") if decision.reason == (
        Reason.WAITING_FOR_QUOTA) else StartEstimate(None)
    return Forecast(result.outcome, result.message, rate, total, share, position,
                    estimate.at if estimate else None, estimate.words(now) if estimate else "")
