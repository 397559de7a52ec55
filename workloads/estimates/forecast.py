"""When will queued work start? Start estimates from the expected ends of the work ahead of it.

This module holds start estimates only (docs/glossary.md "start estimate"; the module's name is
older than the glossary). The preview of a submission, which shows one, is :mod:`workloads.estimates.preview`.

For each queued workload of a team, :func:`estimated_starts` replays the team's queue on its
flavor: units free now, then the admitted work's expected ends in time order, each queued
entry ahead starting — and later ending — as units free up, in queue order. An endpoint runs
until deleted (no end), but its burst replicas above its minimum are reclaimed for queued
work at the next cycle, so those units count as free now.

A running run that reports its progress (docs/metrics.md) is expected to end at its ETA, cut at
its runtime limit (:meth:`workloads.registry.Estimates.progress_ends`): what it says of itself
beats what its kind's history says, while its reports are fresh. Otherwise, a run's expected
running time (:func:`_duration`) is the median of the same job's earlier
runs — the team's runs of that kind with the same name, flavor and image that ended on their
own (succeeded or failed; a cancel says nothing about how long the work takes) — cut at its
runtime limit; without such history, its runtime limit × how much of their limits the
platform's runs use (:func:`workloads.estimates.limit_use` of :func:`platform_limit_spans`, once 20 runs with a limit have ended on their
own; before that, the limit itself); else unknown. The median is *not*
taken over every run of a flavor and image: one trainer image serves ten-minute evaluations
and ten-hour pre-training alike, and that population put a 15-minute run's end 9 hours out
(issue 20: "about 9 h", started in 9 min). A run already past its median is expected at its
limit. When no known end frees enough units the estimate is unknown, and says so rather
than guessing.

Every estimate is three simulations (issue 46): the work ahead ending at its typical times
(``at``), as soon as one run in ten does (``earliest``: its limit × the platform's 10th percentile
of limit use) and at its runtime limits (``latest``, no progress ETA either: the bound). Without a
figure of limit use the typical time *is* the limit, and the estimate was a bound presented as a
point ("in about 30 min" for runs that started in 2.4): :meth:`StartEstimate.words` says a range
with its bound, "starts in 3–30 min, by 04:52 UTC at the latest", or "starts within 30 min, by …"
when the bound is all that is known. bench/estimates.py measures both (the bound's coverage, the
ratio of estimated to real waits).

On an elastic pool (docs/pools.md "What the estimates assume") the start is when the work's nodes are
ready: the simulation is fed each flavor's pools (:class:`workloads.estimates.provisioning.Pools`: free
units on ready nodes, nodes being provisioned, room to grow, the pool's provisioning median — its tail
for the bound), and admitted work waiting on new nodes starts when what is left of its pool's median
from its ``provisioning_since`` is over. The words then say which pool grows: "starts in about 4 min,
after pool h100-80gb on east grows by 1 node (about 4 min)". Flavors without a pool are estimated as before.

Work the team's quota alone does not hold back gets no time: work waiting for money starts
when the budget allows it (an admin raises it, committed work ends early, the month turns),
which no end of other work decides; it is not ahead of anyone either (the queue is
best-effort). Work admitted but waiting for room on the cluster's nodes gets no time either,
and :data:`CAPACITY_WAIT` says why.
"""

from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from billing import reserved
from billing.ledger import month_end
from billing.models import QuotaHold
from core.formatting import format_clock, format_when, half_up
from quotas import fairshare
from quotas.constants import AdmissionCode
from quotas.decide import Decision
from quotas.facts import CohortFigures, cohort_of_quotas, request_of, reserved_block, team_quotas
from quotas.models import Cohort, QueuedRequest
from quotas.queue import MONEY_CODES, held_beyond_quota
from quotas.reclaim import Rules
from workloads import estimates
from workloads.estimates.provisioning import Pools
from workloads.identity import WorkloadId
from workloads.models import attempt_start, ran_in_all
from workloads.registry import Estimates, kind_for, kind_of, kinds

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
    """When queued work should start (issue 46): ``at``, the expected start (the runs ahead ending at
    their typical times), inside a range — ``earliest``, every run ahead ending as soon as one in ten
    does (:data:`workloads.estimates.EARLY_USE_QUANTILE` of the platform's limit use), and ``latest``,
    every one at its runtime limit: the bound, "by 04:52 at the latest", which holds unless work that
    goes first arrives (a higher priority; in a cohort, a member with a lower share) or the work ahead
    is preempted back into the queue. :meth:`words` is the one wording of it: the page, the API's
    ``start_estimate`` and a dry run's ``start`` and the CLI (which prints the API's) say it."""

    at: datetime | None  #: None: unknown (``unknown`` says why)
    after: tuple[Ahead, ...] = ()  #: the work whose ends it waits for
    unknown: str = NOTHING_KNOWN  #: the words when ``at`` is None
    earliest: datetime | None = None  #: the range's low end (None: not known sooner than ``at``)
    latest: datetime | None = None  #: the bound: everything ahead ends at its runtime limit (None: no bound)
    #: Its team is in a cohort: other members' work submitted later may go first (fair share), and
    #: reclaim may put work back ahead of it, so the bound is said with that condition.
    shared: bool = False
    #: "after pool h100-80gb on east grows by 2 nodes (about 4 min)": the new nodes it waits for ("": none).
    grows: str = ""

    def lead(self, now: datetime | None = None) -> str:
        """"starts in 3–30 min" ("within 30 min" when nothing is known sooner than the bound; "in about
        40 min" when there is no bound), or why it is unknown."""
        if self.at is None:
            return self.unknown
        now = now or timezone.now()
        if self.latest is None:
            minutes = _minutes(self.at, now)
            return "starts in about a minute" if minutes <= 1 else f"starts in about {_span(minutes)}"
        low, high = _minutes(self.earliest or self.at, now), _minutes(self.latest, now)
        if high <= 1:
            return "starts in about a minute"
        if self.earliest is None or self.earliest >= self.latest:
            return f"starts within {_span(high)}"
        if _span(low) == _span(high):
            return f"starts in about {_span(high)}"
        return f"starts in {_range(low, high)}"

    def bound(self, now: datetime | None = None) -> str:
        """"by 04:52 UTC at the latest" (the day too when it is not today; in a cohort, "unless the
        cohort's work goes first": bench/estimates.py's contended cohort saw the bound hold for 68 % of
        the runs that waited, later fair-share turns and reclaim going first); "" without a bound."""
        if self.at is None or self.latest is None:
            return ""
        now = now or timezone.now()
        local = timezone.localtime(self.latest)
        when = (format_when(self.latest) if local.date() != timezone.localtime(now).date()
                else f"{format_clock(self.latest)} {local.tzname()}")
        condition = " unless the cohort's work goes first" if self.shared else ""
        return f"by {when} at the latest{condition}"

    @property
    def ends(self) -> str:
        """"ends" or "end", to follow the names of :attr:`after`."""
        return "ends" if len(self.after) == 1 else "end"

    def words(self, now: datetime | None = None) -> str:
        """"starts in 3–30 min, when bert-finetune ends, by 04:52 UTC at the latest", or why it is unknown."""
        now = now or timezone.now()
        text = self.lead(now)
        if self.at is not None and self.after:
            names = [a.name for a in self.after]
            listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
            text = f"{text}, when {listed} {self.ends}"
        if self.at is not None and self.grows:
            text = f"{text}, {self.grows}"
        bound = self.bound(now)
        return f"{text}, {bound}" if bound else text


def _minutes(at: datetime, now: datetime) -> int:
    return max(half_up((at - now).total_seconds() / 60), 1)


def _span(minutes: int) -> str:
    return f"{minutes} min" if minutes < 120 else f"{half_up(minutes / 60)} h"


def _range(low: int, high: int) -> str:
    """"3–30 min", "2–5 h", "40 min–3 h"."""
    if high < 120:
        return f"{low}–{high} min"
    if low >= 120:
        return f"{half_up(low / 60)}–{half_up(high / 60)} h"
    return f"{low} min–{half_up(high / 60)} h"


def _ahead(workload) -> Ahead:
    url = workload.get_absolute_url() if hasattr(workload, "get_absolute_url") else ""
    return Ahead(workload.name, url)


def reserved_estimate(entry: QueuedRequest, decision: Decision, now: datetime) -> StartEstimate | None:
    """The estimate of work a reserved window decides (docs/reservations.md "Inside the window"), or None:

    * work only its team's window can hold starts when the window does (its units are cleared for then:
      the start, bounded one reconcile cycle later);
    * work another team's window keeps from every cluster starts when that window ends at the latest
      (sooner if work beside it ends first).
    """
    cycle = timedelta(seconds=settings.CELERY_RECONCILE_INTERVAL)
    window = awaited_window(entry, decision, now)
    if window is not None:
        return StartEstimate(window.start, earliest=window.start, latest=window.start + cycle)
    if not _waits_for_units(entry, decision):
        return None
    blocked = reserved_block(entry.flavor, request_of(entry), now)
    if blocked is not None:
        return StartEstimate(blocked[1].end, latest=blocked[1].end + cycle)
    return None


def awaited_window(entry: QueuedRequest, decision: Decision, now: datetime):
    """The team's window not started yet that work held back by more than its quota waits for (None: none) —
    its next one of the flavor that holds it whole, unless money or the clusters are what it waits for: the
    window its start estimate gives and the form's overrun warning reads (:mod:`workloads.estimates.preview`)."""
    if not _waits_for_units(entry, decision) or decision.reason.code == AdmissionCode.WAITING_FOR_CLUSTER:
        return None
    # Work that names a booking waits for that booking's next window; once the booking has none left, it is work
    # that names none (quotas.facts.Windows), which an open booking's window may hold.
    named = reserved.named_ref(entry.for_reservation)
    window = reserved.next_holding(entry.team_id, entry.flavor_id, entry.units, now, named) if named else None
    return window or reserved.next_holding(entry.team_id, entry.flavor_id, entry.units, now)


def _waits_for_units(entry: QueuedRequest, decision: Decision) -> bool:
    """Whether a window can be what held work waits for: not money, and not spot work (never in a window)."""
    return decision.reason.code not in MONEY_CODES and not entry.spot


def held_estimate(decision: Decision, now: datetime) -> StartEstimate:
    """The estimate of work held back by more than its quota (:func:`quotas.queue.held_beyond_quota`): no time, and why."""
    if decision.reason.code in MONEY_CODES:
        turn = timezone.localtime(month_end(now))
        return StartEstimate(None, unknown=(
            "start time unknown: it waits for money, not GPUs — it starts when the budget allows it (an admin "
            f"raises the budget, committed work ends early, or the month turns on {turn:%Y-%m-%d})"))
    return StartEstimate(None, unknown=f"start time unknown: {decision.reason.words}")


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
    return type(workload), *(getattr(workload, field) for field in Estimates.of(kind_of(workload)).job_fields)


def ended_on_their_own(kind) -> list[str]:
    """The final states of ``kind`` in which its work ended on its own, so that how long it ran says how long such work
    takes: not a user's end (``Lifecycle.removed``), nor its sweep's pruner, which cut it short (``Lifecycle.pruned``)."""
    lifecycle = kind.lifecycle
    return [state for state in kind.model.FINAL_STATES if state not in (*lifecycle.removed, lifecycle.pruned)]


#: What a finished workload's running time in all is read from (:func:`workloads.models.ran_in_all`): not the span from
#: its first start to its end, which counts the waits of a run queued again between its attempts.
RAN_COLUMNS = ("started_at", "attempt_started_at", "attempt", "finished_at", "earlier_run_seconds")


def median_durations(team, workloads: list) -> dict[tuple, timedelta]:
    """``{job: median running time}`` of the team's earlier runs of the jobs of ``workloads`` (one query per kind).

    A job (:func:`_job`) is a kind and its ``job_fields`` (a run's name, flavor and image); runs
    that ended on their own count (:func:`ended_on_their_own`: a cancel, a prune, a preemption or a budget stop
    ends work for reasons of its own). Only kinds with a runtime limit end on their own: the others (an endpoint)
    run until ended, so have no duration to predict.
    """
    wanted: dict[type, set[tuple]] = {}
    for workload in workloads:
        kind = kind_of(workload)
        if kind.runtime_limit is not None and isinstance(kind, Estimates):
            wanted.setdefault(type(workload), set()).add(_job(workload))
    spans: dict[tuple, list[float]] = {}
    for model, jobs in wanted.items():
        kind = kind_for(model.KIND_PREFIX)
        job_fields = Estimates.of(kind).job_fields
        same = {f"{field}__in": {job[1 + i] for job in jobs} for i, field in enumerate(job_fields)}
        rows = (model.objects.filter(team=team, state__in=ended_on_their_own(kind), started_at__isnull=False,
                                     finished_at__isnull=False, **same)
                .order_by("-finished_at").values_list(*job_fields, *RAN_COLUMNS))
        for *fields, start, attempt_started_at, attempt, end, earlier in rows:
            job = (model, *fields)
            sample = spans.setdefault(job, [])
            ran = ran_in_all(earlier, attempt_start(attempt_started_at, start, attempt), end)
            if job in jobs and ran and len(sample) < MEDIAN_SAMPLE:
                sample.append(ran.total_seconds())
    return {job: timedelta(seconds=statistics.median(sample)) for job, sample in spans.items() if sample}


def platform_limit_spans() -> list[tuple[float, float]]:
    """The spans :func:`workloads.estimates.limit_use` is taken over: the platform's most recent runs that
    ended on their own with a runtime limit (one query per kind with a limit and :class:`~workloads.registry.Estimates`). One figure for every
    team: a median ratio tells nothing of any team's work, and one team's few runs would make a noisy one."""
    spans: list[tuple[datetime, float]] = []
    for kind in kinds():
        column = kind.runtime_limit
        if column is None or not isinstance(kind, Estimates):
            continue  # a limit that is not an estimate's (a window's end) tells nothing of how runs use theirs
        rows = (kind.model.objects.filter(state__in=ended_on_their_own(kind), started_at__isnull=False,
                                          finished_at__isnull=False, **{f"{column}__gt": 0})
                .order_by("-finished_at").values_list(*RAN_COLUMNS, column)[:estimates.LIMIT_USE_SAMPLE])
        for start, attempt_started_at, attempt, end, earlier, limit in rows:
            ran = ran_in_all(earlier, attempt_start(attempt_started_at, start, attempt), end)
            spans.append((end, (ran.total_seconds() if ran is not None else 0.0, limit * 60.0)))
    spans.sort(key=lambda span: span[0], reverse=True)
    return [span for _end, span in spans[:estimates.LIMIT_USE_SAMPLE]]


def _expected_end(workload, start: datetime, now: datetime, medians: dict[tuple, timedelta],
                  use: float | None = None, reported: datetime | None = None) -> datetime | None:
    """When ``workload`` (running since ``start``, or starting then) should end; None when unknown.

    ``reported``: when its own progress says it ends (:func:`progress_ends`): that, never before
    ``now``, cut at its limit. Else :func:`workloads.estimates.expected_end` of its typical running
    time — the same job's median, else its runtime limit × the platform's limit ``use``
    (:func:`platform_limit_spans`) — and its limit. Work of a kind without a runtime limit runs until ended: None;
    work of a kind without :class:`~workloads.registry.Estimates` runs to its limit.
    """
    kind = kind_of(workload)
    if kind.runtime_limit is None:
        return None
    limit = kind.runtime_left(workload)  # what its earlier attempts left of it: the current attempt's limit
    if not isinstance(kind, Estimates):
        return estimates.expected_end(start, now, limit, None)  # nothing learnt of its kind: it runs to its limit
    if reported is not None:
        end = max(reported, now)
        return min(end, max(start + limit, now)) if limit is not None else end
    return estimates.expected_end(start, now, limit, estimates.typical_time(limit, medians.get(_job(workload)), use))


def progress_ends(workloads: list, now: datetime) -> dict[str, datetime]:
    """``{ref: expected end}`` of the ``workloads`` whose reported progress says when (one call per kind)."""
    by_kind: dict[str, list] = {}
    for workload in workloads:
        by_kind.setdefault(workload.KIND_PREFIX, []).append(workload)
    ends: dict[str, datetime] = {}
    for prefix, members in by_kind.items():
        ends.update(Estimates.of(kind_for(prefix)).progress_ends(members, now))
    return ends


def estimated_starts(team, now: datetime | None = None,
                     candidate: tuple[QueuedRequest, timedelta | None] | None = None,
                     held: dict[str, Decision] | None = None) -> dict[str, StartEstimate]:
    """``{ref: StartEstimate}`` for every queued workload of ``team``, from one simulation of its
    queue (:func:`workloads.estimates.simulate`; in a cohort, of every member's queue).

    ``candidate`` is a request not submitted yet (an unsaved queue entry and its expected
    duration): it is placed behind everything of its priority, as a submission would be.
    ``held`` is :func:`quotas.queue.held_beyond_quota` when the caller has it already.
    """
    now = now or timezone.now()
    # 1. The queue: the team's (and its cohort's), in admission order.
    quotas = team_quotas(team)
    cohort = cohort_of_quotas(quotas)
    members = list(cohort.slugs) if cohort is not None else [team.pk]
    queue = list(QueuedRequest.objects.filter(team_id__in=members).select_related("flavor")
                 .order_by(*QueuedRequest.QUEUE_ORDER))
    own = [entry for entry in queue if entry.team_id == team.pk]
    if not own and candidate is None:
        return {}
    held = dict(held_beyond_quota(team, entries=own, quotas=quotas) if held is None else held)
    for member in {entry.team_id for entry in queue} - {team.pk}:  # not ahead of anyone in the cohort either
        held.update(held_beyond_quota(member_team(queue, member)))
    if candidate is not None:
        # Behind everything of its priority (the queue's own tie rule), submitted now.
        entry = copy.copy(candidate[0])
        entry.created_at = now
        position = sum(1 for other in queue if other.priority >= entry.priority)
        queue.insert(position, entry)
    flavors = {entry.flavor_id for entry in queue if entry.team_id == team.pk}
    queue = [entry for entry in queue if entry.flavor_id in flavors]
    # 2. What holds those flavors, and when each is expected to end.
    holds = list(QuotaHold.objects.held().filter(team_id__in=members, flavor_id__in=flavors)
                        .select_related("flavor"))
    workloads = _workloads([r.ref for r in holds] + [q.ref for q in queue])
    spans = platform_limit_spans()
    reported = progress_ends(list(workloads.values()), now)
    # Three ways the work ahead may end (StartEstimate): at its typical times (its progress's ETA, its
    # job's median, its limit × the platform's median limit use), as early as one run in ten does,
    # and at its runtime limit (the bound: no typical time, no progress ETA). New nodes take their pool's
    # median, and its tail for the bound.
    ways = {"at": (median_durations(team, list(workloads.values())), estimates.limit_use(spans), reported),
            "earliest": ({}, estimates.limit_use(spans, estimates.EARLY_USE_QUANTILE), reported),
            "latest": ({}, None, {})}
    pools = Pools({entry.flavor_id: entry.flavor for entry in queue})
    on_nodes = [(workloads[hold.ref], hold.units) for hold in holds
                if hold.ref in workloads and pools.waits_on_nodes(workloads[hold.ref])]
    growth = {way: pools.growth(on_nodes, now, tail=way == "latest") for way in ways}
    all_quotas = (cohort.quotas if cohort is not None
                  else {(team.pk, flavor_id): quota for flavor_id, quota in quotas.items()})
    mine = {entry.ref for entry in queue if entry.team_id == team.pk}
    sharing, cycle = _sharing(team, cohort, now), timedelta(seconds=settings.CELERY_RECONCILE_INTERVAL)
    # 3. One simulation per way, in admission's own rules.
    starts = {way: estimates.simulate(now, *_queue_ends(holds, queue, workloads, held, candidate, now, *facts,
                                                        pools=pools, tail=way == "latest"),
                                      all_quotas, cycle, sharing, wanted=mine - held.keys(), growth=growth[way])
              for way, facts in ways.items()}
    names = _names(team, workloads, cohort, candidate)
    result: dict[str, StartEstimate] = {}
    for ref in mine:
        if ref in held:
            entry = next(entry for entry in queue if entry.ref == ref)
            result[ref] = reserved_estimate(entry, held[ref], now) or held_estimate(held[ref], now)
            continue
        start = starts["at"].get(ref)
        if start is None or start.at is None:
            flavor = next(entry.flavor.name for entry in queue if entry.ref == ref)
            result[ref] = StartEstimate(None, unknown=_unknown_words(flavor, start.unknown if start else (), names))
            continue
        earliest, latest = (starts[way][ref].at if ref in starts[way] else None for way in ("earliest", "latest"))
        result[ref] = StartEstimate(start.at, tuple(dict.fromkeys(names(ahead) for ahead in start.after)),
                                    earliest=min(earliest, start.at) if earliest is not None else None,
                                    latest=max(latest, start.at) if latest is not None else None,
                                    shared=cohort is not None,
                                    grows=pools.words(start_flavor(queue, ref), start.new_units))
    return result


def start_flavor(queue: list[QueuedRequest], ref: str) -> int:
    """The flavor id of the queued entry ``ref``."""
    return next(entry.flavor_id for entry in queue if entry.ref == ref)


def _queue_ends(holds: list[QuotaHold], queue: list[QueuedRequest], workloads: dict[str, object],
                held: dict[str, Decision], candidate: tuple[QueuedRequest, timedelta | None] | None, now: datetime,
                medians: dict[tuple, timedelta], use: float | None,
                reported: dict[str, datetime], pools: Pools | None = None,
                tail: bool = False) -> tuple[list[estimates.Holding], list[estimates.Waiting]]:
    """What holds the flavors and what waits, each with its expected end or running time, by one way
    of ending (:func:`estimated_starts`): the job ``medians``, the platform's limit ``use``, the ETAs
    ``reported`` by the work's progress; admitted work waiting on new nodes starts when its ``pools``
    say (their median, or their ``tail`` for the bound)."""
    holding = [_holding(hold, workloads.get(hold.ref), now, medians, use, reported.get(hold.ref),
                        pools.start_of(workloads[hold.ref], now, tail) if pools and hold.ref in workloads else None)
               for hold in holds]
    waiting = []
    for entry in queue:
        if entry.ref in held:
            continue
        if candidate is not None and entry.ref == candidate[0].ref:
            # Not submitted: no job history is looked up; its limit and the platform's limit use.
            end = estimates.expected_end(now, now, candidate[1], estimates.typical_time(candidate[1], None, use))
            waiting.append(estimates.Waiting(entry, end - now if end is not None else None))
            continue
        workload = workloads.get(entry.ref)
        end = _expected_end(workload, now, now, medians, use) if workload is not None else None
        waiting.append(estimates.Waiting(entry, end - now if end is not None else None))
    return holding, waiting


def member_team(queue: list[QueuedRequest], team_id: int):
    """A cohort member's team, as loaded with its queue entries (for :func:`quotas.queue.held_beyond_quota`)."""
    return next(entry.team for entry in queue if entry.team_id == team_id)


def _holding(hold: QuotaHold, workload, now: datetime, medians: dict[tuple, timedelta],
             use: float | None = None, reported: datetime | None = None,
             starts: datetime | None = None) -> estimates.Holding:
    """What the simulation knows of one hold: its units (an endpoint's burst goes back for
    queued work at the next cycle: only its guaranteed units hold), when it should end (``reported``:
    its progress's ETA; ``starts``: when its new nodes should be ready, if it waits on them), and its
    place in the queue were reclaim to take it back."""
    units, ends_at, admitted_at = hold.units, None, hold.created_at
    if workload is not None:
        kind = kind_of(workload)
        units = min(units, workload.placement_shape[0])
        if kind.runtime_limit is not None:
            # Admitted but not started yet (pending): its time starts when it does, now at the earliest (on new
            # nodes: when they should be ready). The current attempt's start: its limit left is counted from there.
            ends_at = _expected_end(workload, workload.attempt_started or starts or now, now, medians, use, reported)
        admitted_at = workload.started_at or hold.created_at
    entry = QueuedRequest(team_id=hold.team_id, ref=hold.ref, flavor=hold.flavor,
                          units=hold.units, units_per_node=hold.units_per_node,
                          priority=hold.priority, spot=hold.spot,
                          created_at=workload.created_at if workload is not None else hold.created_at)
    return estimates.Holding(hold.ref, hold.team_id, hold.flavor_id, units, ends_at,
                             hold.borrowed_units, hold.priority, admitted_at, entry, spot=hold.spot)


def _sharing(team, cohort: CohortFigures | None, now: datetime) -> estimates.Sharing | None:
    """The cohort's figures and rules for the simulation (None outside a cohort)."""
    if cohort is None:
        return None
    row = Cohort.objects.filter(members__team=team).first()
    rules = None if row is None or row.reclaim == Cohort.Reclaim.NEVER else Rules(
        row.reclaim, timedelta(minutes=row.min_runtime_minutes), timedelta(seconds=row.preemption_delay_seconds))
    return estimates.Sharing(cohort, fairshare.remembered_units(list(cohort.slugs), now), rules,
                             timedelta(seconds=settings.SLIPWAY_PREEMPTION_GRACE_SECONDS))


def _names(team, workloads: dict[str, object], cohort: CohortFigures | None,
           candidate: tuple[QueuedRequest, timedelta | None] | None):
    """``ref → Ahead``: the team's own work by name and page; another member's only as its team's work."""
    def name(ref: str) -> Ahead:
        if candidate is not None and ref == candidate[0].ref:
            return Ahead("the new request")
        workload = workloads.get(ref)
        if workload is None:
            return Ahead(ref)
        if workload.team_id != team.pk and cohort is not None:
            return Ahead(f"work of {cohort.slugs.get(workload.team_id, 'another team')}")
        return _ahead(workload)
    return name


def _unknown_words(flavor: str, refs: tuple[str, ...], names) -> str:
    """Why no time: the work holding the flavor that nothing ends (no runtime limit), by name."""
    if not refs:
        return NOTHING_KNOWN
    listed = list(dict.fromkeys(names(ref).name for ref in refs))
    text = listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]
    verb = "has" if len(refs) == 1 else "have"
    return f"start time unknown: {text}, holding {flavor}, {verb} no runtime limit"
