"""Benchmark: the sharing trace on an elastic pool — start estimates that know provisioning, no bill for a half-built gang, idle nodes (issue 52).

Run ``.venv/bin/python bench/pools.py [--node 2] [--delay-median 210] [--delay-tail 900]
[--fail 0.1] [--unneeded 10] [--rounds 3] [--seed 52] [--quick [HOURS]] [any option of bench/sharing.py]``.
No database and no sleeping: ``bench/sharing.py``'s cohort replay (``bench/traces/bursty.csv``: three
teams in one cohort, borrowing, fair share, reclaim by work lost), imported, not copied, with the
cohort's capacity as an **elastic pool** of ``--node``-unit nodes (its ``max``: capacity ÷ node; ``min`` 0;
mode ``atomic``) instead of a fixed inventory. What the portal does, through its own rules:

* admission is the cohort's (quota follows the pool's ``max``: ``fleet.pools.with_headroom``); an admitted run
  whose pods (one per node's worth, ``min(units, node)`` units each) the ready nodes cannot hold
  (``cluster.pools.nodes_needed``) asks for its new nodes at once (``cluster.pools.new_nodes``: a
  ProvisioningRequest of the ``best-effort-atomic-scale-up`` class), and its pods are created only once it is
  ``Provisioned``: every node or none;
* a request takes a delay drawn from a log-normal law — median ``--delay-median`` s, its 0.99 quantile
  ``--delay-tail`` s, draws cut there: the issue's "median 3–4 min, a tail to 15 min", as the sandbox's pools
  draw theirs (210 s and 900 s by default, σ ≈ 0.63) — and fails with ``--fail``'s
  probability (then at the end of its delay, no node built); a failed run gives its quota back and queues
  again at its old place, not before ``cluster.pools.backoff_seconds`` (Kueue's 60 s doubling, 30 min at most);
* a provisioned request's time goes into the pool's history (``fleet.models.NodePool.remembered``, the
  newest 50), which the estimates read (``cluster.pools.provisioning_seconds``: the median, a default of
  4 min until three are known);
* a node idle for ``--unneeded`` minutes goes at the next cycle after (scale-down; never a node with a pod);
* billing follows running pods (``billing.segments.plan_billing`` bills the units that run): a run's
  unit-hours are counted with the ledger's ``billing.ledger.interval_unit_hours`` over the spans its pods ran.

Figures, each the **median over ``--rounds`` seeds** (a seed draws every delay and failure; the trace and the
rules are the same):

* **start estimates** of the runs whose first start waited on new nodes: at the cycle that queues a run (before
  admission), the production's :func:`workloads.estimates.simulate` is asked when it starts — with the pool's
  :class:`workloads.estimates.Growth` (free units on ready nodes, units on nodes being provisioned, room to
  grow, the history's median) and without it (the estimate that ignores provisioning, as a fixed inventory's);
  running times as ``bench/estimates.py`` takes them (a run's limit × the limit use of the runs ended so far).
  The relative error is |estimated − real wait| ÷ real wait, over those runs; target: median ≤ 20 % with;
* **GPU-minutes billed for gangs whose atomic provisioning failed**, over each failed request's life (from its
  creation to its failure): target 0;
* **idle node-hours** (nodes up or being provisioned with no pod) of the elastic pool, against the same trace on
  a **fixed pool of the elastic pool's peak** node count (every node ready from the start, never removed).

Not modelled: other work than the trace's, node failures after start, the provisioning's own retries inside
Cluster Autoscaler, revoked bookings (``BookingExpired``: pods are created at once on ``Provisioned`` here).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/sharing.py, bench/estimates.py

import estimates as estimates_bench
import sharing

from billing.ledger import interval_unit_hours
from cluster import pools
from fleet.models import NodePool
from workloads import estimates
from workloads.estimates import Growth, Holding, Sharing, Waiting, simulate

TARGET_MEDIAN = 0.20
ESTIMATORS = ("with provisioning", "ignoring it")


@dataclass
class Node:
    name: str
    units: int
    ready_at: float | None  #: None: ready (a pod may bind); else when its request should end
    used: int = 0
    idle_since: float = 0.0


@dataclass
class Request:
    """One atomic ProvisioningRequest: a run's new nodes, all or none."""

    run: sharing.Run
    borrows: int
    since: float
    ends_at: float
    fails: bool
    nodes: list[Node]


@dataclass
class Figures:
    seed: int
    errors: dict[str, list[float]] = field(default_factory=dict)
    waits: list[float] = field(default_factory=list)  # the real waits of the runs the errors are of, in order
    waited_on_nodes: int = 0
    requests: int = 0
    failed: int = 0
    failed_gangs: int = 0
    failed_billed_unit_hours: Decimal = Decimal(0)
    billed_unit_hours: Decimal = Decimal(0)
    peak_nodes: int = 0
    node_s: float = 0.0  # ∫ nodes up or provisioning
    busy_node_s: float = 0.0  # ∫ nodes with a pod
    fixed_node_s: float = 0.0
    fixed_busy_node_s: float = 0.0
    mean_wait_s: float = 0.0
    fixed_mean_wait_s: float = 0.0

    @property
    def idle_node_hours(self) -> float:
        return (self.node_s - self.busy_node_s) / 3600

    @property
    def fixed_idle_node_hours(self) -> float:
        return (self.fixed_node_s - self.fixed_busy_node_s) / 3600


def sigma(args: argparse.Namespace) -> float:
    """The log-normal σ whose 0.99 quantile is ``--delay-tail`` for the median ``--delay-median``."""
    return math.log(args.delay_tail / args.delay_median) / statistics.NormalDist().inv_cdf(0.99)


def draw_delay(rng: random.Random, args: argparse.Namespace) -> float:
    """One provisioning delay (seconds): log-normal, cut at the tail."""
    return min(rng.lognormvariate(math.log(args.delay_median), sigma(args)), args.delay_tail)


def floor_error(args: argparse.Namespace, seed: int, draws: int = 5_000) -> tuple[float, float]:
    """``(median relative error of the delay's median, the least median relative error of any point estimate)``
    against delays drawn from the law: what no estimate of a wait that is all provisioning can beat."""
    rng = random.Random(seed)
    delays = [draw_delay(rng, args) for _ in range(draws)]

    def error(guess: float) -> float:
        return statistics.median(abs(guess - d) / d for d in delays)

    return error(args.delay_median), min(error(args.delay_median * k / 100) for k in range(40, 161, 2))


class PoolReplay(sharing.Replay):
    """The sharing replay (cohort, victims by work lost) on a pool of nodes: elastic, or fixed at ``fixed_nodes``."""

    def __init__(self, setup: sharing.Setup, trace: list[dict], args: argparse.Namespace, seed: int,
                 fixed_nodes: int | None = None):
        super().__init__(setup, trace, cohort=True)
        self.args, self.node_units = args, args.node
        self.fixed = fixed_nodes is not None
        self.max_nodes = fixed_nodes if self.fixed else setup.capacity // args.node
        self.random = random.Random(seed)
        self.nodes: list[Node] = [Node(f"n{i}", args.node, None) for i in range(fixed_nodes or 0)]
        self.named = len(self.nodes)
        self.requests: list[Request] = []
        self.blocked: list[tuple[sharing.Run, int]] = []  # admitted, waiting for room the pool cannot add now
        self.not_before: dict[str, float] = {}
        self.failures: dict[str, int] = {}
        self.bound: dict[str, list[tuple[Node, int]]] = {}  # ref → its pods' nodes (booked or running)
        self.pool = NodePool(history_seconds=[])
        self.stats = Figures(seed, {name: [] for name in ESTIMATORS})
        self.first_start: dict[str, float] = {}
        self.fresh_estimates: dict[str, dict[str, float | None]] = {name: {} for name in ESTIMATORS}
        self.waited_on_nodes: set[str] = set()
        self.failed_spans: list[tuple[sharing.Run, float, float]] = []  # (run, request made, failed)
        self.pod_spans: dict[str, list[tuple[float, float, int]]] = {}  # ref → (from, to, units) its pods ran

    def limit(self, run: sharing.Run) -> float:
        return estimates_bench.limit_of(run, self.args.limit_slack, self.args.limit_round * 60)

    # -- admission and nodes ---------------------------------------------------------------------

    def admit(self, now: float) -> bool:
        fresh = [run for run in self.queued if run.ref not in self.fresh_estimates[ESTIMATORS[0]]]
        if fresh and not self.fixed:
            self.estimate_starts(now, fresh)
        backing = [run for run in self.queued if self.not_before.get(run.ref, 0.0) > now]
        self.queued = [run for run in self.queued if run not in backing]
        try:
            return super().admit(now)
        finally:
            self.queued += backing

    def shape(self, run: sharing.Run) -> tuple[int, int]:
        """``(pods, units per pod)``: a pod per node's worth of its units."""
        per_pod = min(run.units, self.node_units)
        return math.ceil(run.units / per_pod), per_pod

    def ready(self) -> list[Node]:
        return [node for node in self.nodes if node.ready_at is None]

    def start(self, run: sharing.Run, borrows: int, now: float) -> None:
        """Admitted: its pods start on ready nodes with room, or it asks for its missing nodes (atomic), or — the
        pool at its ``max`` — it waits for room."""
        pods, per_pod = self.shape(run)
        missing = pools.nodes_needed([node.units - node.used for node in self.ready()], per_pod, pods)
        if not missing:
            self.bind(run, self.ready(), pods, per_pod)
            self.run_pods(run, borrows, now)
            return
        count = pools.new_nodes(missing, self.node_units, per_pod)
        if self.fixed or len(self.nodes) + count > self.max_nodes:
            self.blocked.append((run, borrows))
            return
        # An atomic ProvisioningRequest for its missing pods' nodes; the pods that fit book their room now.
        delay = draw_delay(self.random, self.args)
        fails = self.random.random() < self.args.fail
        new = []
        for _ in range(count):
            self.named += 1
            new.append(Node(f"n{self.named}", self.node_units, now + delay))
        self.nodes += new
        self.bind(run, self.ready(), pods - missing, per_pod)
        self.requests.append(Request(run, borrows, now, now + delay, fails, new))
        self.waited_on_nodes.add(run.ref)
        self.stats.requests += 1

    def run_pods(self, run: sharing.Run, borrows: int, now: float) -> None:
        super().start(run, borrows, now)
        self.first_start.setdefault(run.ref, now)

    def bind(self, run: sharing.Run, nodes: list[Node], pods: int, per_pod: int) -> None:
        """``pods`` of its pods onto ``nodes`` with room, fullest first (the scheduler's bin-packing)."""
        placed = self.bound.setdefault(run.ref, [])
        for _ in range(pods):
            node = min((n for n in nodes if n.units - n.used >= per_pod), key=lambda n: (n.units - n.used, n.name))
            node.used += per_pod
            placed.append((node, per_pod))

    def unbind(self, ref: str, when: float) -> None:
        for node, units in self.bound.pop(ref, []):
            node.used -= units
            if not node.used:
                node.idle_since = when

    def settle(self, now: float) -> bool:
        """Pods of runs that ended or stopped leave their nodes; requests whose delay is over are provisioned (the
        run's pods start on its nodes) or failed (no node built, quota given back, queued again at its place after
        the backoff); runs blocked on room retry; idle nodes go after ``unneeded`` minutes and a cycle."""
        moved = False
        waiting = {request.run.ref for request in self.requests} | {run.ref for run, _b in self.blocked}
        running = {run.ref: run for run in self.running}
        for ref in [ref for ref in self.bound if ref not in running and ref not in waiting]:
            run = next(run for run in self.result.runs if run.ref == ref)
            self.unbind(ref, run.finished_at if run.finished_at is not None else now)
        for request in [r for r in self.requests if r.ends_at <= now]:
            self.requests.remove(request)
            run = request.run
            moved = True
            if request.fails:
                self.nodes = [node for node in self.nodes if node not in request.nodes]  # all or none
                self.unbind(run.ref, now)
                self.failed_spans.append((run, request.since, now))
                self.stats.failed += 1
                self.failures[run.ref] = self.failures.get(run.ref, 0) + 1
                self.not_before[run.ref] = now + pools.backoff_seconds(self.failures[run.ref])
                self.usage[run.team] -= run.units
                self.queued.append(run)
                continue
            self.pool.history_seconds = self.pool.remembered(now - request.since)
            for node in request.nodes:
                node.ready_at, node.idle_since = None, now
            self.failures.pop(run.ref, None)
            pods, per_pod = self.shape(run)
            self.bind(run, request.nodes, pods - len(self.bound.get(run.ref, [])), per_pod)
            self.run_pods(run, request.borrows, now)
        for run, borrows in list(self.blocked):
            pods, per_pod = self.shape(run)
            if not pools.nodes_needed([node.units - node.used for node in self.ready()], per_pod, pods):
                self.blocked.remove((run, borrows))
                self.start(run, borrows, now)
                moved = True
        if not self.fixed:
            gone = self.args.unneeded * 60 + self.setup.cycle_s
            self.nodes = [node for node in self.nodes
                          if node.ready_at is not None or node.used or now - node.idle_since < gone]
        self.stats.peak_nodes = max(self.stats.peak_nodes, len(self.nodes))
        return moved

    def stopped(self, now: float) -> bool:
        stopped = super().stopped(now)
        return self.settle(now) or stopped

    def advance(self, start: float, stop: float) -> None:
        span = stop - start
        if span > 0:
            self.stats.node_s += len(self.nodes) * span
            self.stats.busy_node_s += sum(1 for node in self.nodes if node.used) * span
            for run in self.running:
                end = min(stop, run.end_s)
                if end > start:
                    self.pod_spans.setdefault(run.ref, []).append((start, end, run.units))
        super().advance(start, stop)

    def next_cycle(self, now: float, changed: bool) -> float | None:
        following = super().next_cycle(now, changed)
        cycle = self.setup.cycle_s
        moments = [r.ends_at for r in self.requests] + [self.not_before[run.ref] for run in self.queued
                                                        if self.not_before.get(run.ref, 0.0) > now]
        if not self.fixed:
            moments += [node.idle_since + self.args.unneeded * 60 + cycle for node in self.nodes
                        if node.ready_at is None and not node.used]
        later = [m for m in (math.ceil(moment / cycle) * cycle for moment in moments) if m > now]
        if (self.queued or self.blocked) and changed:
            later.append(now + cycle)
        return min([m for m in [following, *later] if m is not None], default=None)

    # -- estimates -------------------------------------------------------------------------------

    def growth(self, now: float, takes: float) -> Growth:
        """The pool as :class:`workloads.estimates.Growth` (what :mod:`workloads.estimates.forecast` feeds): free
        units on ready nodes, the units of nodes being provisioned that their run leaves, room to grow."""
        free = sum(node.units - node.used for node in self.ready())
        coming = []
        for request in self.requests:
            spare = sum(node.units for node in request.nodes) - (
                request.run.units - sum(units for _node, units in self.bound.get(request.run.ref, [])))
            if spare > 0:
                coming.append((sharing.at(max(request.since + takes, now)), spare))
        room = (self.max_nodes - len(self.nodes)) * self.node_units
        return Growth(free, room, timedelta(seconds=takes), tuple(sorted(coming)), "bench pool")

    def estimate_starts(self, now: float, fresh: list[sharing.Run]) -> None:
        wanted = {run.ref for run in fresh}
        median_s, _tail = pools.provisioning_seconds(self.pool.history_seconds)
        for name, growth in ((ESTIMATORS[0], {sharing.FLAVOR_ID: self.growth(now, median_s)}), (ESTIMATORS[1], None)):
            starts = self.simulated(now, wanted, growth, median_s)
            for run in fresh:
                start = starts[run.ref].at
                self.fresh_estimates[name][run.ref] = None if start is None else (start - sharing.EPOCH).total_seconds()

    def simulated(self, now: float, wanted: set[str], growth: dict | None, median_s: float):
        """bench/estimates.py's *simulation* estimator, with the runs waiting for nodes held too: expected to
        start when their request's median is over (what forecast does with ``provisioning_since``), or now
        when provisioning is ignored."""
        spans = [(run.duration_s, self.limit(run)) for run in self.result.runs
                 if run.finished_at is not None and run.finished_at <= now]
        use = estimates.limit_use(spans)

        def expected(run: sharing.Run, start: float):
            limit = timedelta(seconds=self.limit(run))
            return estimates.expected_end(sharing.at(start), sharing.at(max(now, start)), limit,
                                          estimates.typical_time(limit, None, use))

        waiting_nodes = [(r.run, r.borrows, r.since) for r in self.requests] + [(run, b, now) for run, b in self.blocked]
        queue = sorted(self.queued, key=sharing.queue_key)
        pks = {run.ref: pk for pk, run in enumerate(
            sorted([*queue, *self.running, *(run for run, _b, _s in waiting_nodes)], key=sharing.queue_key), start=1)}
        cohort = self.figures
        holding = []
        for run in self.running:
            stopping = run.stopping_since is not None
            ends = sharing.at(run.stopping_since + self.setup.stop_s) if stopping else expected(run, run.started_at)
            holding.append(Holding(run.ref, cohort.ids[run.team], sharing.FLAVOR_ID, run.units, ends, run.borrowed,
                                   run.priority, sharing.at(run.started_at),
                                   None if stopping else cohort.entry(run, pks[run.ref]), stopping=stopping))
        for run, borrows, since in waiting_nodes:
            start = max(now, since + median_s) if growth is not None else now
            holding.append(Holding(run.ref, cohort.ids[run.team], sharing.FLAVOR_ID, run.units, expected(run, start),
                                   borrows, run.priority, sharing.at(since), cohort.entry(run, pks[run.ref])))
        waiting = [Waiting(cohort.entry(run, pks[run.ref]), expected(run, now) - sharing.at(now)) for run in queue]
        shared = Sharing(cohort.figures(self.usage), self.remembered(now), self.setup.rules,
                         timedelta(seconds=self.setup.stop_s))
        return simulate(sharing.at(now), holding, waiting, cohort.quotas, timedelta(seconds=self.setup.cycle_s),
                        shared, wanted, growth=growth)


def replay_round(setup: sharing.Setup, trace: list[dict], args: argparse.Namespace, seed: int) -> Figures:
    elastic = PoolReplay(setup, trace, args, seed)
    result = elastic.run()
    if result.broken:
        raise SystemExit(f"seed {seed}: invariants broken: " + "; ".join(result.broken[:5]))
    figures = elastic.stats
    cycle = setup.cycle_s
    for run in result.runs:
        start = elastic.first_start.get(run.ref)
        if start is None or run.ref not in elastic.waited_on_nodes:
            continue
        real = start - run.submit_s
        if real <= cycle:
            continue
        estimated = {name: elastic.fresh_estimates[name].get(run.ref) for name in ESTIMATORS}
        if any(estimate is None for estimate in estimated.values()):
            continue  # told "unknown" (nothing ahead has a known end): no error to count
        figures.waited_on_nodes += 1
        figures.waits.append(real)
        for name, estimate in estimated.items():
            figures.errors[name].append(abs(max(0.0, estimate - run.submit_s) - real) / real)
    # Billing follows running pods: the ledger's unit-hours over the spans each run's pods ran.
    for run in result.runs:
        for start, end, units in elastic.pod_spans.get(run.ref, []):
            figures.billed_unit_hours += interval_unit_hours(units, sharing.at(start), sharing.at(end))
    failed_runs = set()
    for run, since, failed in elastic.failed_spans:
        failed_runs.add(run.ref)
        for start, end, units in elastic.pod_spans.get(run.ref, []):
            low, high = max(start, since), min(end, failed)
            if high > low:
                figures.failed_billed_unit_hours += interval_unit_hours(units, sharing.at(low), sharing.at(high))
    figures.failed_gangs = len(failed_runs)
    figures.mean_wait_s = result.mean_wait_s
    fixed = PoolReplay(setup, trace, args, seed, fixed_nodes=figures.peak_nodes)
    fixed_result = fixed.run()
    figures.fixed_node_s, figures.fixed_busy_node_s = fixed.stats.node_s, fixed.stats.busy_node_s
    figures.fixed_mean_wait_s = fixed_result.mean_wait_s
    return figures


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-median", type=float, default=210, help="seconds: the provisioning delay's median")
    parser.add_argument("--delay-tail", type=float, default=900,
                        help="seconds: the delay's 0.99 quantile; draws are cut there")
    parser.add_argument("--fail", type=float, default=0.1, help="the probability that a request fails (0–1)")
    parser.add_argument("--unneeded", type=float, default=pools.DEFAULT_UNNEEDED_MINUTES,
                        help="minutes a node stands idle before it goes")
    parser.add_argument("--rounds", type=int, default=3, help="seeds replayed; figures are their median")
    parser.add_argument("--seed", type=int, default=52)
    parser.add_argument("--limit-slack", type=float, default=1.25)
    parser.add_argument("--limit-round", type=float, default=15)
    own, rest = parser.parse_known_args(argv)
    if "--node" not in rest:
        rest = [*rest, "--node", "2"]
    args = sharing.parse(rest)
    for name in ("delay_median", "delay_tail", "fail", "unneeded", "rounds", "seed", "limit_slack",
                 "limit_round"):
        setattr(args, name, getattr(own, name))
    if not (0 <= args.fail < 1) or args.delay_median <= 0 or args.delay_tail <= args.delay_median or args.rounds < 1:
        raise SystemExit("--fail must be in [0, 1), --delay-median positive, --delay-tail above the median, "
                         "--rounds at least 1")
    if args.capacity % args.node:
        raise SystemExit(f"--capacity ({args.capacity}) must be a whole number of --node ({args.node})")
    trace = sharing.read_trace(args.trace, args.quick)
    if not trace:
        raise SystemExit(f"{args.trace}: no runs")
    setup = sharing.make_setup(args, trace)
    rounds = [replay_round(setup, trace, args, args.seed + i) for i in range(args.rounds)]
    print(f"pools: {args.trace.name}{f' (quick: {args.quick:g} h)' if args.quick else ''}: {len(trace)} runs, cohort of "
          + ", ".join(f"{team}={setup.nominal[team]}" for team in setup.teams)
          + f" on an elastic pool of up to {setup.capacity // args.node} nodes × {args.node} {setup.flavor} "
          f"(atomic, unneeded {args.unneeded:g} min); provisioning delay log-normal, median {args.delay_median:g} s, "
          f"0.99 quantile {args.delay_tail:g} s (σ {sigma(args):.2f}), cut there; {args.fail:.0%} of requests fail; "
          f"{args.rounds} seed(s) from {args.seed}, figures are their median")
    per_round = "  ".join(f"seed {f.seed}: {f.requests} requests, {f.failed} failed, {f.waited_on_nodes} waited "
                          f"on nodes" for f in rounds)
    print(f"rounds: {per_round}")
    print(f"{'start estimates of runs that waited on new nodes':<52}" + "".join(f"{name:>20}" for name in ESTIMATORS))
    for label, figure in (("median relative error", lambda f, n: median(f.errors[n])),
                          ("p90 relative error", lambda f, n: quantile(f.errors[n], 0.9))):
        print(f"{label:<52}" + "".join(f"{median([figure(f, n) for f in rounds]):>20.1%}" for n in ESTIMATORS))
    print(f"{'runs that waited on new nodes (median of rounds)':<52}{median([f.waited_on_nodes for f in rounds]):>20g}")
    for label, low, high in (("  of them waiting 15 min or less", 0, 900), ("  of them waiting longer", 900, math.inf)):
        cells = "".join(f"{median([median([e for e, w in zip(f.errors[n], f.waits, strict=True) if low < w <= high]) for f in rounds]):>20.1%}"
                        for n in ESTIMATORS)
        count = median([sum(1 for w in f.waits if low < w <= high) for f in rounds])
        print(f"{label + f' ({count:g})':<52}" + cells)
    own, best = floor_error(args, args.seed)
    print(f"the floor for a wait that is all provisioning: the delay's median errs by {own:.1%} at the median against "
          f"its own draws, the best any single point could do {best:.1%}")
    failed_minutes = [float(f.failed_billed_unit_hours) * 60 for f in rounds]
    print(f"GPU-minutes billed for gangs whose atomic provisioning failed: {median(failed_minutes):g} "
          f"(max over rounds {max(failed_minutes):g}; {median([f.failed_gangs for f in rounds]):g} gangs, "
          f"{median([f.failed for f in rounds]):g} failed requests); all runs billed "
          f"{median([float(f.billed_unit_hours) for f in rounds]):,.1f} GPU-hours")
    print(f"{'':<40}{'elastic':>14}{'fixed at its peak':>20}")
    for label, elastic, fixed in (
            ("nodes (peak)", lambda f: f"{f.peak_nodes}", lambda f: f"{f.peak_nodes}"),
            ("node-hours up", lambda f: f"{f.node_s / 3600:,.1f}", lambda f: f"{f.fixed_node_s / 3600:,.1f}"),
            ("idle node-hours", lambda f: f"{f.idle_node_hours:,.1f}", lambda f: f"{f.fixed_idle_node_hours:,.1f}"),
            ("mean queue wait (min)", lambda f: f"{f.mean_wait_s / 60:.1f}", lambda f: f"{f.fixed_mean_wait_s / 60:.1f}")):
        middle = len(rounds) // 2
        ordered = sorted(rounds, key=lambda f: f.idle_node_hours)
        print(f"{label:<40}{elastic(ordered[middle]):>14}{fixed(ordered[middle]):>20}")
    with_median = median([median(f.errors[ESTIMATORS[0]]) for f in rounds])
    billed = max(failed_minutes)
    idle = median([f.idle_node_hours for f in rounds]), median([f.fixed_idle_node_hours for f in rounds])
    print("targets:" + (" (quick run: not judged)" if args.quick else ""))
    for label, figure, met in (
            (f"start-estimate median |error| <= {TARGET_MEDIAN:.0%} (waited on new nodes)", f"{with_median:.1%}",
             with_median <= TARGET_MEDIAN),
            ("GPU-minutes billed for failed atomic gangs = 0", f"{billed:g}", billed == 0),
            ("idle node-hours: elastic below the fixed pool of its peak", f"{idle[0]:,.1f} vs {idle[1]:,.1f}",
             idle[0] < idle[1])):
        print(f"  {label:<66} {figure:>16}  {'' if args.quick else 'PASS' if met else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
