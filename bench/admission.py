"""Benchmark: what the team's admission lock costs, on PostgreSQL (the same cycle with and without it).

Run ``.venv/bin/python bench/admission.py [--threads 8] [--seconds 5]``. It uses the server
at ``DATABASE_URL`` when that names PostgreSQL (otherwise
``postgres://postgres@127.0.0.1:5432/test``), creates its own
scratch database ``<name>_bench_admission`` there, migrates it and
drops it at the end.

``decide()`` stays in Python as the one place for admission's rules, so admission is judged
by what its lock costs and by the end-to-end submit throughput (``bench/api.py``), not
against bare SQL. Measured, each with N threads (own connection each) started together:

* **admission**: one cycle = ``admit()`` of a 1-GPU request (lock the team's Team row,
  idempotency check, sum holds, budget, insert) + ``release()`` (update + queue delete);
  once with one team per thread (the shared platform's case) and once with every thread in
  the *same* team (all cycles serialise on that team's lock: the worst case);
* **without the lock**: the one-team-per-thread cycle with the ``FOR NO KEY UPDATE`` taken
  out of its lock statement (unsafe: it may over-admit; measured only to isolate what the
  lock itself costs from what the checks cost). **Target: locked / unlocked ≥ 0.9.**
* **inside cohorts** (issue 23): the threads' teams in cohorts of two, so an admission also
  takes its cohort's row lock (after the team's) and reads both members' figures; against the
  same cycle without either lock. **Target: ≥ 0.8.**
* for reference, **bare SQL**: the same hold row written with no lock or check
  (``INSERT`` then ``UPDATE … SET released_at``) — the floor any admission sits on.

Then, single-threaded, the time of one admission as the team's month of ledger grows (the
budget check sums it): empty; a month of 10 workloads at one row per hour (7,200 rows, the
ledger's granularity); and one workload's month at one row per 5 s reconcile interval
(518,400 rows, what a per-interval ledger would hold).

Runs with ``DEBUG=false`` unless set, as in production: with DEBUG on, Django records every
query, which costs the statement-heavier admission cycle more than the baseline.

Where the time goes (2026-11-22, the 2-core development VM, single thread, CPU per cycle):
bare SQL is 2 autocommit statements, ~0.27 ms in Python and ~0.38 ms in PostgreSQL;
admission + release is 6 round trips (BEGIN, lock, facts, insert, COMMIT, release), ~1.0 ms
in Python and ~1.4 ms in PostgreSQL. The lock's own cost is within the noise: different
teams never wait for each other, and the row lock is a single index lookup.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/test"
#: Rounds of locked and unlocked cycles (each a median), the order rotating every round.
ROUNDS = 4


def scratch_url(url: str) -> tuple[str, str]:
    """The URL of the scratch database next to ``url``'s, and that database's name."""
    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/') or 'postgres'}_bench_admission"
    return urlunsplit(parts._replace(path=f"/{name}")), name


#: A migrated database each scratch database starts as a copy of, when set (tests/test_benchmarks.py
#: migrates one for all the benchmarks it runs): the benchmark's own ``migrate`` then has nothing to do.
TEMPLATE_ENV = "SLIPWAY_BENCH_TEMPLATE_DB"


def scratch_dir(prefix: str) -> Path:
    """A directory of the benchmark's own (its var files: sandbox, broker, a SQLite copy), removed when its process
    exits: every run made one and left it behind."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def recreate_database(url: str, name: str, drop_only: bool = False) -> None:
    import psycopg

    parts = urlsplit(url)
    with psycopg.connect(
        host=parts.hostname,
        port=parts.port or 5432,
        user=parts.username or "postgres",
        password=parts.password,
        dbname="postgres",
        autocommit=True,
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not drop_only:
            template = os.environ.get(TEMPLATE_ENV)
            conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))


def run_threads(threads: int, seconds: float, cycle) -> float:
    """Run ``cycle(thread_index, i)`` in a loop on ``threads`` threads for ``seconds``; cycles per second."""
    from django.db import connection

    barrier = threading.Barrier(threads + 1)
    counts = [0] * threads
    stop = threading.Event()

    def worker(index: int) -> None:
        try:
            cycle(index, -1)  # warm up: open this thread's connection before the clock starts
            barrier.wait()
            i = 0
            while True:  # one cycle at least, however short the run (the smoke test's are 0.1 s)
                cycle(index, i)
                i += 1
                if stop.is_set():
                    break
            counts[index] = i
        finally:
            connection.close()

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in pool:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true",
                        help="ledgers of 1/100 the rows, 30 cycles each (the test suite's run: the figures mean little)")
    args = parser.parse_args()

    # The figures only mean something on PostgreSQL: a non-PostgreSQL DATABASE_URL (the
    # local SQLite default) falls back to the standard local server.
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url.startswith(("postgres://", "postgresql://")):
        base_url = DEFAULT_URL
    url, name = scratch_url(base_url)
    recreate_database(base_url, name)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
    os.environ.setdefault("SLIPWAY_SECRET_KEYS", "YmVuY2gtb25seS1ub3QtYS1zZWNyZXQta2V5LTAwMDA=")  # required with DEBUG off
    try:
        import django

        django.setup()
        figures = measure(args.threads, args.seconds, quick=args.quick)
    finally:
        from django.db import connections

        connections.close_all()
        recreate_database(base_url, name, drop_only=True)
    report(args.threads, figures)


def measure(threads: int, seconds: float, quick: bool = False) -> dict[str, float]:
    from decimal import Decimal

    from django.core.management import call_command
    from django.db import connection

    from billing.models import QuotaHold
    from quotas.admission import admit, release
    from quotas.decide import ResourceRequest
    from quotas.demo import seed_flavors, seed_team_quotas
    from teams.models import Team

    def make_team(slug: str) -> Team:
        return Team.objects.create(slug=slug, name=slug)

    call_command("migrate", verbosity=0)
    seed_flavors()
    shared = make_team("bench-shared")
    own = [make_team(f"bench-{n}") for n in range(threads)]
    for team in [shared, *own]:
        # Enough quota that no cycle queues, and a budget so its check is part of the cost.
        seed_team_quotas(team, {"a100-80gb": 1000, "l4": 1000}, monthly_budget=Decimal("1000000"))
    request = ResourceRequest("a100-80gb", 1, 1)

    def admission(team_of):
        def cycle(index: int, i: int) -> None:
            ref = f"t{index}:{i}:{id(team_of)}"
            decision = admit(team_of(index), request, ref)
            assert decision.admitted, decision
            release(ref)

        return cycle

    flavor_id = seed_flavors()[0].pk
    team_ids = [shared.pk]

    def baseline(index: int, i: int) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO quotas_quotahold (team_id, ref, flavor_id, units, units_per_node, priority, spot,"
                " description, created_at) VALUES (%s, %s, %s, 1, 1, 1, false, '', now()) RETURNING id",
                [team_ids[0], f"raw{index}:{i}", flavor_id],
            )
            (pk,) = cursor.fetchone()
            cursor.execute("UPDATE quotas_quotahold SET released_at = now() WHERE id = %s", [pk])

    # The lock's cost: the same cycle without the row lock (unsafe, it may over-admit; measured
    # only to isolate the lock from the checks), judged by the median of ROUNDS rounds each in
    # rotating order (paired below).
    # admit() takes the lock through teams.services.lock_team; the unlocked cycle reads the same
    # Team row in the same round trip, without FOR NO KEY UPDATE.
    from quotas import admission as module

    lock_team = module.lock_team

    def without_lock(team) -> None:
        list(Team.objects.filter(pk=team.pk).values_list("pk", flat=True))

    def paired(team_of, unlock, relock) -> tuple[float, float]:
        """Medians of locked and unlocked rounds, the order rotating each round: neither gains
        from running second (warmer caches, a quieter moment of a shared machine)."""
        locked, unlocked = [], []
        for round_ in range(ROUNDS):
            for which in ((True, False) if round_ % 2 == 0 else (False, True)):
                if which:
                    locked.append(run_threads(threads, seconds, admission(team_of)))
                    continue
                unlock()
                try:
                    unlocked.append(run_threads(threads, seconds, admission(team_of)))
                finally:
                    relock()
        return statistics.median(locked), statistics.median(unlocked)

    def unlock_team() -> None:
        module.lock_team = without_lock

    def relock_team() -> None:
        module.lock_team = lock_team

    outside = paired(lambda n: own[n], unlock_team, relock_team)
    # Inside cohorts (issue 23): the threads' teams in cohorts of two, so each admission also
    # takes its cohort's lock and reads both members' figures, and two threads share each
    # cohort's lock. Against the same cycle without either lock.
    from quotas import services as quota_services

    members = [make_team(f"bench-c{n}") for n in range(threads)]
    for team in members:
        seed_team_quotas(team, {"a100-80gb": 1000, "l4": 1000}, monthly_budget=Decimal("1000000"))
    for n in range(0, threads, 2):
        quota_services.set_cohort(None, f"bench-cohort-{n // 2}", teams=members[n:n + 2])
    lock_cohort = module._lock_cohort

    def unlock_both() -> None:
        module.lock_team, module._lock_cohort = without_lock, lambda cohort_id: None

    def relock_both() -> None:
        module.lock_team, module._lock_cohort = lock_team, lock_cohort

    inside = paired(lambda n: members[n], unlock_both, relock_both)
    figures = {
        "team_per_thread": outside[0],
        "unlocked": outside[1],
        "cohort_locked": inside[0],
        "cohort_unlocked": inside[1],
        "same_team": run_threads(threads, seconds, admission(lambda n: shared)),
        "baseline": run_threads(threads, seconds, baseline),
    }
    leaked = QuotaHold.objects.filter(released_at__isnull=True).count()
    assert leaked == 0, f"{leaked} holds were never released"
    figures["ledger"] = (ledger_latency(make_team, request, flavor_id, cycles=30, scale=100) if quick
                         else ledger_latency(make_team, request, flavor_id))
    return figures


#: (label, workloads, rows per workload, spacing): a month of ledger for one team.
LEDGER_SIZES = [
    ("empty ledger", 0, 0, "1 hour"),
    ("10 workloads x 720 hourly rows", 10, 720, "1 hour"),
    ("1 workload x 518,400 rows of 5 s", 1, 518_400, "5 seconds"),
]


def ledger_latency(make_team, request, flavor_id: int, cycles: int = 300, scale: int = 1) -> list[tuple[str, int, float]]:
    """Median milliseconds of one admit + release per ledger size: ``[(label, rows, ms)]`` (``scale``: rows / scale)."""
    from decimal import Decimal

    from django.db import connection

    from billing.ledger import month_start
    from quotas.admission import admit, release
    from quotas.demo import seed_team_quotas

    results = []
    for n, (label, workloads, rows, spacing) in enumerate(LEDGER_SIZES):
        rows //= scale
        team = make_team(f"ledger-{n}")
        seed_team_quotas(team, {"a100-80gb": 1000}, monthly_budget=Decimal("10000000"))
        with connection.cursor() as cursor:
            # All this month, so the budget check has to sum every row.
            cursor.execute(
                "INSERT INTO quotas_usagerecord (team_id, ref, flavor_id, hour, start, \"end\", units, spot,"
                " gpu_hours, cost, idle_gpu_hours, idle_cost, currency)"
                " SELECT %s, %s || w, %s, t, t, t + interval '1 second', 1, false, 0.001, 0.01, 0, 0, 'USD'"
                " FROM generate_series(1, %s) AS w,"
                " generate_series(%s::timestamptz, %s::timestamptz + (%s - 1) * %s::interval, %s::interval) AS t",
                [team.pk, f"ledger-{n}:w", flavor_id, workloads, month_start(), month_start(), rows, spacing, spacing],
            )
            cursor.execute("VACUUM ANALYZE quotas_usagerecord")  # as autovacuum would: index-only scans
        timings = []
        for i in range(cycles):
            ref = f"ledger-{n}:{i}"
            started = time.perf_counter()
            assert admit(team, request, ref).admitted
            release(ref)
            timings.append(time.perf_counter() - started)
        timings.sort()
        results.append((label, workloads * rows, 1000 * timings[len(timings) // 2]))
    return results


def report(threads: int, figures: dict[str, float]) -> None:
    locked, unlocked, base = figures["team_per_thread"], figures["unlocked"], figures["baseline"]
    ratio = locked / unlocked
    print(f"PostgreSQL, {threads} threads, admit + release cycles per second:")
    print(f"  admission, one team per thread          : {locked:9.1f}/s")
    print(f"  the same cycle without the lock (unsafe): {unlocked:9.1f}/s")
    print(f"  admission, all threads in one team      : {figures['same_team']:9.1f}/s   "
          f"(serialised on its lock, held through each commit: {figures['same_team'] / locked:.2f} of the above)")
    print(f"  bare SQL, no lock or checks (reference) : {base:9.1f}/s   (admission is {locked / base:.2f} of it)")
    print(f"lock cost: locked / unlocked = {ratio:.2f} (target >= 0.9: {'PASS' if ratio >= 0.9 else 'FAIL'})")
    in_locked, in_unlocked = figures["cohort_locked"], figures["cohort_unlocked"]
    in_ratio = in_locked / in_unlocked
    print(f"  in cohorts of two, team + cohort lock  : {in_locked:9.1f}/s")
    print(f"  the same cycle without either lock     : {in_unlocked:9.1f}/s")
    print(f"lock cost in a cohort: locked / unlocked = {in_ratio:.2f} "
          f"(target >= 0.8: {'PASS' if in_ratio >= 0.8 else 'FAIL'})")
    print("one admit + release, single thread, by the size of the team's month of ledger (median):")
    for label, rows, ms in figures["ledger"]:
        print(f"  {label:<39}: {rows:9,d} rows {ms:8.2f} ms")


if __name__ == "__main__":
    main()
