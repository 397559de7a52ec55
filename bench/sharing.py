"""Benchmark: what a cohort (borrowing, fair share, reclaim) buys over hard per-team walls, on a GPU trace.

Run ``.venv/bin/python bench/sharing.py [--trace bench/traces/bursty.csv] [--quota team-a=4,team-b=4,team-c=8]
[--weights team-a=1,...] [--capacity 16] [--quick [HOURS]]`` (``--help``: the cohort's rules, the
half-life, borrowing limits); a team absent from ``--quota`` gets an equal part of the capacity
the listed ones leave. No database and no sleeping: the trace is replayed on a simulated clock
through the production's pure rules — :func:`quotas.decide.decide` admits,
``quotas.admission.fair_order`` (with ``quotas.fairshare``'s shares) orders the cohort's queue and
:func:`quotas.reclaim.choose_victims` picks what a team under its nominal quota takes back —
three times:

* **cohort** (the column *work lost*): every team in one cohort (each lends all of its nominal quota, reclaim ``any``,
  ``--min-runtime`` and ``--delay``). Each cycle (``--cycle``, 5 s) does what the reconcile
  cycle does: admit queued work (work that fits its own team's quota first, then the rest
  lowest share after admission first, the share remembering borrowed GPU-hours with the
  ``--half-life``), then put every queued run of a team under its nominal quota that does
  not fit to ``choose_victims`` (in queue order, dated from its submission, victims chosen for
  an earlier claim counted as stopping — ``workloads.cycle.preemption``). A victim holds its units
  for ``--stop`` seconds (the preemption grace, 30 s: pods that use all of it), then returns
  to the queue at its old position. Victims are ranked as in production, the least money lost
  first (``quotas.reclaim.victim_order``: each candidate's start and last checkpoint, one price);
  ``--silent 0.3`` makes 30 % of the runs (spread evenly) checkpoint without telling reclaim,
  which then assumes they lose the median of those that tell;
* **cohort by recency** (the column *recency*): the same, victims ranked by the order before
  issue #24 (``quotas.reclaim.recency_order``: highest share, lower priority, newest admission),
  to measure what ranking by work lost saves;
* **cohort by foresight** (the column *foresight*): the same, victims ranked as by work lost but by
  what each would really lose when its pods are gone (its checkpoints during the grace, a silent
  run's real last checkpoint) — what no rule can know, so the least any victim *order* can lose:
  the bound the work-lost column is judged against;
* **walls**: each team alone with its nominal quota (``FlavorQuota(lenders=None)``), its queue
  admitted best-effort in queue order (``admit_waiting``).

The trace is a CSV with the columns ``submit_s,team,flavor,units,duration_s,priority,
checkpoint_every_s`` (one flavor; priority low|normal|high; checkpoint 0: never).
``bench/traces/make_bursty.py`` writes the bundled one. The figures, for every run:

* **utilization**: ∫ allocated ÷ ∫ min(capacity, demand), over the whole replay, where
  *demand* at an instant is the units of every run submitted and not finished (queued or
  running) and *allocated* the units of the running ones;
* **delivered** GPU-hours per team (units × time held, lost work included) against its **fair
  share**: at each instant the cohort's promise to the demand of that instant — each team gets
  its demand up to its nominal quota, and what that leaves of the cohort's capacity
  (min(capacity, Σ nominal)) is water-filled among the teams wanting more, in proportion to
  their weights, each capped at its demand — integrated over the replay. (With weights
  proportional to the nominal quotas this is plain weighted water-filling of the capacity.)
  Both runs are judged against the fair share of their own demand. **Fair-share error**: the
  largest |delivered − fair| ÷ fair over the teams. Runs are indivisible, so units the cohort
  leaves idle (free units no queued run fits) count against it too, mostly against the team
  with the largest runs;
* **preemptions** and **lost GPU-hours**: a victim loses units × its run time since its last
  checkpoint when its pods are gone (checkpoints every ``checkpoint_every_s`` of run time),
  returns to the queue at its old position (priority, submission time) and restarts from that
  checkpoint;
* **mean queue wait**: the time a run spent queued (before its start and after each
  preemption), averaged over the runs.

Not modelled: node packing (the capacity is one pool of units), budgets, a checkpoint written
on the preemption notice. Work is only admitted on a cycle, so a unit freed between cycles
idles until the next one (that shows in the utilization).

**Shared-flavor mix** (issue 37, the section *shared GPUs* of the report): the same light inference
demand — ``--endpoints`` endpoints (24) of a ``--model-gb`` model (3 GB), each busy with a peak
between 5 % and 30 % of a T4 over a day (night: a fifth of it), sampled every 5 minutes — served on
whole T4s and on the T4 time-sliced ×4 (``t4-ts4``, docs/flavors.md), each endpoint's replicas sized
by the autoscaler's rule (ceil(load ÷ (a replica's compute × the 70 % target)), at least 1) where a
time-sliced replica is counted on the compute it is guaranteed when its GPU's other pods are busy
too (1/4). The figures, side by side: peak replicas and physical GPUs, unit-hours, physical
GPU-hours and cost — through the production's rules: the flavor's fraction (``GpuFlavor.set_fraction``),
the ledger's ``interval_unit_hours``, ``interval_gpu_hours`` and ``interval_cost``, the one unit price,
and the flavor advice (``quotas.policy.warnings``: the model must fit the memory 4 pods share).
Target: at least 3× fewer physical GPU-hours time-sliced than on whole GPUs.

Targets on the bundled trace: utilization with the cohort ≥ 0.95 and ≥ 1.25× the walls'; fair-share
error ≤ 5 %; lost GPU-hours ≤ 2 % of delivered; lost GPU-hours by work lost ≤ half of those by
recency. ``--quick [HOURS]`` replays the first HOURS (48 by default) only and
does not judge the targets. Every cycle's units are checked against the rules' invariants (no
team above its nominal quota plus what it may borrow, the cohort never above the sum of the
nominal quotas; a walled team never above its own; no run admitted with borrowed units while
a run that fitted its own team's quota waited): the run fails if any is broken.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Only so that quotas' modules import; nothing here touches a database.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402
from django.apps import apps  # noqa: E402

# Imported by the benchmark's own test, in the test's process: setting Django up again there would
# configure logging again, onto whatever stream stands for stderr at that moment (the test's capture,
# closed when it ends), and every later log line of that process would fail to write.
if not apps.ready:
    django.setup()

from django.conf import settings  # noqa: E402

from billing.ledger import interval_cost, interval_gpu_hours, interval_unit_hours  # noqa: E402
from billing.models import unit_price  # noqa: E402
from core.priority import Priority  # noqa: E402
from fleet.constants import Sharing  # noqa: E402
from fleet.models import GpuFlavor  # noqa: E402
from quotas import fairshare, policy  # noqa: E402
from quotas.admission import fair_order  # noqa: E402
from quotas.decide import FlavorQuota, Lender, ResourceRequest, decide  # noqa: E402
from quotas.facts import CohortFigures  # noqa: E402
from quotas.models import QueuedRequest, TeamQuota  # noqa: E402
from quotas.reclaim import Candidate, Claim, Rules, choose_victims, recency_order, victim_order  # noqa: E402

TRACE = ROOT / "bench" / "traces" / "bursty.csv"
COLUMNS = ["submit_s", "team", "flavor", "units", "duration_s", "priority", "checkpoint_every_s"]
EPOCH = datetime(2026, 11, 23, tzinfo=UTC)  # the simulated clock's zero, for the rules that take datetimes
QUICK_HOURS = 48

TARGET_UTILIZATION = 0.95
TARGET_UTILIZATION_RATIO = 1.25
TARGET_FAIR_ERROR = 0.05
TARGET_LOST_SHARE = 0.02
TARGET_LOST_RATIO = 0.5  # lost GPU-hours with victims by work lost ≤ half of those by recency
TARGET_SHARED_SAVING = 3.0  # physical GPU-hours of light endpoints: whole GPUs ≥ 3× time-sliced ×4
SPREAD = (math.sqrt(5) - 1) / 2  # spreads --silent evenly over the trace's runs, the same ones every replay
#: Victim orders a cohort replay can rank by; ``foresight`` (None here) is built each cycle by
#: :meth:`Replay.foresight_order` from what only the simulation knows.
ORDERS = {"work lost": victim_order, "recency": recency_order, "foresight": None}


@dataclass(eq=False)
class Run:
    """One run of the trace and what happened to it in one replay."""

    ref: str
    team: str
    units: int
    duration_s: float
    priority: int  # Priority.rank
    checkpoint_every_s: float
    submit_s: float
    reports: bool = True  # whether reclaim is told of its checkpoints (--silent)
    done: float = 0.0  # seconds of its work kept (at its last start: its last checkpoint)
    started_at: float | None = None  # None: not running
    queued_since: float = 0.0
    borrowed: int = 0
    preemptions: int = 0
    wait_s: float = 0.0
    lost_unit_s: float = 0.0
    finished_at: float | None = None
    stopping_since: float | None = None  # chosen as a victim: its pods stop, its units still held
    for_reservation: int | None = None  # the reservation it names (bench/reservations.py's booked runs)

    @property
    def end_s(self) -> float:
        return self.started_at + self.duration_s - self.done

    def checkpointed(self, now: float) -> float:
        """Its work saved by the last checkpoint at ``now`` (it runs since ``started_at``)."""
        progress = self.done + now - self.started_at
        if self.checkpoint_every_s <= 0:
            return 0.0
        return math.floor(progress / self.checkpoint_every_s) * self.checkpoint_every_s

    def last_checkpoint_at(self, now: float) -> datetime | None:
        """When it wrote its last checkpoint since its start (None: none since), as reclaim is told."""
        kept = self.checkpointed(now)
        return at(self.started_at + kept - self.done) if kept > self.done else None


@dataclass(frozen=True)
class Setup:
    flavor: str
    capacity: int
    nominal: dict[str, int]
    weights: dict[str, float]
    borrowing_limit: dict[str, int | None]
    rules: Rules
    cycle_s: float
    half_life_hours: float
    stop_s: float = 30.0
    silent: float = 0.0  # the part of the runs that checkpoint but never report it (--silent)
    max_units_per_node: int = 8

    @property
    def teams(self) -> list[str]:
        return sorted(self.nominal)

    @property
    def pool(self) -> int:
        """What the cohort may hold at once: its nominal quotas, within the capacity."""
        return min(self.capacity, sum(self.nominal.values()))


@dataclass
class Result:
    mode: str
    runs: list[Run]
    rejected: list[Run]
    span_s: float = 0.0
    allocated: dict[str, float] = field(default_factory=dict)  # team → unit-seconds held
    fair: dict[str, float] = field(default_factory=dict)  # team → unit-seconds of its fair share
    usable: float = 0.0  # ∫ min(capacity, demand) dt
    preemptions: int = 0
    samples: list[dict[str, int]] = field(default_factory=list)  # units held per team after each cycle
    broken: list[str] = field(default_factory=list)  # invariants that failed, with when

    @property
    def utilization(self) -> float:
        return sum(self.allocated.values()) / self.usable if self.usable else 1.0

    def fair_error(self, team: str) -> float:
        fair = self.fair.get(team, 0.0)
        return abs(self.allocated.get(team, 0.0) - fair) / fair if fair else 0.0

    @property
    def max_fair_error(self) -> float:
        return max((self.fair_error(team) for team in self.fair), default=0.0)

    @property
    def lost_unit_s(self) -> float:
        return sum(run.lost_unit_s for run in self.runs)

    @property
    def mean_wait_s(self) -> float:
        return sum(run.wait_s for run in self.runs) / len(self.runs) if self.runs else 0.0

    def mean_wait_s_of(self, team: str) -> float:
        waits = [run.wait_s for run in self.runs if run.team == team]
        return sum(waits) / len(waits) if waits else 0.0


# -- the cohort's admission order and shares: the production's, on unsaved rows ----------------

FLAVOR_ID = 1


class Cohort:
    """The replay's cohort as ``quotas.facts.CohortFigures`` (what fair share and ``fair_order``
    read), on unsaved model rows: teams are numbered 1… in name order, the flavor is id 1."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.ids = {team: number for number, team in enumerate(setup.teams, start=1)}
        self.flavor = GpuFlavor(pk=FLAVOR_ID, name=setup.flavor, active=True,
                                max_units_per_node=setup.max_units_per_node)
        self.quotas = {(number, FLAVOR_ID): TeamQuota(team_id=number, flavor=self.flavor, limit=setup.nominal[team],
                                                      borrowing_limit=setup.borrowing_limit.get(team))
                       for team, number in self.ids.items()}
        self.weights = {self.ids[team]: Decimal(str(weight)) for team, weight in setup.weights.items()}

    def figures(self, usage: dict[str, int]) -> CohortFigures:
        return CohortFigures(slugs={number: team for team, number in self.ids.items()}, quotas=self.quotas,
                             usage={(self.ids[team], FLAVOR_ID): units for team, units in usage.items()},
                             weights=self.weights)

    def remembered(self, rows: list[tuple[str, datetime, float]], now: datetime) -> dict[int, float]:
        """``quotas.fairshare.remembered_from`` of hourly rows ``(team, hour, borrowed GPU-hours)``."""
        return fairshare.remembered_from([(self.ids[team], hour, gpu_hours) for team, hour, gpu_hours in rows],
                                         now, self.setup.half_life_hours)

    def shares(self, usage: dict[str, int], remembered: dict[int, float]) -> dict[str, float]:
        """Every team's share now (``quotas.fairshare.shares``): what reclaim ranks victim teams by."""
        shares = fairshare.shares(self.figures(usage), FLAVOR_ID, remembered)
        return {team: shares[number] for team, number in self.ids.items()}

    def entry(self, run: Run, pk: int) -> QueuedRequest:
        return QueuedRequest(pk=pk, ref=run.ref, team_id=self.ids[run.team], flavor=self.flavor, units=run.units,
                             units_per_node=min(run.units, self.setup.max_units_per_node), priority=run.priority,
                             created_at=at(run.submit_s), for_reservation=run.for_reservation)


def queue_key(run: Run) -> tuple:
    """A queue's order (``QueuedRequest.QUEUE_ORDER``): priority, then submission (a preempted run keeps its own)."""
    return (-run.priority, run.submit_s, run.ref)


def fair_admissions(cohort: Cohort, queued: list[Run], usage: dict[str, int],
                    remembered: dict[int, float], windows=None) -> list[tuple[Run, int]]:
    """``(run, borrowed units)`` of the cohort's queued runs admitted now, in the order admitted;
    ``usage`` is updated as they are. The one place the cohort's admission order comes from:
    ``quotas.admission.fair_order`` itself (work within its own team's nominal quota first, then
    the lowest share after admission, then priority, then age; :func:`decide` for every fit).
    ``windows``: the teams' reserved windows (a ``quotas.facts.Windows``: bench/reservations.py's); a run
    one of them holds is admitted into it rather than onto the quota (``windows.taken`` says which)."""
    runs = {}
    for pk, run in enumerate(sorted(queued, key=queue_key), start=1):
        entry = cohort.entry(run, pk)
        runs[id(entry)] = (run, entry)
    figures = cohort.figures(usage)
    admitted = fair_order([entry for _run, entry in runs.values()], figures, {}, remembered, windows=windows)
    for team, number in cohort.ids.items():
        usage[team] = figures.usage.get((number, FLAVOR_ID), 0)
    return [(runs[id(entry)][0], borrows) for entry, borrows in admitted]


ORDER_SOURCE = "quotas.admission.fair_order, quotas.fairshare (production)"


def queue_admissions(setup: Setup, queued: list[Run], usage: dict[str, int]) -> list[tuple[Run, int]]:
    """What ``admit_waiting`` admits for teams outside a cohort: each team's queue in its order
    (priority, then submission), best-effort (a later run that fits passes one that does not)."""
    order = []
    for run in sorted(queued, key=queue_key):
        if decide(request_of(setup, run), usage[run.team], quota_of(setup, run.team, usage, False)).admitted:
            usage[run.team] += run.units
            order.append((run, 0))
    return order


def quota_of(setup: Setup, team: str, usage: dict[str, int], cohort: bool) -> FlavorQuota:
    lenders = tuple(Lender(other, setup.nominal[other], usage[other]) for other in setup.teams if other != team)
    return FlavorQuota(max_units_per_node=setup.max_units_per_node, limit=setup.nominal[team],
                       borrowing_limit=setup.borrowing_limit.get(team), lenders=lenders if cohort else None)


def request_of(setup: Setup, run: Run) -> ResourceRequest:
    return ResourceRequest(flavor=setup.flavor, units=run.units,
                           units_per_node=min(run.units, setup.max_units_per_node),
                           priority=Priority.from_rank(run.priority))


def at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


# -- the replay ------------------------------------------------------------------------------


def water_fill(setup: Setup, demand: dict[str, int]) -> dict[str, float]:
    """The fair share of an instant's demand (module docstring): nominal first, then the rest by weight."""
    fair = {team: float(min(demand[team], setup.nominal[team])) for team in setup.teams}
    spare = setup.pool - sum(fair.values())
    wanting = {team for team in setup.teams if demand[team] > fair[team]}
    while spare > 1e-9 and wanting:
        weight = sum(setup.weights[team] for team in wanting)
        step = {team: spare * setup.weights[team] / weight for team in wanting}
        capped = {team for team in wanting if fair[team] + step[team] >= demand[team]}
        if not capped:
            for team in wanting:
                fair[team] += step[team]
            break
        for team in capped:
            spare -= demand[team] - fair[team]
            fair[team] = float(demand[team])
        wanting -= capped
    return fair


class Replay:
    def __init__(self, setup: Setup, trace: list[dict], cohort: bool, order: str = "work lost"):
        self.setup, self.cohort = setup, cohort
        self.order = ORDERS[order]
        self.figures = Cohort(setup)
        self.result = Result(order if cohort else "walls", [], [])
        self.pending: list[Run] = []  # not submitted yet, by submission time
        idle = dict.fromkeys(setup.teams, 0)
        for i, row in enumerate(trace):
            run = Run(f"run:{i}", row["team"], row["units"], row["duration_s"], row["priority"],
                      row["checkpoint_every_s"], row["submit_s"], queued_since=row["submit_s"],
                      reports=(i * SPREAD) % 1.0 >= setup.silent)
            # What can never fit is refused at submission (an API 400): it is no one's demand.
            never = decide(request_of(setup, run), 0, quota_of(setup, run.team, idle, cohort)).rejected
            (self.result.rejected if never else self.pending).append(run)
        self.pending.sort(key=lambda run: run.submit_s)
        self.result.runs = list(self.pending)
        self.queued: list[Run] = []
        self.running: list[Run] = []
        self.usage = dict(idle)
        self.demand = dict(idle)
        self.result.allocated = dict.fromkeys(setup.teams, 0.0)
        self.result.fair = dict.fromkeys(setup.teams, 0.0)
        self.borrowed_unit_s: dict[tuple[str, int], float] = {}  # (team, hour) → borrowed unit-seconds
        self._remembered: tuple[float | None, dict[int, float]] = (None, {})

    # Time passes between cycles: runs end and are submitted at their own instants.
    def advance(self, start: float, stop: float) -> None:
        events = sorted([(run.end_s, 0, run) for run in self.running if run.end_s <= stop]
                        + [(run.submit_s, 1, run) for run in self.pending if run.submit_s <= stop],
                        key=lambda event: (event[0], event[1], event[2].ref))
        held = dict.fromkeys(self.setup.teams, 0)
        borrowed = dict(held)
        for run in self.running:
            held[run.team] += run.units
            borrowed[run.team] += run.borrowed
        now = start
        for when, kind, run in [*events, (stop, 2, None)]:
            self.integrate(held, borrowed, now, max(now, when))
            now = max(now, when)
            if kind == 0:  # it ended: its units idle until the next cycle admits someone
                held[run.team] -= run.units
                borrowed[run.team] -= run.borrowed
                self.demand[run.team] -= run.units
                run.finished_at = when
            elif kind == 1:
                self.demand[run.team] += run.units

    def integrate(self, held: dict[str, int], borrowed: dict[str, int], start: float, stop: float) -> None:
        span = stop - start
        if span <= 0:
            return
        hour = math.floor(start / 3600)
        while start < stop:  # the ledger's borrowed GPU-hours, by team and hour
            piece = min(stop, (hour + 1) * 3600) - start
            for team, units in borrowed.items():
                if units:
                    key = (team, hour)
                    self.borrowed_unit_s[key] = self.borrowed_unit_s.get(key, 0.0) + units * piece
            start, hour = start + piece, hour + 1
        for team, fair in water_fill(self.setup, self.demand).items():
            self.result.fair[team] += fair * span
            self.result.allocated[team] += held[team] * span
        self.result.usable += min(self.setup.capacity, sum(self.demand.values())) * span

    # A cycle: what ended leaves, what was submitted queues, admission, reclaim, admission.
    def cycle(self, now: float) -> bool:
        """One cycle; returns whether it admitted or preempted anything (then the next one may differ)."""
        for run in [run for run in self.running if run.finished_at is not None]:
            self.running.remove(run)
            self.usage[run.team] -= run.units
        changed = self.stopped(now)
        while self.pending and self.pending[0].submit_s <= now:
            self.queued.append(self.pending.pop(0))
        changed = self.admit(now) or changed
        if self.cohort and self.reclaim(now):
            changed = True
            if self.stopped(now):  # pods that stop at once (--stop 0): their units go this cycle
                self.admit(now)
        self.check(now)
        return changed

    def admit(self, now: float) -> bool:
        """Admit what fits now (the cohort's order or the walled teams'); whether any was admitted."""
        usage = dict(self.usage)
        if not self.queued or (self.cohort and sum(usage.values()) >= self.setup.pool):
            return False  # nothing could be admitted: every admission takes a unit of the cohort's
        if self.cohort:
            admitted = fair_admissions(self.figures, self.queued, usage, self.remembered(now))
        else:
            admitted = queue_admissions(self.setup, self.queued, usage)
        self.check_nominal_first(admitted, now)
        for run, borrows in admitted:
            self.queued.remove(run)
            self.start(run, borrows, now)
        self.usage = usage
        return bool(admitted)

    def start(self, run: Run, borrows: int, now: float) -> None:
        """An admitted run starts now, ``borrows`` of its units the cohort's; its wait ends."""
        run.wait_s += now - run.queued_since
        run.started_at, run.borrowed = now, borrows
        self.running.append(run)

    def remembered(self, now: float) -> dict[int, float]:
        """What each team remembers having borrowed, from the hourly borrowed GPU-hours so far (the ledger's)."""
        if self._remembered[0] != now:  # once a cycle: nothing is borrowed between its steps
            rows = [(team, at(hour * 3600), unit_s / 3600) for (team, hour), unit_s in self.borrowed_unit_s.items()
                    if hour * 3600 < now]
            self._remembered = (now, self.figures.remembered(rows, at(now)))
        return self._remembered[1]

    def reclaim(self, now: float) -> bool:
        """``workloads.cycle.preemption._victims``: every queued run, in queue order, asks ``choose_victims``.

        Only runs of a team under its nominal quota that do not fit can get an answer with
        victims (the rule's first checks); the others are skipped here to spare the calls.
        """
        preempted, shares = False, None
        for run in sorted(self.queued, key=queue_key):
            usage = self.usage[run.team]
            quota = quota_of(self.setup, run.team, self.usage, True)
            if usage + run.units > self.setup.nominal[run.team] or run.units <= quota.room(usage):
                continue
            if shares is None:  # the cycle's figures, as workloads.cycle.preemption reads them once
                shares = self.figures.shares(self.usage, self.remembered(now))
            # Dated from its submission: a preempted run's queue entry keeps its first one.
            claim = Claim(run.team, run.ref, run.units, run.priority, at(run.submit_s))
            candidates = [self.candidate(victim, now, shares[victim.team])
                          for victim in self.running if victim.borrowed > 0]
            order = self.order or self.foresight_order(now)
            verdict = choose_victims(claim, quota, usage, candidates, self.setup.rules, at(now), order=order)
            chosen = {candidate.ref for candidate in verdict.victims}
            for victim in self.running:
                if victim.ref in chosen:
                    victim.stopping_since = now  # its notice: it keeps its units until its pods are gone
                    victim.preemptions += 1
                    self.result.preemptions += 1
                    preempted = True
        return preempted

    def candidate(self, victim: Run, now: float, share: float = 0.0) -> Candidate:
        """A running run as a victim candidate (``workloads.cycle.preemption.candidate_of``), its team's
        ``share`` given. Admitted and started at once here: its start, its last checkpoint since, one price."""
        return Candidate(victim.ref, victim.team, victim.units, victim.borrowed, victim.priority,
                         at(victim.started_at), stopping=victim.stopping_since is not None, share=share,
                         started_at=at(victim.started_at),
                         last_checkpoint_at=victim.last_checkpoint_at(now) if victim.reports else None,
                         reports_checkpoints=victim.reports and victim.checkpoint_every_s > 0,
                         preemptions=victim.preemptions)

    def foresight_order(self, now: float):
        """Victims by the work each would really lose when its pods are gone — at the end of the
        grace, a checkpoint written during the grace counted — ranked as :func:`victim_order` ranks
        its estimate. No rule can know this (a run's next checkpoint, a silent run's last one):
        it is the best any victim order could do, the bound the *work lost* column is judged by."""
        end = now + self.setup.stop_s
        truly = {run.ref: Decimal(run.units * (run.done + end - run.started_at - run.checkpointed(end)))
                 for run in self.running}
        return lambda candidate, _estimate: victim_order(candidate, truly[candidate.ref])

    def stopped(self, now: float) -> bool:
        """Victims whose pods are gone go back to the queue at their old position; whether any did."""
        gone = [run for run in self.running
                if run.stopping_since is not None and run.stopping_since + self.setup.stop_s <= now]
        for run in gone:
            kept = run.checkpointed(now)
            run.lost_unit_s += run.units * (run.done + now - run.started_at - kept)
            run.done, run.started_at, run.borrowed, run.stopping_since = kept, None, 0, None
            run.queued_since = now
            self.running.remove(run)
            self.usage[run.team] -= run.units
            self.queued.append(run)  # at its old position: the order sorts by priority and submission
        return bool(gone)

    def check_nominal_first(self, admitted: list[tuple[Run, int]], now: float,
                            waiting: list[Run] | None = None) -> None:
        """No run is admitted with borrowed units while one that fits its own team's quota waits
        (of ``waiting``, the runs admission was asked about: by default every queued one)."""
        usage, left = dict(self.usage), list(self.queued if waiting is None else waiting)
        for run, borrows in admitted:
            left.remove(run)
            if borrows:
                for other in left:
                    if usage[other.team] + other.units <= self.setup.nominal[other.team]:
                        decision = decide(request_of(self.setup, other), usage[other.team],
                                          quota_of(self.setup, other.team, usage, self.cohort))
                        if decision.admitted and not decision.borrows:
                            self.result.broken.append(f"t={now:.0f}s: {run.ref} borrowed ahead of {other.ref}, "
                                                      f"which fitted {other.team}'s own quota")
                            break
            usage[run.team] += run.units

    def check(self, now: float) -> None:
        """The invariants of the rules, on this cycle's units (the run fails if one breaks)."""
        setup, usage = self.setup, self.usage
        self.result.samples.append(dict(usage))
        total = sum(usage.values())
        if total > setup.pool:
            self.result.broken.append(f"t={now:.0f}s: the cohort holds {total} > {setup.pool}")
        for team in setup.teams:
            ceiling = setup.nominal[team]
            if self.cohort:
                limit = setup.borrowing_limit.get(team)
                lent = sum(setup.nominal[other] for other in setup.teams if other != team)
                ceiling += lent if limit is None else min(limit, lent)
            if usage[team] > ceiling:
                self.result.broken.append(f"t={now:.0f}s: {team} holds {usage[team]} > {ceiling}")

    def next_cycle(self, now: float, changed: bool) -> float | None:
        """The next cycle at which anything can change (the ones between would decide the same)."""
        if changed and (self.queued or any(run.stopping_since is not None for run in self.running)):
            return now + self.setup.cycle_s
        moments = [run.end_s for run in self.running] + [run.submit_s for run in self.pending[:1]]
        if self.cohort:  # reclaim's clocks: a claim's delay ends, a borrowed run passes its min runtime
            moments += [run.submit_s + self.setup.rules.delay.total_seconds() for run in self.queued]
            moments += [run.started_at + self.setup.rules.min_runtime.total_seconds()
                        for run in self.running if run.borrowed]
            moments += [run.stopping_since + self.setup.stop_s for run in self.running if run.stopping_since is not None]
        cycle = self.setup.cycle_s
        later = [math.ceil(moment / cycle) * cycle for moment in moments]
        later = [moment for moment in later if moment > now]
        return min(later, default=None)

    def run(self) -> Result:
        # The first cycle comes before the first submission, so every submission is counted
        # as demand from its own instant (advance) before a cycle queues it.
        now = 0.0
        if self.pending:
            now = (math.floor(self.pending[0].submit_s / self.setup.cycle_s) - 1) * self.setup.cycle_s
        while True:
            changed = self.cycle(now)
            following = self.next_cycle(now, changed)
            if following is None:
                break
            self.advance(now, following)
            now = following
        if self.queued:
            self.result.broken.append(f"{len(self.queued)} runs still queued at the end")
        self.result.span_s = now
        return self.result


def replay(setup: Setup, trace: list[dict], cohort: bool, order: str = "work lost") -> Result:
    return Replay(setup, trace, cohort, order).run()


# -- input and report -------------------------------------------------------------------------


def read_trace(path: Path, hours: float | None = None) -> list[dict]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames != COLUMNS:
            raise SystemExit(f"{path}: the columns must be {','.join(COLUMNS)}, not {reader.fieldnames}")
        rows = [{"submit_s": float(row["submit_s"]), "team": row["team"], "flavor": row["flavor"],
                 "units": int(row["units"]), "duration_s": float(row["duration_s"]),
                 "priority": Priority(row["priority"]).rank,
                 "checkpoint_every_s": float(row["checkpoint_every_s"] or 0)} for row in reader]
    if hours is not None:
        rows = [row for row in rows if row["submit_s"] < hours * 3600]
    flavors = {row["flavor"] for row in rows}
    if len(flavors) != 1:
        raise SystemExit(f"{path}: one flavor per trace, found {sorted(flavors) or 'none'}")
    return rows


def pairs(text: str, kind=int) -> dict[str, float]:
    result = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if not name or not value:
            raise argparse.ArgumentTypeError(f"expected team=number, got {item!r}")
        result[name.strip()] = kind(value)
    return result


def make_setup(args, trace: list[dict]) -> Setup:
    teams = sorted({row["team"] for row in trace} | set(args.quota))
    nominal = dict(args.quota)
    absent = [team for team in teams if team not in nominal]
    if absent:  # an equal share of what the listed teams leave of the capacity
        left = max(0, args.capacity - sum(nominal.values()))
        for i, team in enumerate(absent):
            nominal[team] = left // len(absent) + (1 if i < left % len(absent) else 0)
    if sum(nominal.values()) > args.capacity:
        raise SystemExit(f"the nominal quotas ({sum(nominal.values())}) exceed the capacity ({args.capacity})")
    return Setup(flavor=trace[0]["flavor"], capacity=args.capacity, nominal=nominal,
                 weights={team: args.weights.get(team, 1.0) for team in teams},
                 borrowing_limit={team: args.borrowing_limit.get(team) for team in teams},
                 rules=Rules("any", timedelta(minutes=args.min_runtime), timedelta(seconds=args.delay)),
                 cycle_s=args.cycle, half_life_hours=args.half_life, stop_s=args.stop, max_units_per_node=args.node,
                 silent=args.silent)


def report(setup: Setup, results: list[Result], quick: float | None) -> bool:
    hours = 3600.0
    print(f"{'':<26}" + "".join(f"{r.mode:>14}" for r in results))
    rows = [
        ("utilization", lambda r: f"{r.utilization:.3f}"),
        ("fair-share error", lambda r: f"{r.max_fair_error:.1%}"),
        ("preemptions", lambda r: f"{r.preemptions}"),
        ("lost GPU-hours", lambda r: f"{r.lost_unit_s / hours:.1f}"),
        ("delivered GPU-hours", lambda r: f"{sum(r.allocated.values()) / hours:.1f}"),
        ("lost / delivered", lambda r: f"{r.lost_unit_s / max(1.0, sum(r.allocated.values())):.2%}"),
        ("mean queue wait (min)", lambda r: f"{r.mean_wait_s / 60:.1f}"),
        ("last run ends (h)", lambda r: f"{r.span_s / hours:.1f}"),
        ("rejected runs", lambda r: f"{len(r.rejected)}"),
    ]
    for label, figure in rows:
        print(f"{label:<26}" + "".join(f"{figure(r):>14}" for r in results))
    print("per team: delivered / fair GPU-hours (error), mean queue wait")
    for team in setup.teams:
        cells = "".join(f"  {r.mode}{r.allocated[team] / hours:>8.1f} / {r.fair[team] / hours:<7.1f}"
                        f"({r.fair_error(team):>5.1%}) {r.mean_wait_s_of(team) / 60:>6.1f} min" for r in results)
        print(f"  {team:<8} nominal {setup.nominal[team]:>2} weight {setup.weights[team]:g}{cells}")
    ok = True
    for r in results:
        if r.broken:
            ok = False
            print(f"invariants BROKEN in {r.mode}: " + "; ".join(r.broken[:5]))
        else:
            print(f"invariants: held at {len(r.samples)} samples ({r.mode})")
    cohort, recency, foresight, walls = results
    delivered = sum(cohort.allocated.values())
    targets = [
        (f"utilization with borrowing >= {TARGET_UTILIZATION}", f"{cohort.utilization:.3f}",
         cohort.utilization >= TARGET_UTILIZATION),
        (f"utilization cohort / walls >= {TARGET_UTILIZATION_RATIO}",
         f"{cohort.utilization / walls.utilization:.2f}",
         cohort.utilization >= TARGET_UTILIZATION_RATIO * walls.utilization),
        (f"fair-share error <= {TARGET_FAIR_ERROR:.0%}", f"{cohort.max_fair_error:.1%}",
         cohort.max_fair_error <= TARGET_FAIR_ERROR),
        (f"lost GPU-hours <= {TARGET_LOST_SHARE:.0%} of delivered", f"{cohort.lost_unit_s / max(1.0, delivered):.2%}",
         cohort.lost_unit_s <= TARGET_LOST_SHARE * delivered),
        ("lost GPU-hours fall by at least half against recency",
         f"{cohort.lost_unit_s / max(1.0, recency.lost_unit_s):.2f}",
         cohort.lost_unit_s <= TARGET_LOST_RATIO * recency.lost_unit_s),
    ]
    print("targets:" + (" (quick run: not judged)" if quick else ""))
    for label, figure, met in targets:
        print(f"  {label:<54} {figure:>8}  {'' if quick else 'PASS' if met else 'FAIL'}")
    print(f"  the best any victim order could do (foresight: each victim's true loss at its deadline) "
          f"{foresight.lost_unit_s / max(1.0, recency.lost_unit_s):.2f} of recency's")
    return ok


# -- shared GPUs: light endpoints on whole T4s vs time-sliced ×4 --------------------------------------

MIX_STEP_S = 300  # the demand is sampled every 5 minutes
MIX_HOURS = 24
MIX_TARGET = 0.70  # the replicas' GPU utilization target (inference.specs.DEFAULT_GPU_UTILIZATION_TARGET, 70 %)


def mix_flavors() -> tuple[GpuFlavor, GpuFlavor]:
    """A whole T4 and the T4 time-sliced ×4 (docs/flavors.md's ``t4-ts4``), never saved: their fraction by the model's rule."""
    whole = GpuFlavor(name="t4", resource_name="nvidia.com/gpu", gpu_model="Tesla-T4", gpu_memory_gb=16,
                      price_per_hour=Decimal("0.40"), spot_price_per_hour=Decimal("0.16"))
    shared = GpuFlavor(name="t4-ts4", resource_name="nvidia.com/gpu", gpu_model="Tesla-T4", gpu_memory_gb=16,
                       sharing=Sharing.TIME_SLICING, replicas=4, training=False,
                       price_per_hour=Decimal("0.10"), spot_price_per_hour=Decimal("0.04"))
    for flavor in (whole, shared):
        flavor.set_fraction()
    return whole, shared


def endpoint_load(index: int, count: int, hour: float) -> float:
    """Endpoint ``index``'s load at ``hour`` of the day, in T4s busy: a peak between 5 % and 30 % (spread over the
    endpoints), full from 9 to 18 h, ramping over two hours either side, a fifth of it at night."""
    peak = 0.05 + 0.25 * ((index * SPREAD) % 1.0) if count > 1 else 0.30
    day = min(1.0, max(0.0, min(hour - 7.0, 20.0 - hour) / 2.0))
    return peak * (0.2 + 0.8 * day)


@dataclass
class MixResult:
    flavor: GpuFlavor
    peak_replicas: int = 0
    peak_gpus: int = 0
    unit_hours: Decimal = Decimal(0)
    physical_gpu_hours: Decimal = Decimal(0)
    cost: Decimal = Decimal(0)
    warnings: tuple[str, ...] = ()


def serve(flavor: GpuFlavor, endpoints: int, model_gb: float) -> MixResult:
    """The day's light inference demand served on ``flavor``: replicas by the autoscaler's rule, charged by the ledger's."""
    result = MixResult(flavor, warnings=policy.warnings(flavor, policy.Shape(training=False), model_gb))
    compute = float(flavor.gpu_fraction)  # what a replica is guaranteed of its GPU's compute
    price = unit_price(flavor.price_per_hour, flavor.spot_price_per_hour, False)
    for step in range(MIX_HOURS * 3600 // MIX_STEP_S):
        start, end = at(step * MIX_STEP_S), at((step + 1) * MIX_STEP_S)
        hour = step * MIX_STEP_S / 3600
        units = sum(max(1, math.ceil(endpoint_load(i, endpoints, hour) / (compute * MIX_TARGET) - 1e-9))
                    for i in range(endpoints))
        result.peak_replicas = max(result.peak_replicas, units)
        result.peak_gpus = max(result.peak_gpus, math.ceil(units * compute - 1e-9))
        result.unit_hours += interval_unit_hours(units, start, end)
        result.physical_gpu_hours += interval_gpu_hours(flavor.gpu_fraction, units, start, end)
        result.cost += interval_cost(price, units, start, end)
    return result


def shared_mix(args: argparse.Namespace) -> tuple[MixResult, MixResult]:
    """The light endpoints of ``args`` on whole T4s and on time-sliced ×4 T4s: ``(whole, time-sliced)``."""
    whole, shared = mix_flavors()
    return serve(whole, args.endpoints, args.model_gb), serve(shared, args.endpoints, args.model_gb)


def report_mix(args: argparse.Namespace, mix: tuple[MixResult, MixResult], quick: float | None) -> bool:
    whole, shared = mix
    print(f"shared GPUs: {args.endpoints} light endpoints ({args.model_gb:g} GB model, peak 5-30 % of a T4, "
          f"{MIX_HOURS} h sampled every {MIX_STEP_S // 60} min), the same demand on whole T4s and time-sliced x4")
    print(f"{'':<26}{'whole T4':>14}{'t4-ts4 (x4)':>14}")
    rows = [("peak replicas", lambda r: f"{r.peak_replicas}"), ("peak physical GPUs", lambda r: f"{r.peak_gpus}"),
            ("unit-hours", lambda r: f"{r.unit_hours:.1f}"),
            ("physical GPU-hours", lambda r: f"{r.physical_gpu_hours:.1f}"),
            ("cost", lambda r: f"{r.cost:.2f}"), ("advice warnings", lambda r: f"{len(r.warnings)}")]
    for label, figure in rows:
        print(f"{label:<26}{figure(whole):>14}{figure(shared):>14}")
    for warning in shared.warnings:
        print(f"  warning: {warning}")
    saving = whole.physical_gpu_hours / max(shared.physical_gpu_hours, Decimal("0.0001"))
    met = saving >= Decimal(str(TARGET_SHARED_SAVING)) and not shared.warnings
    print(f"  physical GPU-hours whole / time-sliced >= {TARGET_SHARED_SAVING:g} (and the model fits)"
          f"{'':<6}{saving:>8.2f}  {'' if quick else 'PASS' if met else 'FAIL'}")
    return met or quick


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--quota", type=pairs, default=pairs("team-a=4,team-b=4,team-c=8"),
                        help="nominal units of the trace's flavor per team (others: an equal share of the rest)")
    parser.add_argument("--weights", type=lambda text: pairs(text, float), default={},
                        help="fair-share weights (default 1)")
    parser.add_argument("--borrowing-limit", type=pairs, default={},
                        help="per team; default: as much as the cohort lends")
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--min-runtime", type=float, default=10, help="minutes (the cohort's min_runtime_minutes)")
    parser.add_argument("--delay", type=float, default=30, help="seconds (preemption_delay_seconds)")
    parser.add_argument("--half-life", type=float, default=settings.SLIPWAY_FAIR_SHARE_HALF_LIFE_HOURS,
                        help="hours: how long fair share remembers borrowing (SLIPWAY_FAIR_SHARE_HALF_LIFE_HOURS)")
    parser.add_argument("--stop", type=float, default=settings.SLIPWAY_PREEMPTION_GRACE_SECONDS,
                        help="seconds a victim's pods take to stop, holding its units (the preemption grace)")
    parser.add_argument("--cycle", type=float, default=5, help="seconds between admission cycles")
    parser.add_argument("--node", type=int, default=8, help="the flavor's largest node (units per node)")
    parser.add_argument("--silent", type=float, default=0.0,
                        help="the part of the runs (0–1) that checkpoint but never report it: reclaim assumes the "
                             "median of those that do")
    parser.add_argument("--endpoints", type=int, default=24, help="light endpoints of the shared-GPU mix")
    parser.add_argument("--model-gb", type=float, default=3.0,
                        help="GPU memory each endpoint's model needs (the shared-GPU mix; 4 share a 16 GB T4)")
    parser.add_argument("--quick", type=float, nargs="?", const=QUICK_HOURS, default=None, metavar="HOURS",
                        help=f"only the trace's first HOURS (default {QUICK_HOURS}); targets not judged")
    return parser.parse_args(argv)


def simulate(args: argparse.Namespace) -> tuple[Setup, list[dict], list[Result]]:
    """The trace of ``args`` replayed with the cohort — victims by work lost, by recency, by
    foresight — and with walls: ``(setup, trace, [cohort, cohort by recency, by foresight, walls])``."""
    trace = read_trace(args.trace, args.quick)
    if not trace:
        raise SystemExit(f"{args.trace}: no runs")
    setup = make_setup(args, trace)
    return setup, trace, [replay(setup, trace, cohort=True), replay(setup, trace, cohort=True, order="recency"),
                          replay(setup, trace, cohort=True, order="foresight"),
                          replay(setup, trace, cohort=False)]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    setup, trace, results = simulate(args)
    print(f"sharing: {args.trace.name}{f' (quick: {args.quick:g} h)' if args.quick else ''}: {len(trace)} runs, "
          f"{sum(r['units'] * r['duration_s'] for r in trace) / 3600:.0f} GPU-hours of {setup.flavor}, "
          f"capacity {setup.capacity}, quotas "
          + ", ".join(f"{team}={setup.nominal[team]}" for team in setup.teams))
    print(f"cohort: reclaim any, min runtime {args.min_runtime:g} min, delay {args.delay:g} s, "
          f"victims stop in {args.stop:g} s, fair-share half-life {args.half_life:g} h, cycle {args.cycle:g} s"
          + (f", {args.silent:.0%} of the runs never report their checkpoints" if args.silent else ""))
    print("victims: by work lost (quotas.reclaim.victim_order), by recency (recency_order) and by foresight "
          "(the work each would really lose: the bound of any order), side by side")
    print(f"admission order: {ORDER_SOURCE}")
    ok = report(setup, results, args.quick)
    ok = report_mix(args, shared_mix(args), args.quick) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
