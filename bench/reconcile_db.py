"""Database side of a reconcile cycle on PostgreSQL: N running runs billed every cycle.

Run ``.venv/bin/python bench/reconcile_db.py [--sizes 100,1000]``. Like bench/admission.py it
uses a scratch database next to ``DATABASE_URL`` (or ``postgres://postgres@127.0.0.1:5432/test``)
and drops it at the end.

For each size it submits that many 1-GPU runs, applies them to a scripted in-memory cluster
(tests/jobs/fakes.py, so no cluster time is counted) and marks them running, then times
steady cycles — every run keeps running and is billed for the interval — twice in the same
run:

* **batched**: what the reconciler does, the runs that only keep running billed per batch of
  ``jobs.reconcile.STEADY_BATCH`` (one transaction, one conditional UPDATE per run, one ledger
  statement);
* **per run**: every run through the one-transaction-per-run path that state changes use
  (BEGIN, UPDATE, ledger upsert, COMMIT for each).

Prints the median wall time of a cycle (3 cycles each) and the ratio. The reconcile interval
is 5 s by default: a cycle must stay well below it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from admission import DEFAULT_URL, recreate_database  # noqa: E402


def scratch_url(url: str) -> tuple[str, str]:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/') or 'postgres'}_bench_reconcile_db"
    return urlunsplit(parts._replace(path=f"/{name}")), name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000")
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
    os.environ.pop("REDIS_URL", None)
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        rows = [(size, *measure(size)) for size in sizes]
    finally:
        from django.db import connections

        connections.close_all()
        recreate_database(base_url, name, drop_only=True)
    print("PostgreSQL, one steady reconcile cycle (every run running and billed), median of 3, wall:")
    for size, batched, per_run in rows:
        print(f"  {size:6,d} running runs: batched {batched:6.2f} s   per run {per_run:6.2f} s   "
              f"ratio {per_run / batched:4.1f}x")


def measure(size: int) -> tuple[float, float]:
    """Median wall seconds of a steady cycle for ``size`` running runs: (batched, per run)."""
    import logging
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from jobs import reconcile as rec
    from jobs.models import TrainingRun
    from jobs.services import submit_run
    from jobs.tasks import create_run_resources
    from portal import queueing
    from portal.models import Role
    from quotas.demo import seed_flavors, seed_team_quotas
    from tests.factories import add_member, make_team, make_user
    from tests.jobs.fakes import FakeBackend

    logging.getLogger("jobs.reconcile").setLevel(logging.WARNING)
    queueing.publish = rec.publish = lambda *args, **kwargs: True  # no broker: tasks are called directly
    seed_flavors()
    team, user = make_team(f"bench-{size}"), make_user(f"bench-{size}")
    add_member(team, user, Role.MEMBER)
    seed_team_quotas(team, {"l4": size}, Decimal("9000000"))
    backend = FakeBackend()
    import portal.cluster

    portal.cluster.get_backend = lambda: backend
    for i in range(size):
        run = submit_run(user, team, {"name": f"r{i}", "image": "registry.example.com/ml/trainer:1.4",
                                      "command": ["python", "train.py"], "flavor": "l4", "gpus_per_worker": 1})
        create_run_resources(run.pk)
    t0 = timezone.now().replace(microsecond=0)
    for run in TrainingRun.objects.filter(team=team):
        backend.set_running(run.namespace, run.cluster_name, units=1, started=t0.strftime("%Y-%m-%dT%H:%M:%SZ"))
    clock = iter(range(1, 1000))

    def cycle() -> float:
        started = time.perf_counter()
        report = rec.reconcile(backend, now=t0 + timedelta(seconds=5 * next(clock)))
        elapsed = time.perf_counter() - started
        assert report.charged == size, report
        return elapsed

    cycle()  # the first sighting
    batched = statistics.median(cycle() for _ in range(3))
    steady = rec._Plan.steady
    rec._Plan.steady = property(lambda plan: False)  # every run through the per-run path
    try:
        per_run = statistics.median(cycle() for _ in range(3))
    finally:
        rec._Plan.steady = steady
    return batched, per_run


if __name__ == "__main__":
    main()
