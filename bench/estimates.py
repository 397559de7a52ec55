"""Benchmark: how far the start estimate made at submission lands from the real start (issue 34, item 5).

Run ``.venv/bin/python bench/estimates.py [--limit-slack 1.25] [--limit-round 15] [--quick [HOURS]]
[any option of bench/sharing.py]``. No database and no sleeping: the sharing bench's contention
trace (``bench/traces/bursty.csv``: three teams in one cohort on 16 A100s, borrowing, fair share,
reclaim) is replayed by ``bench/sharing.py``'s own replay (victims by work lost), imported, not
copied. At every cycle that queues newly submitted runs, before admission, three estimators are
asked when each will start, from what the replay holds at that instant:

* **simulation**: the production's :func:`workloads.estimates.simulate` — admission's own rules
  (``fair_order`` over ``decide``), reclaim (``choose_victims``, the delay, the grace) — with the
  production's running times (:func:`workloads.estimates.expected_end`): a run's limit × the
  limit use of the runs that ended before the estimate (:func:`workloads.estimates.limit_use`),
  the limit once past that — what the portal knows of these runs (the trace has no job names,
  so no history of the same job);
* **naive** (the baseline): each team's own queue, first in first out by queue order, within its
  nominal quota, running work ending at its limit — the estimate before issue 34 (no cohort, no
  borrowing, no reclaim);
* **progress**: the simulation as the portal runs it once runs report their progress (issue 38,
  docs/metrics.md): a running run that has reported for :data:`PROGRESS_AFTER` is expected to end
  at its progress ETA — taken here as its true end, as for a run that trains at a steady rate —
  and every other run as in **simulation**;
* **earliest** and **latest** (issue 46): the production's range around the simulation's point —
  every run ending at its limit × the 10th percentile of limit use
  (:data:`workloads.estimates.EARLY_USE_QUANTILE`), and every run ending at its limit (the bound,
  "by 04:52 at the latest"; also what the portal showed as its point before 20 runs had ended);
* **oracle**: the same simulation knowing every run's true running time. What it still misses
  is what no estimate made at submission can know: work submitted later that goes first
  (a higher priority; in the cohort, a team with a lower share), later preemptions. It is the
  floor the simulation is judged against.

A run's **runtime limit** is what its author would set: its running time × ``--limit-slack``,
rounded up to ``--limit-round`` minutes (the trace has running times only).

The **relative error** of a run's estimate is |estimated wait − real wait| ÷ real wait, the wait
counted from submission to its first start, over the runs that waited (a real wait of more than
one cycle); runs that started within a cycle are counted apart (an estimate of "now", within a
cycle, is right for them), as are estimates of "unknown". Printed: the median and p90 of the
relative error per estimator, against the targets median ≤ 25 %, p90 ≤ 60 %; the median and p90
of the **ratio** estimated ÷ real wait (above 1: it started earlier than said); how often the real
start came **by** the estimate (within a cycle: for **latest**, the bound's coverage); and how often
it fell **in the range** [earliest, latest] (within a cycle at either end).
"""

from __future__ import annotations

import argparse
import heapq
import math
import statistics
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/sharing.py, when loaded from elsewhere

import sharing

from workloads import estimates
from workloads.estimates import Holding, Sharing, Waiting, simulate

TARGET_MEDIAN = 0.25
TARGET_P90 = 0.60
ESTIMATORS = ("simulation", "naive", "progress", "earliest", "latest", "oracle")
#: How long a running run reports its progress before its ETA is taken (a rate needs some reports).
PROGRESS_AFTER = 300.0


@dataclass
class Figures:
    """One estimator's estimates: ``{ref: estimated start in seconds}`` (None: unknown)."""

    name: str
    estimates: dict[str, float | None] = field(default_factory=dict)


def limit_of(run: sharing.Run, slack: float, round_s: float) -> float:
    """The run's runtime limit in seconds (module docstring)."""
    return math.ceil(run.duration_s * slack / round_s) * round_s


class Estimating(sharing.Replay):
    """bench/sharing.py's cohort replay, asking each estimator at the cycle that queues a run."""

    def __init__(self, setup: sharing.Setup, trace: list[dict], slack: float, round_s: float):
        super().__init__(setup, trace, cohort=True)
        self.slack, self.round_s = slack, round_s
        self.figures_of = {name: Figures(name) for name in ESTIMATORS}
        self.first_start: dict[str, float] = {}

    def admit(self, now: float) -> bool:
        fresh = [run for run in self.queued if run.ref not in self.figures_of["naive"].estimates]
        if fresh:
            self.estimate(now, fresh)
        admitted = super().admit(now)
        for run in self.running:
            self.first_start.setdefault(run.ref, run.started_at)
        return admitted

    def limit(self, run: sharing.Run) -> float:
        return limit_of(run, self.slack, self.round_s)

    def estimate(self, now: float, fresh: list[sharing.Run]) -> None:
        wanted = {run.ref for run in fresh}
        for name, known in (("simulation", "nothing"), ("progress", "progress"), ("earliest", "early"),
                            ("latest", "limits"), ("oracle", "everything")):
            starts = self.simulated(now, wanted, known)
            for run in fresh:
                start = starts[run.ref].at
                self.figures_of[name].estimates[run.ref] = (
                    None if start is None else (start - sharing.EPOCH).total_seconds())
        self.figures_of["naive"].estimates.update(self.naive(now, wanted))

    def simulated(self, now: float, wanted: set[str], known: str):
        """:func:`workloads.estimates.simulate` on the replay's state; ``known``: what it knows of the true
        running times — "nothing", "progress" (running runs' after :data:`PROGRESS_AFTER`) or "everything";
        "early" and "limits" know nothing either, and take the range's ends (workloads.estimates.forecast.estimated_starts)."""
        # The portal's rule (workloads.estimates.expected_end): a run's typical time is its limit × the
        # limit use of the runs that ended before now (the trace names no jobs: no job's median); the
        # range's low end takes the 10th percentile of it, its bound none (every run at its limit).
        spans = [(run.duration_s, self.limit(run)) for run in self.result.runs
                 if run.finished_at is not None and run.finished_at <= now]
        use = (None if known == "limits" else
               estimates.limit_use(spans, estimates.EARLY_USE_QUANTILE) if known == "early" else estimates.limit_use(spans))

        def expected(run: sharing.Run, start: float) -> datetime:
            limit = timedelta(seconds=self.limit(run))
            return estimates.expected_end(sharing.at(start), sharing.at(now), limit,
                                          estimates.typical_time(limit, None, use))

        queue = sorted(self.queued, key=sharing.queue_key)
        pks = {run.ref: pk for pk, run in enumerate(sorted([*queue, *self.running], key=sharing.queue_key), start=1)}
        holding = []
        for run in self.running:
            if run.stopping_since is not None:  # a victim whose pods stop: its units go at the grace's end
                ends = run.stopping_since + self.setup.stop_s
            elif known == "everything" or (known == "progress" and now - run.started_at >= PROGRESS_AFTER):
                ends = run.end_s
            else:
                ends = None
            holding.append(Holding(run.ref, self.figures.ids[run.team], sharing.FLAVOR_ID, run.units,
                                   sharing.at(ends) if ends is not None else expected(run, run.started_at), run.borrowed, run.priority, sharing.at(run.started_at),
                                   None if run.stopping_since is not None else self.figures.entry(run, pks[run.ref]),
                                   stopping=run.stopping_since is not None))
        waiting = [Waiting(self.figures.entry(run, pks[run.ref]),
                           timedelta(seconds=run.duration_s - run.done) if known == "everything"
                           else expected(run, now) - sharing.at(now))
                   for run in queue]
        cohort = Sharing(self.figures.figures(self.usage), self.remembered(now), self.setup.rules,
                         timedelta(seconds=self.setup.stop_s))
        return simulate(sharing.at(now), holding, waiting, self.figures.quotas,
                        timedelta(seconds=self.setup.cycle_s), cohort, wanted)

    def naive(self, now: float, wanted: set[str]) -> dict[str, float | None]:
        """The estimate before issue 34: the team's own queue in order, within its nominal quota, ends by limits."""
        found: dict[str, float | None] = {}
        for team in {run.team for run in self.queued if run.ref in wanted}:
            free = self.setup.nominal[team] - self.usage[team]
            ends = [(run.started_at + self.limit(run), run.units) for run in self.running if run.team == team]
            heapq.heapify(ends)
            at = now
            for run in sorted((run for run in self.queued if run.team == team), key=sharing.queue_key):
                while free < run.units and ends:
                    end, units = heapq.heappop(ends)
                    free, at = free + units, max(at, end)
                if free < run.units:
                    found[run.ref] = None
                    continue
                found[run.ref] = at
                free -= run.units
                heapq.heappush(ends, (at + self.limit(run), run.units))
        return {ref: start for ref, start in found.items() if ref in wanted}


@dataclass
class Verdict:
    name: str
    errors: list[float]  # relative errors of the runs that waited and got a time
    unknown: int  # runs that got no time
    prompt_now: int  # runs that started within a cycle, estimated within a cycle
    prompt_late: int  # runs that started within a cycle, estimated later
    waited_now: int  # runs that waited, estimated within a cycle ("now" for work that could not start)
    ratios: list[float] = field(default_factory=list)  # estimated ÷ real wait, of the runs that waited
    by: int = 0  # runs that waited and started by their estimate (within a cycle)

    def quantile(self, q: float, figures: list[float] | None = None) -> float:
        figures = self.errors if figures is None else figures
        if not figures:
            return math.nan
        ordered = sorted(figures)
        return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def judge(replay: Estimating, figures: Figures) -> Verdict:
    cycle = replay.setup.cycle_s
    verdict = Verdict(figures.name, [], 0, 0, 0, 0)
    for run in replay.result.runs:
        estimate, start = figures.estimates.get(run.ref), replay.first_start.get(run.ref)
        if start is None or run.ref not in figures.estimates:
            continue
        real = start - run.submit_s
        if estimate is None:
            verdict.unknown += 1
            continue
        guessed = max(0.0, estimate - run.submit_s)
        soon = guessed <= cycle
        if real <= cycle:
            if soon:
                verdict.prompt_now += 1
            else:
                verdict.prompt_late += 1
            continue
        verdict.waited_now += soon
        verdict.errors.append(abs(guessed - real) / real)
        verdict.ratios.append(guessed / real)
        verdict.by += real <= guessed + cycle
    return verdict


def in_range(replay: Estimating) -> tuple[int, int]:
    """``(runs that waited and started within [earliest, latest], a cycle's slack at either end; runs
    that waited with both ends known)``."""
    cycle, inside, known = replay.setup.cycle_s, 0, 0
    low, high = replay.figures_of["earliest"].estimates, replay.figures_of["latest"].estimates
    for run in replay.result.runs:
        start = replay.first_start.get(run.ref)
        if start is None or low.get(run.ref) is None or high.get(run.ref) is None or start - run.submit_s <= cycle:
            continue
        known += 1
        inside += low[run.ref] - cycle <= start <= high[run.ref] + cycle
    return inside, known


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-slack", type=float, default=1.25,
                        help="a run's runtime limit: its running time times this, rounded up")
    parser.add_argument("--limit-round", type=float, default=15, help="minutes a runtime limit is rounded up to")
    own, rest = parser.parse_known_args(argv)
    args = sharing.parse(rest)
    if own.limit_slack < 1 or own.limit_round <= 0:
        raise SystemExit("--limit-slack must be at least 1 (a limit never cuts the run) and --limit-round positive")
    trace = sharing.read_trace(args.trace, args.quick)
    if not trace:
        raise SystemExit(f"{args.trace}: no runs")
    setup = sharing.make_setup(args, trace)
    replay = Estimating(setup, trace, own.limit_slack, own.limit_round * 60)
    result = replay.run()
    print(f"estimates: {args.trace.name}{f' (quick: {args.quick:g} h)' if args.quick else ''}: {len(trace)} runs, cohort of "
          + ", ".join(f"{team}={setup.nominal[team]}" for team in setup.teams)
          + f" on {setup.capacity}× {setup.flavor}; runtime limits = running time × {own.limit_slack:g}, "
          f"rounded up to {own.limit_round:g} min; {result.preemptions} preemptions in the replay")
    verdicts = [judge(replay, replay.figures_of[name]) for name in ESTIMATORS]
    waited = len(verdicts[0].errors) + verdicts[0].unknown
    print(f"runs that waited more than a cycle: {len(verdicts[0].errors)} with a time; "
          f"mean real wait {statistics.fmean(s - r.submit_s for r in result.runs if (s := replay.first_start.get(r.ref)) is not None) / 60:.1f} min")
    print(f"{'':<36}" + "".join(f"{v.name:>12}" for v in verdicts))
    rows = [
        ("median relative error", lambda v: f"{v.quantile(0.5):.1%}"),
        ("p90 relative error", lambda v: f"{v.quantile(0.9):.1%}"),
        ("median estimated / real wait", lambda v: f"{v.quantile(0.5, v.ratios):.2f}"),
        ("p90 estimated / real wait", lambda v: f"{v.quantile(0.9, v.ratios):.2f}"),
        ("started by the estimate", lambda v: f"{v.by / len(v.ratios):.1%}" if v.ratios else "-"),
        ("waited, estimated 'now'", lambda v: f"{v.waited_now}"),
        ("started at once, estimated 'now'", lambda v: f"{v.prompt_now}"),
        ("started at once, estimated later", lambda v: f"{v.prompt_late}"),
        ("unknown", lambda v: f"{v.unknown}"),
    ]
    for label, figure in rows:
        print(f"{label:<36}" + "".join(f"{figure(v):>12}" for v in verdicts))
    simulation = verdicts[0]
    print("targets:" + (" (quick run: not judged)" if args.quick else ""))
    for label, value, target in (("median relative error", simulation.quantile(0.5), TARGET_MEDIAN),
                                 ("p90 relative error", simulation.quantile(0.9), TARGET_P90)):
        met = "" if args.quick else "PASS" if value <= target else "FAIL"
        print(f"  {label} <= {target:.0%} (simulation; with progress ETAs "
              f"{verdicts[2].quantile(0.5 if 'median' in label else 0.9):.1%}, oracle "
              f"{verdicts[ESTIMATORS.index('oracle')].quantile(0.5 if 'median' in label else 0.9):.1%})"
              f"  {value:.1%}  {met}")
    print(f"  of {waited} runs that waited, {simulation.waited_now} were told 'now' "
          f"(naive: {verdicts[1].waited_now})")
    inside, known = in_range(replay)
    latest = verdicts[ESTIMATORS.index("latest")]
    print(f"range (issue 46): {inside} of {known} runs that waited started within [earliest, latest] "
          f"({inside / known:.1%}); the bound held for {latest.by / len(latest.ratios):.1%}"
          if known and latest.ratios else "range (issue 46): no run waited with both ends known")
    return 0


if __name__ == "__main__":
    sys.exit(main())
