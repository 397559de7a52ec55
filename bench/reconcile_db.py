"""Database side of a reconcile cycle on PostgreSQL: N running workloads, steady and at an hour boundary.

Run ``.venv/bin/python bench/reconcile_db.py [--sizes 100,1000,10000] [--rounds 5]``. Like
bench/admission.py it uses a scratch database next to ``DATABASE_URL`` (or
``postgres://postgres@127.0.0.1:5432/test``) and drops it at the end.

For each size it records that many running 1-GPU training runs of a budgeted team (writes in
bulk, the cluster's view of them prepared once: the observation is served from memory, so only
the portal's side of the cycle is timed), lets one cycle see them start, then times, in the
same run:

* **steady**: a cycle in the same hour, every run still running as it was — billing keeps open
  segments (billing/segments.py), so this cycle should write no workload or ledger row; its one
  write is the cluster's heartbeat (``fleet.services``: the observation raises the cluster row's
  ``last_seen``), counted apart;
* **floor**: what any cycle must pay whatever it does with them — one SELECT of the active
  workloads' shared columns (``workloads.cycle.reconcile._CYCLE_FIELDS``, as the cycle's snapshot
  reads them) plus building the observation list the backend's ``observe()`` returns (the
  ``ObservedWorkload`` objects with their Job and pod dicts, the cyclic GC paused as the cycle
  holds it);
* **hour boundary**: the cycle after the hour turns, which closes every run's segment (one
  conditional UPDATE per run, one ledger statement per batch of ``STEADY_BATCH``) — the
  amount of writing the previous design did on *every* cycle.

Steady cycle and floor are measured in ``--rounds`` rounds, the two in turn and the order
rotating from round to round (a shared VM's speed moves within a minute: a pair sees the same
machine); the ratio is the steady median over the floor median. Printed: medians, the ratio,
the rows written by a steady cycle, the hour boundary's time and writes.
Targets at the largest size: a steady cycle writes no row but its cluster's heartbeat (one UPDATE of
``fleet_cluster``, whatever the size) and costs <= 3x the floor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from admission import DEFAULT_URL, recreate_database  # noqa: E402


def scratch_url(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/') or 'postgres'}_bench_reconcile_db"
    return urlunsplit(parts._replace(path=f"/{name}")), name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=5, help="steady/floor rounds, the order rotating")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url.startswith(("postgres://", "postgresql://")):
        base_url = DEFAULT_URL
    url, name = scratch_url(base_url)
    recreate_database(base_url, name)
    os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="portal.settings")
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
    os.environ.setdefault("SLIPWAY_SECRET_KEYS", "YmVuY2gtb25seS1ub3QtYS1zZWNyZXQta2V5LTAwMDA=")  # required with DEBUG off
    os.environ.pop("REDIS_URL", None)
    # One cluster, as the cycle measured here has always had: the shipped sandbox inventory has two,
    # and a cycle given one prepared backend refuses to run over several clusters.
    os.environ.setdefault("SLIPWAY_SANDBOX_INVENTORY", str(ROOT / "tests" / "inventory.yaml"))
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        rows = [(size, *measure(size, args.rounds)) for size in sizes]
    finally:
        from django.db import connections

        connections.close_all()
        recreate_database(base_url, name, drop_only=True)
    print(f"PostgreSQL, one reconcile cycle with N running training runs (wall, median of {args.rounds} rounds;"
          " floor: SELECT of the shared columns + building the observation):")
    for size, steady, floor, ratios, steady_writes, boundary, boundary_writes in rows:
        print(f"  {size:6,d} running: steady {steady:6.3f} s, {steady_writes:,d} rows written (+ heartbeat), floor {floor:6.3f} s,"
              f" steady/floor {steady / floor:4.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f})   |   "
              f"hour boundary {boundary:6.3f} s, {boundary_writes:6,d} writes ({boundary / steady:4.1f}x steady)")
    size, steady, floor, _ratios, steady_writes = rows[-1][:5]
    verdict = "PASS" if steady <= TARGET_RATIO * floor and steady_writes == 0 else "FAIL"
    print(f"target: a steady cycle at {size:,d} writes no row but its cluster's heartbeat and costs <= {TARGET_RATIO:g}x"
          f" the floor: {steady_writes} other rows, {steady / floor:.2f}x ({steady:.3f} s / {floor:.3f} s) -> {verdict}")


#: A steady cycle's cost against the floor (see the module docstring).
TARGET_RATIO = 3.0
#: The heartbeat's statement: ``UPDATE "fleet_cluster" ...`` (fleet.services.answered).
HEARTBEAT = 'UPDATE "fleet_cluster"'


class PreparedCluster:
    """A backend whose observation is prepared once: the cycle's cluster side costs nothing here."""

    def __init__(self, observed):
        self.observed = observed

    def tick(self) -> None:
        pass

    def observe(self, resources):
        return self.observed

    def gpu_telemetry(self, observed) -> dict:
        return {}  # no metrics source: nothing is flagged idle, as with a cluster without Prometheus

    def capacity(self) -> list:
        return []  # no nodes to read: the cycle records none (its capacity refresh costs nothing here)

    def training(self):
        return None  # cannot tell its training API: the heartbeat's discovery keeps what the cluster had


def measure(size: int, rounds: int) -> tuple[float, float, list[float], int, float, int]:
    """(steady s, floor s, per-round ratios, rows a steady cycle wrote, hour-boundary s, its writes) for ``size`` runs."""
    import logging
    from datetime import timedelta
    from decimal import Decimal

    from django.db import connection
    from django.utils import timezone

    from billing.ledger import usage_hour
    from billing.models import QuotaHold
    from cluster.backends.base import ObservedWorkload
    from cluster.perf import gc_paused
    from fleet.models import GpuFlavor
    from fleet.services import clusters
    from jobs.models import TrainingRun
    from quotas.demo import seed_flavors, seed_team_quotas
    from teams.models import Role
    from tests.factories import add_member, make_team, make_user
    from tests.fakes import pod
    from workloads.cycle import reconcile as rec

    logging.getLogger("workloads.cycle.queue_step").setLevel(logging.WARNING)  # the report line each cycle logs
    seed_flavors()
    team, user = make_team(f"bench-{size}"), make_user(f"bench-{size}")
    add_member(team, user, Role.MEMBER)
    seed_team_quotas(team, {"l4": size}, Decimal("9000000"))  # budgeted: the budget step reads its month
    l4 = GpuFlavor.objects.get(name="l4")
    home = clusters()[0]  # where the runs were placed: every applied run names its cluster
    # Start 10 minutes into an hour, so the steady cycles stay within it.
    t0 = usage_hour(timezone.now()) - timedelta(hours=2) + timedelta(minutes=10)
    runs = TrainingRun.objects.bulk_create([
        TrainingRun(team=team, created_by=user, flavor=l4, name=f"r{i}", image="registry.example.com/ml/t:1",
                    command=["python", "train.py"], state="pending", admitted_at=t0, applied_at=t0, cluster=home)
        for i in range(size)], batch_size=2000)
    QuotaHold.objects.bulk_create([QuotaHold(team=team, ref=run.ref, flavor=l4, units=1, cluster=home) for run in runs],
                                    batch_size=2000)
    started = t0.strftime("%Y-%m-%dT%H:%M:%SZ")

    def observation(runs) -> list:
        """What the backend's observe() returns for ``runs``: each one's Job and its running pod."""
        observed = []
        for run in runs:
            job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": run.object_name},
                   "status": {"startTime": started, "active": 1}}
            # The team's namespace, not run.namespace: that reads the run's team, a query per run.
            observed.append(ObservedWorkload(team.namespace, run.object_name, team.slug, [job],
                                             [pod(run.object_name, "Running", 1)]))
        return observed

    backend = PreparedCluster(observation(runs))

    def cycle(at) -> tuple[float, int]:
        written = [0]

        def count_writes(execute, sql, params, many, context):
            # The heartbeat (one UPDATE of the cluster's row per cycle) is not the workloads' writing.
            verb = sql.lstrip()[:6].upper()
            if verb in ("UPDATE", "INSERT", "DELETE") and HEARTBEAT not in sql:
                written[0] += len(params) if many else 1
            elif verb == "WITH W" and " RETURNING 1)" in sql:  # several writes in one statement (core.writes)
                written[0] += sql.count(" RETURNING 1)")
            return execute(sql, params, many, context)

        with connection.execute_wrapper(count_writes):
            began = time.perf_counter()
            rec.reconcile(backend, now=at)
            elapsed = time.perf_counter() - began
        return elapsed, written[0]

    def floor() -> float:
        began = time.perf_counter()
        active = list(TrainingRun.objects.filter(state__in=TrainingRun.HOLDING_STATES).only(*rec._CYCLE_FIELDS)
                      .order_by())
        with gc_paused():
            observation(active)
        return time.perf_counter() - began

    cycle(t0 + timedelta(seconds=5))  # the first sighting: every run starts running
    steady, floors = [], []
    for round_ in range(rounds):
        # The pair's order rotates: whatever ran just before a measurement moves it.
        at = t0 + timedelta(seconds=5 * (round_ + 2))
        if round_ % 2:
            floors.append(floor())
            steady.append(cycle(at))
        else:
            steady.append(cycle(at))
            floors.append(floor())
    hours = [cycle(usage_hour(t0) + timedelta(hours=h, seconds=1)) for h in (1, 2, 3)]  # each turns an hour
    # Out of the next size's way: its prepared cluster does not show these, which would fail them.
    TrainingRun.objects.filter(team=team).update(state="succeeded")
    QuotaHold.objects.held().filter(team=team).update(released_at=timezone.now(), open_units=0)
    return (statistics.median(s for s, _ in steady), statistics.median(floors),
            [s / f for (s, _), f in zip(steady, floors, strict=True)], max(w for _, w in steady),
            statistics.median(s for s, _ in hours), max(w for _, w in hours))


if __name__ == "__main__":
    main()
