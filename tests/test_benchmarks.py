"""Every benchmark of ``make bench`` runs to its end, on small sizes and short phases.

A benchmark is only run by hand, so one that no longer matches the code (a new column its
seed does not fill, a backend method its stand-in lacks) would otherwise be found broken on
the day its figures are needed. Each runs here as ``make bench`` runs it — its own process,
its own scratch database on the PostgreSQL of ``DATABASE_URL`` — and must print its figures.
The figures themselves are not judged here (timing in tests flakes): BENCHMARKS.md keeps them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

#: script, arguments for a short run, a line its report must print
BENCHMARKS = [
    ("admission.py", ["--threads", "2", "--seconds", "0.3"], "lock cost: locked / unlocked ="),
    ("api.py", ["--clients", "2", "--seconds", "0.3", "--warmup", "0.2", "--rounds", "2"], "create endpoint"),
    ("profile_api.py", ["--requests", "3", "--top", "3"], "statements per request"),
    ("reconcile_db.py", ["--sizes", "20"], "steady"),
    ("reconcile_scale.py", ["--sizes", "20"], "targets:"),
    ("sandbox_tick.py", ["--sizes", "20"], "steady"),
]


def test_every_benchmark_under_bench_is_listed_here():
    assert sorted(script for script, _args, _line in BENCHMARKS) == sorted(
        path.name for path in (ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize(("script", "args", "line"), BENCHMARKS, ids=[b[0] for b in BENCHMARKS])
def test_the_benchmark_runs_and_prints_its_figures(script, args, line):
    # As `make bench` runs it: production settings, not the test suite's; the scratch
    # databases are named after DATABASE_URL's (``<name>_bench_…``), never the suite's own.
    env = {key: value for key, value in os.environ.items() if key not in ("DJANGO_SETTINGS_MODULE", "DEBUG")}
    env["SLIPWAY_BENCH_REDIS_URL"] = "redis://127.0.0.1:6379/13"
    result = subprocess.run([sys.executable, f"bench/{script}", *args], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert line in result.stdout, result.stdout[-3000:]
