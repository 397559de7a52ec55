"""Benchmark: what reserved windows give their holders and cost the others (issue 49), on the sharing trace.

Run ``.venv/bin/python bench/reservations.py [--hours 168] [--reserved 0.30] [--seed 49] [--rounds 3]
[--early 30] [--lead 15] [--quick [HOURS]] [any option of bench/sharing.py]``. No database and no sleeping: the
first ``--hours`` of bench/sharing.py's trace (``bench/traces/bursty.csv``: three teams in one cohort
on 16 A100s — borrowing, fair share, reclaim, victims by work lost) are replayed by bench/sharing.py's
own replay, imported, with reserved windows on top, through the production's pure rules; where a rule
is bound to the database, by the replay's equivalent, which names the function it mirrors:

* **Bookings**: seeded random (``--seed``), by the trace's teams, each a window of 1–8 h (whole half
  hours) of 2 up to the reservable units, starting on a random half hour of the replay, refused where
  it would hold more than the reservable share at some instant — the production's invariant and
  functions (``reservations.occupancy.reservable`` of the policy's default share, ``first_conflict``) —
  until the booked unit-hours reach ``--reserved`` of the capacity's. All are booked (and confirmed)
  before the replay starts.
* **The holders' runs** (refs ``window:<window>:<n>``), besides the trace's: each window brings a run
  of its units, submitted ``--early`` before it starts and running for 60–100 % of its length (60–80 %
  where a second run follows, so that one has room); every third window a second run of half its
  units, submitted after the first would have ended (a quarter to a half of what is left of the window
  later) and running for 60–100 % of the rest. Normal priority, a checkpoint every 15 minutes. Each names its
  booking (``for_reservation`` on its queue entry; one booking per window).
* **Admission** (``quotas.admission.fair_order`` over ``quotas.decide.decide``, with
  ``quotas.facts.Windows``' own ``apply`` and ``take`` on the replay's windows — ``Ahead`` per team and
  flavor, ``Room`` s with their booking's ref, and the claims of the queued runs naming a booking): a booked
  run goes into its booking's window when that holds it whole, on top of the quota, and waits for it until
  then; a **targeted** booking takes no other work, an **open** one the team's other work too, in what the
  queued runs naming it do not claim; other work goes by the quota as in bench/sharing.py.
* **Placement** (``workloads.cycle.placement``): a run's runtime limit is its running time × 1.25
  rounded up to 15 minutes (bench/estimates.py's ``limit_of``: the trace has running times only).
  Work admitted into a window starts as soon as that many units are free. Other work goes beside the
  units windows keep (:meth:`Reserving.withheld`, mirroring ``billing.reserved.withheld``: the most
  that windows overlapping [now, now + limit + lead) hold at once, each less what runs on it — so work
  that ends before a window's lead goes on its units as on free ones), else — every run may be
  preempted — on a window's idle units as **lent** work where ``billing.reserved.lendable`` allows (not
  in the window's lead, not while its holder's work admitted into it waits to start), else it waits
  in its queue: admitted by the cohort's rules with nowhere to go, it is not admitted (it holds no
  quota) and admission is asked again without it.
* **Taking back** (:meth:`Reserving.clear`, mirroring ``workloads.cycle.windows.clear``), each cycle
  after the queue's step: from ``start − lead`` (``--lead``) all of a window's units must be free,
  inside it those of its holder's work admitted into it and not started. The shortfall against the
  free units (work already stopping counted as gone) preempts other work: lent work first, then the
  least work lost (``quotas.reclaim.work_lost``), other teams' quota work before a holder's; a holder's own
  quota work is spared when the units are for its own open windows alone, what of it is lent never. A
  holder's own work lent its open window's units before the start counts as cleared and moves into it when it
  opens (``_adopt``); on a targeted window it is lent work as any team's. A victim holds its units for the grace and goes back to its queue, as reclaim's victims do in
  bench/sharing.py.
* **At a window's end** (:meth:`Reserving.close`, mirroring ``workloads.cycle.windows.close``) its
  holder's work in it goes back onto the quota, what is then beyond the nominal quota borrowed
  (reclaimable); lent work is no longer lent.

Four replays side by side, in ``--rounds`` rounds (each its seed: ``--seed``, ``--seed`` + 1, …; the
replays' order rotating from round to round), each figure the rounds' median: **targeted** and **open** (the
bookings, targeted or open, and the holders' runs), **unbooked** (the same runs, no bookings: the holders'
runs queue by the quota like any other — what the reservations cost the others is a booked mode against
*unbooked*, the same work served) and **trace** (the trace alone: bench/sharing.py's cohort replay,
reproduced to the digit). The targets are judged on targeted bookings. The figures:

* **reserved capacity used**: (unit-hours of the holders' work in their windows + lent unit-hours) ÷
  the booked unit-hours. Units have no identity here (one pool), so the units of open windows that
  other work uses — lent — are what the cluster's work takes beyond what the windows leave, the free
  units counted as the windows' idle ones first (a lower bound of lending). Target ≥ 80 %;
* **holder start delay**: per booking's run, from max(its submission, its window's start) until it
  runs (0 when it runs then already): p50, p95, max. Target: p95 ≤ the grace + one cycle;
* bench/sharing.py's **utilization** (all the work) and **fair-share error**, over all the work as
  bench/sharing.py judges it and over the trace's own runs (their demand and units only, against the
  cohort's whole pool: every unit the holders' runs take, in a window or not, counts against it), the
  trace's runs' **mean queue wait** per team, **preemptions** and **lost GPU-hours** by cause (reclaim,
  window); and how the windows worked: the booked runs that ran on the quota or went into another window
  of their team's, the runs lent a window's units, the longest wait of work admitted into a window for its
  units.

Invariants at every cycle, the run failing when one breaks: bench/sharing.py's; the running units never
above the capacity; the windows never above the reservable units (``reservations.occupancy.level``); a
holder's work admitted into its open window never waits longer than the grace and a cycle while
another team's work that is not stopping (and not in a window of its own) runs.

Not modelled, besides what bench/sharing.py leaves out: clusters and nodes (one pool of units, a window
freed unit by unit), budgets and money, spot work; work admitted into a window whose units never come
free before its end goes back to its queue (production keeps it admitted, on the quota). The windows'
instants are half hours and their leads whole minutes, which the 5 s cycle divides: each is a cycle.
``--quick [HOURS]`` replays the first HOURS (48) and does not judge the targets.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

# bench/sharing.py and bench/estimates.py, when loaded from elsewhere: after the project (sharing.py puts it
# first), as this file is named after the reservations app.
sys.path.append(str(Path(__file__).resolve().parent))

import sharing
from django.conf import settings
from django.test import override_settings
from estimates import limit_of

from billing.reserved import Ahead, Room, Withheld, horizon, in_lead, kept_units, lead, lendable, ref_of
from core.priority import Priority
from quotas.facts import Windows
from quotas.reclaim import work_lost
from reservations import occupancy
from reservations.policy import DEFAULT

TARGET_USED = 0.80
SLOT_S = occupancy.SLOT.total_seconds()  # bookings start and end on the availability's half hours
LIMIT_SLACK, LIMIT_ROUND_S = 1.25, 900.0  # runtime limits: running time × 1.25, rounded up to 15 min
HOLDER_CHECKPOINT_S = 900.0
SECOND_RUN_EVERY = 3  # every third window brings a second run mid-window
HOURS = 168.0
MAX_ATTEMPTS = 100_000  # bookings tried before the booked share is deemed out of reach under the reservable one


@dataclass(frozen=True)
class Window:
    """A booked window: ``units`` of ``team``'s over ``[start_s, end_s)``; ``index`` numbers them by start."""

    index: int
    team: str
    units: int
    start_s: float
    end_s: float

    @property
    def unit_s(self) -> float:
        return self.units * (self.end_s - self.start_s)

    @property
    def reservation(self) -> int:
        """The id of its booking (one window each), which its booked runs name."""
        return self.index + 1

    @property
    def ref(self) -> str:
        """Its booking's ref (``billing.reserved.ref_of``): what admission matches the runs naming it by."""
        return ref_of(self.reservation)

    def held(self) -> occupancy.Held:
        return occupancy.Held(sharing.at(self.start_s), sharing.at(self.end_s), self.units)

    def open_at(self, now: float) -> bool:
        return self.start_s <= now < self.end_s


def book(setup: sharing.Setup, hours: float, reserved: float, rng: random.Random) -> list[Window]:
    """Random bookings over the replay's ``hours`` until they hold ``reserved`` of its unit-hours, each
    checked as the production checks a booking (``occupancy.first_conflict`` against the reservable units)."""
    limit = occupancy.reservable(setup.capacity, DEFAULT.reservable_share)
    slots = int(hours * 3600 // SLOT_S)
    if limit < 2 or slots < 2:
        raise SystemExit(f"nothing to book: {limit} reservable units, {slots} half hours")
    goal = reserved * setup.capacity * hours * 3600
    held: list[occupancy.Held] = []
    booked: list[tuple[float, str, int, float]] = []
    total, attempts = 0.0, 0
    while total < goal:
        attempts += 1
        if attempts > MAX_ATTEMPTS:
            raise SystemExit(f"only {total / 3600:.0f} of {goal / 3600:.0f} unit-hours fit within the reservable share")
        length = rng.randint(2, min(16, slots))  # 1–8 h in half hours
        first = rng.randrange(0, slots - length + 1)
        units, team = rng.randint(2, limit), rng.choice(setup.teams)
        start, end = first * SLOT_S, (first + length) * SLOT_S
        span = (sharing.at(start), sharing.at(end))
        if occupancy.first_conflict(held, [span], units, limit) is None:
            held.append(occupancy.Held(*span, units))
            booked.append((start, team, units, end))
            total += units * (end - start)
    return [Window(i, team, units, start, end) for i, (start, team, units, end) in enumerate(sorted(booked))]


def holder_runs(windows: list[Window], early_s: float, rng: random.Random) -> list[tuple[sharing.Run, Window]]:
    """The runs the windows' holders submit for them (module docstring), each with its window."""
    runs = []
    for window in windows:
        length, second = window.end_s - window.start_s, window.index % SECOND_RUN_EVERY == 0
        first_s = length * rng.uniform(0.6, 0.8 if second else 1.0)
        runs.append((holder(f"window:{window.index}:0", window.team, window.units, first_s,
                            window.start_s - early_s, window.reservation), window))
        if second:
            submit = window.start_s + first_s + (length - first_s) * rng.uniform(0.25, 0.5)
            runs.append((holder(f"window:{window.index}:1", window.team, max(1, window.units // 2),
                                (window.end_s - submit) * rng.uniform(0.6, 1.0), submit, window.reservation), window))
    return runs


def holder(ref: str, team: str, units: int, duration_s: float, submit_s: float, reservation: int) -> sharing.Run:
    """A booked run: it names its booking (``for_reservation``), as the run form and API let it."""
    return sharing.Run(ref, team, units, duration_s, Priority.NORMAL.rank, HOLDER_CHECKPOINT_S, submit_s,
                       queued_since=submit_s, for_reservation=reservation)


class Rooms(Windows):
    """``quotas.facts.Windows`` read from the replay instead of the database: the production's ``apply``
    and ``take`` on ``ahead``, ``open`` and ``claims`` as ``Windows`` reads them (not its constructor, which
    reads them from the database)."""

    def __init__(self, ahead: dict[tuple[int, int], Ahead], open_rooms: dict[tuple[int, int], list[Room]],
                 claims: dict[str, int]) -> None:
        self.ahead, self.open, self.claims, self.taken = ahead, open_rooms, claims, {}

    def booking_of(self, team_id: int, run: sharing.Run) -> str | None:
        """The ref of the booking ``run`` names while that booking has a window not over (None: it goes by the
        rules of work naming none): ``Windows``' own reading."""
        return self._named(team_id, sharing.FLAVOR_ID, run.for_reservation)

    def holds(self, team_id: int, run: sharing.Run) -> bool:
        """Whether one of the team's open windows that takes ``run`` holds it whole now (what ``decide`` admits
        into it): ``Windows``' own rooms for it — work naming none less what queued named work waits for."""
        rooms = self._rooms(team_id, sharing.FLAVOR_ID, self.booking_of(team_id, run))
        return bool(rooms) and rooms[0].free >= run.units

    def any_free(self) -> bool:
        """Whether some open window has a unit free: else a full quota admits nothing."""
        return any(room.free for rooms in self.open.values() for room in rooms)


class Reserving(sharing.Replay):
    """bench/sharing.py's cohort replay with reserved windows (``windows``, every booking ``targeted`` or open)
    and the runs their holders submit (``holders``, each with the window it is for and naming its booking;
    without ``windows`` they name none and go by the quota as any run)."""

    def __init__(self, setup: sharing.Setup, trace: list[dict], windows: list[Window],
                 holders: list[tuple[sharing.Run, Window]], mode: str, targeted: bool = False):
        super().__init__(setup, trace, cohort=True)
        self.result.mode = mode
        self.windows = windows
        self.targeted = targeted
        self.reservable = occupancy.reservable(setup.capacity, DEFAULT.reservable_share)
        self.held = [window.held() for window in windows]
        # Fresh runs: a replay changes them. Without bookings there is nothing to name.
        self.holders = [(dataclasses.replace(run, for_reservation=run.for_reservation if windows else None), window)
                        for run, window in holders]
        self.pending = sorted([*self.pending, *(run for run, _window in self.holders)], key=lambda run: run.submit_s)
        self.result.runs = [*self.result.runs, *(run for run, _window in self.holders)]
        self.booked = {run.ref: window for run, window in self.holders}  # each booked run's own window
        self.inside: dict[sharing.Run, Window] = {}  # work admitted into a window, running or not yet
        self.claimed: list[sharing.Run] = []  # admitted into a window, its units not free yet
        self.claimed_at: dict[str, float] = {}
        self.claim_waits: list[float] = []  # admitted into a window, until it started there
        self.never: list[str] = []  # admitted into a window whose units never came free before its end
        self.elsewhere: set[str] = set()  # booked runs admitted into another window of their team's
        self.loans = 0  # runs placed on a window's idle units
        self.lent: dict[sharing.Run, Window] = {}  # running on a window's idle units
        self.cause: dict[str, str] = {}  # victims of a window while they stop (the others are reclaim's)
        self.preempted = {"reclaim": 0, "window": 0}
        self.lost = {"reclaim": 0.0, "window": 0.0}  # unit-seconds
        self.spans: dict[str, list[list[float | None]]] = {ref: [] for ref in self.booked}  # [start, stop]
        self.outside: set[str] = set()  # booked runs that started outside their window (on the quota)
        self.own_allocated = dict.fromkeys(setup.teams, 0.0)  # the trace's own runs: unit-seconds held
        self.own_fair = dict.fromkeys(setup.teams, 0.0)  # … and their fair share of the trace's demand
        self.use = dict.fromkeys(("booked runs", "team work", "lent", "idle"), 0.0)  # windows' unit-seconds

    # -- the cycle: bench/sharing.py's queue step, then the windows' (workloads.cycle.windows) ------------

    def cycle(self, now: float) -> bool:
        """bench/sharing.py's cycle (the queue's step), then the windows' steps in the reconcile cycle's order."""
        self.leave()
        changed = super().cycle(now)
        changed = self.clear(now) or changed
        changed = self.close(now) or changed
        self.check_windows(now)
        return changed

    def leave(self) -> None:
        """Work that ended leaves its window (its units were never the quota's) and its loan."""
        for run in [run for run in self.running if run.finished_at is not None]:
            self.lent.pop(run, None)
            if self.inside.pop(run, None) is not None:
                self.running.remove(run)

    def admit(self, now: float) -> bool:
        """Work admitted into a window starts when its units are free; then the queue, as bench/sharing.py
        admits it, each run admitted by the quota placed (:meth:`placement`) or not admitted at all."""
        changed = self.start_claimed(now)
        unplaceable: set[str] = set()
        while self.queued:
            rooms = self.rooms(now)
            if sum(self.usage.values()) >= self.setup.pool and not rooms.any_free():
                break  # nothing could be admitted: bench/sharing.py's shortcut, windows counted
            waiting = [run for run in self.queued if run.ref not in unplaceable
                       and (rooms.holds(self.figures.ids[run.team], run) or self.placement(run, now)[0])]
            admitted = sharing.fair_admissions(self.figures, waiting, dict(self.usage), self.remembered(now), rooms)
            placed, dropped = [], None
            for run, borrows in admitted:
                if run.ref in rooms.taken:
                    self.into(run, self.windows[rooms.taken[run.ref]], now)
                    continue
                fits, lent = self.placement(run, now)
                if not fits:  # the units the runs before it took: ask again without it
                    dropped = run
                    break
                self.queued.remove(run)
                self.start(run, borrows, now)
                if lent is not None:
                    self.lent[run] = lent
                    self.loans += 1
                placed.append((run, borrows))
            # Work naming a booking not over waits for its window, not for the quota: not judged by the quota.
            self.check_nominal_first(placed, now, [run for run in waiting if run.ref not in rooms.taken
                                                   and rooms.booking_of(self.figures.ids[run.team], run) is None])
            for run, _borrows in placed:
                self.usage[run.team] += run.units
            changed = changed or bool(placed) or bool(rooms.taken)
            if dropped is None:
                break
            unplaceable.add(dropped.ref)
        return changed

    def rooms(self, now: float) -> Rooms:
        """The teams' windows as ``quotas.facts.Windows`` reads them (``billing.reserved.rooms`` and
        ``largest_ahead``): per team, those open now with their units its work admitted into them leaves, the
        most units one not over yet holds (of its open bookings, and per booking), and the units of the queued
        work naming each booking."""
        ahead: dict[tuple[int, int], Ahead] = {}
        open_rooms: dict[tuple[int, int], list[Room]] = {}
        for window in self.windows:
            if window.end_s <= now:
                continue
            key = (self.figures.ids[window.team], sharing.FLAVOR_ID)
            found = ahead.setdefault(key, Ahead())
            found.by_ref[window.ref] = max(found.by_ref.get(window.ref, 0), window.units)
            if not self.targeted:
                ahead[key] = dataclasses.replace(found, open=max(found.open, window.units))
            if window.start_s <= now:
                used = sum(run.units for run, held in self.inside.items() if held is window)
                open_rooms.setdefault(key, []).append(Room(window.index, 1, window.units, max(0, window.units - used),
                                                           sharing.at(window.end_s), window.ref, self.targeted))
        for rooms in open_rooms.values():
            rooms.sort(key=lambda room: (-room.free, room.end, room.window_id))
        claims: dict[str, int] = {}
        for run in self.queued:
            if run.for_reservation is not None:
                ref = ref_of(run.for_reservation)
                claims[ref] = claims.get(ref, 0) + run.units
        return Rooms(ahead, open_rooms, claims)

    def into(self, run: sharing.Run, window: Window, now: float) -> None:
        """``run`` admitted into ``window``: it starts once that many units are free (:meth:`clear` frees them)."""
        self.queued.remove(run)
        self.inside[run] = window
        if self.booked.get(run.ref, window) is not window:
            self.elsewhere.add(run.ref)
        if run.units <= self.free():
            self.start(run, 0, now)
        else:
            self.claimed.append(run)
            self.claimed_at[run.ref] = now

    def start_claimed(self, now: float) -> bool:
        """Work admitted into a window whose units came free starts (its pods bind: any that fits)."""
        started = False
        for run in list(self.claimed):
            if run.units <= self.free():
                self.claimed.remove(run)
                self.claim_waits.append(now - self.claimed_at.pop(run.ref))
                self.start(run, 0, now)
                started = True
        return started

    def start(self, run: sharing.Run, borrows: int, now: float) -> None:
        super().start(run, borrows, now)
        if run.ref in self.spans:
            self.spans[run.ref].append([now, None])
            if run not in self.inside:
                self.outside.add(run.ref)

    def free(self) -> int:
        """The cluster's free units: the capacity less every running run's (victims stopping included)."""
        return self.setup.capacity - sum(run.units for run in self.running)

    def placement(self, run: sharing.Run, now: float) -> tuple[bool, Window | None]:
        """Whether ``run``, admitted by the quota, has room now, and the window it is lent (None: beside the
        windows): ``workloads.cycle.placement._choose_around_windows`` on one pool of units."""
        free = self.free()
        kept = self.withheld(run, now)
        if kept is None or run.units <= free - kept.units:
            return run.units <= free, None
        if run.units <= free and lendable(kept, sharing.at(now), True):  # every run may be preempted
            return True, self.windows[kept.window_id]
        return False, None

    def withheld(self, run: sharing.Run, now: float) -> Withheld | None:
        """``billing.reserved.withheld`` on the replay's one cluster: the units windows keep from ``run`` placed
        now — the most that those overlapping [now, its limit + the lead) hold at once, each less what runs on it
        (its holder's work, work lent its units) — the first of them, and whether its holder's work admitted
        into one waits to start (None: no window in the way)."""
        limit_minutes = int(limit_of(run, LIMIT_SLACK, LIMIT_ROUND_S) // 60)
        until = (horizon(sharing.at(now), limit_minutes) - sharing.EPOCH).total_seconds()
        mine = [window for window in self.windows if window.end_s > now and window.start_s < until]
        if not mine:
            return None
        on = dict.fromkeys(mine, 0)
        for attached in (self.inside, self.lent):
            for other, window in attached.items():
                if window in on and other.started_at is not None:
                    on[window] += other.units
        waiting = dict.fromkeys(mine, 0)
        for other in self.claimed:
            if self.inside[other] in waiting:
                waiting[self.inside[other]] += other.units
        most = 0
        for instant in {max(window.start_s, now) for window in mine}:
            most = max(most, sum(kept_units(window.units, on[window], waiting[window])
                                 for window in mine if window.open_at(instant)))
        if not most and not any(window.start_s <= now for window in mine):
            return None
        first = mine[0]
        return Withheld(most, first.index, self.figures.ids[first.team], sharing.at(first.start_s),
                        sharing.at(first.end_s), claimed=any(self.inside[run] in on for run in self.claimed),
                        clearing=any(in_lead(sharing.at(window.start_s), sharing.at(now)) for window in mine))

    def clear(self, now: float) -> bool:
        """``workloads.cycle.windows.clear``: the units windows need now, taken back from other work
        (lent first, then the least work lost); whether any was preempted."""
        ahead = lead().total_seconds()
        windows = [window for window in self.windows if window.start_s - ahead <= now < window.end_s]
        self.adopt([window for window in windows if window.start_s <= now])
        # A holder's own work lent its open window's units early counts as cleared for it; a targeted window's is
        # cleared as any lent work (only work naming the booking goes in).
        early = {window: 0 if self.targeted else
                 sum(run.units for run, lent in self.lent.items() if lent is window and run.team == window.team
                     and run.started_at is not None) for window in windows}
        needs = {window: max(0, window.units - early[window]) if window.start_s > now else
                 sum(run.units for run in self.claimed if self.inside[run] is window) for window in windows}
        need = sum(needs.values())
        if not need:
            return False
        held = [run for run in self.running if run not in self.inside]
        shortfall = need - self.free() - sum(run.units for run in held if run.stopping_since is not None)
        if shortfall <= 0:
            return False
        # A team's quota work is spared only when the units are for its own open windows alone; lent work never.
        holders = {window.team for window, wanted in needs.items() if wanted}
        spared = next(iter(holders)) if len(holders) == 1 and not self.targeted else None
        pool = [run for run in held if run.stopping_since is None and (run.team != spared or run in self.lent)]
        lost = work_lost([self.candidate(run, now) for run in pool], sharing.at(now))
        taken = False
        own = {run for run in pool if run in self.lent and self.lent[run].team == run.team
               and not self.targeted}  # taken back last of the lent
        for run in sorted(pool, key=lambda run: (run not in self.lent, run in own, run.team in holders, lost[run.ref],
                                                 run.ref)):
            if shortfall <= 0:
                break
            run.stopping_since = now  # its notice: it keeps its units until its pods are gone
            run.preemptions += 1
            self.preempted["window"] += 1
            self.cause[run.ref] = "window"
            shortfall -= run.units
            taken = True
        return taken

    def adopt(self, opened: list[Window]) -> None:
        """``workloads.cycle.windows._adopt``: a holder's own work lent its open window's units before the start
        moves into it once it opens (what fits, oldest first): off the quota, the team's window work. Not into a
        targeted window, which takes only work naming its booking."""
        if self.targeted:
            return
        for window in opened:
            free = window.units - sum(run.units for run, held in self.inside.items() if held is window)
            for run in sorted((run for run, lent in self.lent.items() if lent is window and run.team == window.team),
                              key=lambda run: (run.started_at or 0.0, run.ref)):
                if run.units <= free and run.started_at is not None:
                    del self.lent[run]
                    self.inside[run] = window
                    self.usage[run.team] -= run.units
                    run.borrowed = 0
                    free -= run.units

    def close(self, now: float) -> bool:
        """``workloads.cycle.windows.close``: the work of windows over goes back onto the quota (beyond the
        nominal quota: borrowed), lent work is no longer lent; whether anything moved."""
        ended = sorted((run for run, window in self.inside.items() if window.end_s <= now),
                       key=lambda run: (run.started_at is None, run.started_at or 0.0, run.ref))
        for run in ended:
            del self.inside[run]
            if run.started_at is None:  # its units never came free in its window: it queues again
                self.claimed.remove(run)
                self.never.append(run.ref)
                self.queued.append(run)
                continue
            run.borrowed = min(run.units, max(0, self.usage[run.team] + run.units - self.setup.nominal[run.team]))
            self.usage[run.team] += run.units
        over = [run for run, window in self.lent.items() if window.end_s <= now]
        for run in over:
            del self.lent[run]
        return bool(ended or over)

    def stopped(self, now: float) -> bool:
        """bench/sharing.py's victims going back to their queue, their lost work counted by cause."""
        stopping = [(run, run.lost_unit_s) for run in self.running if run.stopping_since is not None]
        gone = super().stopped(now)
        for run, before in stopping:
            if run.started_at is None:
                cause = self.cause.pop(run.ref, "reclaim")
                self.lost[cause] += run.lost_unit_s - before
                self.lent.pop(run, None)
                if run.ref in self.spans:
                    self.spans[run.ref][-1][1] = now
        return gone

    def reclaim(self, now: float) -> bool:
        before = self.result.preemptions
        preempted = super().reclaim(now)
        self.preempted["reclaim"] += self.result.preemptions - before
        return preempted

    def next_cycle(self, now: float, changed: bool) -> float | None:
        """bench/sharing.py's next cycle, or the next instant a window's lead, start or end comes."""
        ahead, cycle = lead().total_seconds(), self.setup.cycle_s
        moments = [math.ceil(moment / cycle) * cycle for window in self.windows
                   for moment in (window.start_s - ahead, window.start_s, window.end_s)]
        following = super().next_cycle(now, changed)
        later = [moment for moment in [following, *moments] if moment is not None and moment > now]
        return min(later, default=None)

    # -- accounts and invariants ----------------------------------------------------------------

    def integrate(self, held: dict[str, int], borrowed: dict[str, int], start: float, stop: float) -> None:
        """bench/sharing.py's figures, and beside them the trace's own runs' and the windows' use."""
        super().integrate(held, borrowed, start, stop)
        span = stop - start
        if span <= 0:
            return
        theirs, theirs_held = dict.fromkeys(self.setup.teams, 0), dict.fromkeys(self.setup.teams, 0)
        for run, _window in self.holders:
            if run.submit_s <= start and (run.finished_at is None or run.finished_at > start):
                theirs[run.team] += run.units
                theirs_held[run.team] += run.units if run.started_at is not None else 0
        own = {team: self.demand[team] - theirs[team] for team in self.setup.teams}
        for team, fair in sharing.water_fill(self.setup, own).items():
            self.own_fair[team] += fair * span
            self.own_allocated[team] += (held[team] - theirs_held[team]) * span
        reserved = sum(window.units for window in self.windows if window.open_at(start))
        if not reserved:
            return
        used = dict.fromkeys(("booked runs", "team work"), 0)
        for run, window in self.inside.items():
            if window.open_at(start) and run.started_at is not None and (run.finished_at or math.inf) > start:
                used["booked runs" if run.ref in self.booked else "team work"] += run.units
        spare = reserved - sum(used.values())
        idle = min(self.setup.capacity - sum(held.values()), spare)
        for key, units in (*used.items(), ("lent", spare - idle), ("idle", idle)):
            self.use[key] += units * span

    def check_windows(self, now: float) -> None:
        """The invariants of the windows (module docstring), at this cycle's end."""
        broken = self.result.broken
        if self.free() < 0:
            broken.append(f"t={now:.0f}s: {self.setup.capacity - self.free()} units run on {self.setup.capacity}")
        if occupancy.level(self.held, sharing.at(now)) > self.reservable:
            broken.append(f"t={now:.0f}s: {occupancy.level(self.held, sharing.at(now))} units reserved "
                          f"> {self.reservable}")
        for run in self.claimed:
            window = self.inside[run]
            since = max(self.claimed_at[run.ref], window.start_s)
            if now - since <= self.setup.stop_s + self.setup.cycle_s:
                continue
            behind = [other.ref for other in self.running if other.team != run.team and other not in self.inside
                      and other.stopping_since is None]
            if behind:
                broken.append(f"t={now:.0f}s: {run.ref} waits in window {window.index} since {since:.0f}s "
                              f"behind {', '.join(behind[:3])}")

    # -- the figures ------------------------------------------------------------------------------

    @property
    def booked_unit_s(self) -> float:
        return sum(window.unit_s for window in self.windows)

    @property
    def used(self) -> float:
        """Reserved capacity used: the holders' work in their windows and lent units, of the booked."""
        taken = self.use["booked runs"] + self.use["team work"] + self.use["lent"]
        return taken / self.booked_unit_s if self.windows else math.nan

    def delays(self) -> list[float]:
        """Each booking's run: from max(its submission, its window's start) until it runs (0: it ran then)."""
        found = []
        for run, window in self.holders:
            wanted = max(run.submit_s, window.start_s)
            ended = run.finished_at if run.finished_at is not None else math.inf
            spans = [(start, ended if stop is None else stop) for start, stop in self.spans[run.ref]]
            if any(start <= wanted < stop for start, stop in spans):
                found.append(0.0)
            else:
                found.append(min((start - wanted for start, _stop in spans if start >= wanted), default=math.inf))
        return found

    def fair_error(self, team: str) -> float:
        fair = self.own_fair[team]
        return abs(self.own_allocated[team] - fair) / fair if fair else 0.0

    @property
    def max_fair_error(self) -> float:
        return max(self.fair_error(team) for team in self.setup.teams)

    def trace_runs(self, team: str | None = None) -> list[sharing.Run]:
        return [run for run in self.result.runs
                if run.ref not in self.booked and (team is None or run.team == team)]

    def mean_wait_s(self, team: str | None = None) -> float:
        runs = self.trace_runs(team)
        return statistics.fmean(run.wait_s for run in runs) if runs else 0.0


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (as bench/estimates.py's)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


# -- input and report -----------------------------------------------------------------------------

#: A round's replays, in the report's columns: bookings **targeted** (the booked runs name theirs and only they go
#: in), bookings **open** (the booked runs name theirs too and go in first, the team's other work in what is left),
#: the same runs **unbooked**, and the **trace** alone.
MODES = ("targeted", "open", "unbooked", "trace")
BOOKED = MODES[:2]  # the modes with bookings
#: The mode the targets are judged on: a targeted booking is the one that promises its runs their start (an open one
#: lets the team's other work fill what queued named work does not claim yet; its figures are printed beside).
JUDGED = "targeted"


@dataclass
class Bench:
    """A round of the bench: its seed, setup and bookings, and its replays (in :data:`MODES`' order; ``order``:
    the order the round ran them in)."""

    setup: sharing.Setup
    hours: float
    trace: list[dict]
    windows: list[Window]
    holders: list[tuple[sharing.Run, Window]]
    seed: int = 0
    replays: list[Reserving] = field(default_factory=list)
    order: tuple[str, ...] = ()

    def replay(self, mode: str) -> Reserving:
        return self.replays[MODES.index(mode)]


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, argparse.Namespace]:
    """``(this bench's options, bench/sharing.py's)``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Every option of bench/sharing.py is taken too (its --quick: HOURS).")
    parser.add_argument("--hours", type=float, default=HOURS, help="hours of the trace replayed (a week)")
    parser.add_argument("--reserved", type=float, default=0.30, help="booked share of the capacity's unit-hours")
    parser.add_argument("--seed", type=int, default=49, help="of the first round's bookings and holders' runs")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds, each its own seed (--seed, --seed + 1, …); figures are their median")
    parser.add_argument("--early", type=float, default=30, help="minutes before its window a holder submits")
    parser.add_argument("--lead", type=int, default=settings.SLIPWAY_RESERVATION_LEAD_MINUTES,
                        help="minutes before a window its units are cleared (SLIPWAY_RESERVATION_LEAD_MINUTES)")
    own, rest = parser.parse_known_args(argv)
    args = sharing.parse(rest)
    if not 0 < own.reserved < float(DEFAULT.reservable_share):
        raise SystemExit(f"--reserved must be above 0 and below the reservable share ({DEFAULT.reservable_share})")
    if own.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    if SLOT_S % args.cycle or (own.lead * 60) % args.cycle:
        raise SystemExit("--cycle must divide half an hour and the lead")
    return own, args


def simulate(own: argparse.Namespace, args: argparse.Namespace) -> list[Bench]:
    """The rounds: each its seed's bookings and the four replays of :data:`MODES`, in an order rotating from round
    to round (the house rule for benchmarks; a replay reads no clock, so the order cannot move its figures)."""
    hours = args.quick or own.hours
    trace = sharing.read_trace(args.trace, hours)
    if not trace:
        raise SystemExit(f"{args.trace}: no runs")
    setup = sharing.make_setup(args, trace)
    rounds = []
    for number in range(own.rounds):
        seed = own.seed + number
        rng = random.Random(seed)
        windows = book(setup, hours, own.reserved, rng)
        holders = holder_runs(windows, own.early * 60, rng)
        replays = {"targeted": Reserving(setup, trace, windows, holders, "targeted", targeted=True),
                   "open": Reserving(setup, trace, windows, holders, "open"),
                   "unbooked": Reserving(setup, trace, [], holders, "unbooked"),
                   "trace": Reserving(setup, trace, [], [], "trace")}
        shift = number % len(MODES)
        order = MODES[shift:] + MODES[:shift]
        with override_settings(SLIPWAY_RESERVATION_LEAD_MINUTES=own.lead):
            for mode in order:
                replays[mode].run()
        rounds.append(Bench(setup, hours, trace, windows, holders, seed, [replays[mode] for mode in MODES], order))
    return rounds


def describe(rounds: list[Bench], own: argparse.Namespace, args: argparse.Namespace) -> None:
    first = rounds[0]
    setup = first.setup
    hour = 3600.0
    print(f"reservations: {args.trace.name}, the first {first.hours:g} h{' (quick)' if args.quick else ''}: "
          f"{len(first.trace)} runs, {sum(r['units'] * r['duration_s'] for r in first.trace) / hour:.0f} GPU-hours "
          f"of {setup.flavor}, capacity {setup.capacity}, quotas "
          + ", ".join(f"{team}={setup.nominal[team]}" for team in setup.teams)
          + f"; cycle {setup.cycle_s:g} s, grace {setup.stop_s:g} s, lead {own.lead} min")
    print(f"{len(rounds)} round{'s' * (len(rounds) > 1)}, each its seed's bookings replayed "
          + ", ".join(MODES) + "; the order rotating: "
          + "; ".join(", ".join(bench.order) for bench in rounds))
    for bench in rounds:
        windows = bench.windows
        booked = sum(window.unit_s for window in windows)
        held = [window.held() for window in windows]
        peak = max(occupancy.peak(held, h.start, h.end)[0] for h in held)
        units = sorted(window.units for window in windows)
        lengths = sorted((window.end_s - window.start_s) / hour for window in windows)
        print(f"bookings (seed {bench.seed}): {len(windows)} windows of {units[0]}-{units[-1]} units, "
              f"{lengths[0]:g}-{lengths[-1]:g} h ("
              + ", ".join(f"{team} {sum(w.team == team for w in windows)}" for team in setup.teams)
              + f"): {booked / hour:.0f} unit-hours, {booked / (setup.capacity * bench.hours * hour):.1%} of the "
              f"capacity's; at most {peak} reserved at once (reservable {bench.replays[0].reservable})")
        print(f"holders' runs: {len(bench.holders)} ({len(windows)} of a window's units submitted {own.early:g} min "
              f"before it, {len(bench.holders) - len(windows)} of half its units mid-window), "
              f"{sum(run.units * run.duration_s for run, _w in bench.holders) / hour:.0f} GPU-hours, "
              f"each naming its booking")


def median(values: list[float | None]) -> float | None:
    """The median of the rounds' figures (None: the figure is not one of this replay's)."""
    found = [value for value in values if value is not None]
    return statistics.median(found) if found else None


def report(rounds: list[Bench], quick: bool) -> bool:
    first = rounds[0]
    setup = first.setup
    hour = 3600.0
    grace_cycle = setup.stop_s + setup.cycle_s
    delays = {id(replay): replay.delays() for bench in rounds for replay in bench.replays}

    def figure(mode: str, of) -> float | None:
        """``of`` (a replay's figure or None) of ``mode``'s replays, the median of the rounds."""
        return median([of(bench.replay(mode)) for bench in rounds])

    def by_round(mode: str, of, shape: str) -> str:
        return ", ".join(shape.format(of(bench.replay(mode))) for bench in rounds)

    def delay(q: float):
        return lambda r: quantile(delays[id(r)], q) if delays[id(r)] else None

    def windowed(of):
        return lambda r: of(r) if r.windows else None

    print(f"each figure the median of {len(rounds)} round{'s' * (len(rounds) > 1)} (seeds "
          + ", ".join(str(bench.seed) for bench in rounds) + ")")
    print(f"{'':<40}" + "".join(f"{mode:>12}" for mode in MODES))
    rows = [
        ("utilization (all work)", lambda r: r.result.utilization, "{:.3f}"),
        ("fair-share error (the trace's runs)", lambda r: r.max_fair_error, "{:.1%}"),
        ("fair-share error (all work)", lambda r: r.result.max_fair_error, "{:.1%}"),
        ("mean queue wait, trace's runs (min)", lambda r: r.mean_wait_s() / 60, "{:.1f}"),
        ("delivered GPU-hours, trace's runs", lambda r: sum(r.own_allocated.values()) / hour, "{:.1f}"),
        ("delivered GPU-hours, all", lambda r: sum(r.result.allocated.values()) / hour, "{:.1f}"),
        ("preemptions by reclaim", lambda r: r.preempted["reclaim"], "{:g}"),
        ("preemptions by windows", lambda r: r.preempted["window"], "{:g}"),
        ("lost GPU-hours by reclaim", lambda r: r.lost["reclaim"] / hour, "{:.1f}"),
        ("lost GPU-hours by windows", lambda r: r.lost["window"] / hour, "{:.1f}"),
        ("holder start delay p50 (s)", delay(0.5), "{:.0f}"),
        ("holder start delay p95 (s)", delay(0.95), "{:.0f}"),
        ("holder start delay max (s)", delay(1.0), "{:.0f}"),
        ("booked runs started outside a window", lambda r: len(r.outside) if r.holders else None, "{:g}"),
        ("booked runs in another of its windows", windowed(lambda r: len(r.elsewhere)), "{:g}"),
        ("runs lent a window's units", windowed(lambda r: r.loans), "{:g}"),
        ("in a window: wait for its units max (s)", windowed(lambda r: max(r.claim_waits, default=0)), "{:.0f}"),
        ("in a window: its units never came", windowed(lambda r: len(r.never)), "{:g}"),
        ("last run ends (h)", lambda r: r.result.span_s / hour, "{:.1f}"),
    ]
    for label, of, shape in rows:
        cells = [figure(mode, of) for mode in MODES]
        print(f"{label:<40}" + "".join(f"{'-' if cell is None else shape.format(cell):>12}" for cell in cells))
    print("per team, the trace's runs: delivered / fair GPU-hours (error), mean queue wait")
    for team in setup.teams:
        print(f"  {team:<8}" + "".join(
            f"  {mode} {figure(mode, lambda r, team=team: r.own_allocated[team] / hour):7.1f} / "
            f"{figure(mode, lambda r, team=team: r.own_fair[team] / hour):<7.1f}"
            f"({figure(mode, lambda r, team=team: r.fair_error(team)):>5.1%}) "
            f"{figure(mode, lambda r, team=team: r.mean_wait_s(team) / 60):6.1f} min" for mode in MODES))
    for mode in BOOKED:
        use = {key: figure(mode, lambda r, key=key: r.use[key] / hour) for key in first.replay(mode).use}
        print(f"reserved windows, {mode}: {figure(mode, lambda r: r.booked_unit_s / hour):.0f} unit-hours booked: "
              f"the booked runs {use['booked runs']:.0f}, the holders' other work {use['team work']:.0f}, "
              f"lent {use['lent']:.0f}, idle {use['idle']:.0f}")
    ok = True
    for mode in MODES:
        broken = [f"seed {bench.seed}: {line}" for bench in rounds for line in bench.replay(mode).result.broken]
        if broken:
            ok = False
            print(f"invariants BROKEN in {mode}: " + "; ".join(broken[:5]))
        else:
            print(f"invariants: held at {sum(len(bench.replay(mode).result.samples) for bench in rounds)} cycles "
                  f"({mode}, {len(rounds)} round{'s' * (len(rounds) > 1)})")
    # The booked modes side by side with the runs unbooked and the trace alone (issue 49's proof).
    words = {"targeted": "the booked runs name theirs, and only work naming a booking goes into its window",
             "open": "the booked runs name theirs and go in first; the team's other work in what is left"}
    targets = []
    for mode in BOOKED:
        p50, p95 = figure(mode, delay(0.5)), figure(mode, delay(0.95))
        used = figure(mode, lambda r: r.used)
        met = {"used": used >= TARGET_USED, "delay": p95 <= grace_cycle}
        print(f"{mode} bookings ({words[mode]}):")
        print(f"  {'holder start delay of the booked runs p50 / p95':<52} {p50:.0f} / {p95:.0f} s "
              f"(p95 by round: {by_round(mode, delay(0.95), '{:.0f}')} s)")
        print(f"  {f'holder start delay target: p95 <= notice + one cycle ({grace_cycle:g} s)':<52} "
              f"{'met' if met['delay'] else 'not met'}")
        print(f"  {'reserved capacity used':<52} {used:.1%} (by round: {by_round(mode, lambda r: r.used, '{:.1%}')})")
        for label, of, shape in (("utilization (all work)", lambda r: r.result.utilization, "{:.3f}"),
                                 ("fair-share error (all work)", lambda r: r.result.max_fair_error, "{:.1%}"),
                                 ("fair-share error (the trace's runs)", lambda r: r.max_fair_error, "{:.1%}"),
                                 ("the others' mean queue wait (min)", lambda r: r.mean_wait_s() / 60, "{:.1f}")):
            print(f"  {label:<52} {shape.format(figure(mode, of))} (unbooked {shape.format(figure('unbooked', of))}, "
                  f"the trace alone {shape.format(figure('trace', of))})")
        targets += [(f"{mode}: reserved capacity used >= {TARGET_USED:.0%}", f"{used:.1%}", met["used"]),
                    (f"{mode}: holder start delay p95 <= grace + cycle ({grace_cycle:g} s)", f"{p95:.0f} s",
                     met["delay"])]
    print(f"targets (the medians of the rounds; judged on {JUDGED} bookings):"
          + (" (quick run: not judged)" if quick else ""))
    for label, shown, met in targets:
        judged = label.startswith(f"{JUDGED}:")
        verdict = ("" if quick else "PASS" if met else "FAIL") if judged else "met" if met else "not met"
        print(f"  {label:<62} {shown:>8}  {verdict}")
        ok = ok and (quick or met or not judged)
    return ok


def main(argv: list[str] | None = None) -> int:
    own, args = parse(argv)
    rounds = simulate(own, args)
    describe(rounds, own, args)
    return 0 if report(rounds, bool(args.quick)) else 1


if __name__ == "__main__":
    sys.exit(main())
