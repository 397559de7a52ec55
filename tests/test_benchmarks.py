"""Every benchmark of ``make bench`` runs to its end, on small sizes and short phases.

A benchmark is only run by hand, so one that no longer matches the code (a new column its
seed does not fill, a backend method its stand-in lacks) would otherwise be found broken on
the day its figures are needed. Each runs here as ``make bench`` runs it — its own process,
its own scratch database on the PostgreSQL of ``DATABASE_URL`` — and must print its figures.
The figures themselves are not judged here (timing in tests flakes): BENCHMARKS.md keeps them.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests import db_template

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

#: script, arguments for a short run, a line its report must print
BENCHMARKS = [
    # Phases of a few milliseconds: every benchmark does one request (or cycle) per client at least.
    ("admission.py", ["--threads", "2", "--seconds", "0.05", "--quick"], "lock cost: locked / unlocked ="),
    # The trace's first 16 hours: 70 runs and 12 preemptions in the replay, in a third of the 48 hours' time.
    ("estimates.py", ["--quick", "16"], "median relative error"),
    ("gateway.py", ["--seconds", "0.05", "--rounds", "1", "--clients", "2", "--revocations", "1"],
     "revocation seen by both gateways"),
    # One run per team: the smoke proves the phases run and print, not the lists' cost (seeding 50 took most of its time).
    ("api.py", ["--clients", "2", "--seconds", "0.05", "--warmup", "0.05", "--rounds", "2", "--runs", "1"],
     "create endpoint"),
    ("profile_api.py", ["--requests", "3", "--top", "3"], "statements per request"),
    ("reconcile_clusters.py", ["--clusters", "2", "--workloads", "20", "--rounds", "1", "--timeout", "0.5"],
     "targets:"),
    ("reconcile_db.py", ["--sizes", "20"], "steady"),
    ("reconcile_scale.py", ["--sizes", "20"], "targets:"),
    ("sandbox_tick.py", ["--sizes", "20", "--shared"], "steady"),  # the shared GPUs too
    ("sharing.py", ["--quick"], "invariants: held at"),
    # The trace's first 16 hours (70 runs, about 18 of them waiting on new nodes), one seed.
    ("pools.py", ["--quick", "16", "--rounds", "1"], "GPU-minutes billed for gangs whose atomic provisioning failed"),
    # 9 trials of 400 steps, 3 at a time: ASHA and median both prune, the cap stops launching (tests/sweeps/test_bench.py).
    ("sweeps.py", ["--trials", "9", "--parallel", "3", "--steps", "400"], "prune disagreements with a pure Optuna study"),
    # The trace's first 12 hours, replayed four times (targeted, open, unbooked, the trace alone) in each of two
    # rounds: the size of the in-process test below, which reads its lines (its 48-hour quick run took 3× as long
    # and was read for one line).
    ("reservations.py", ["--quick", "12", "--rounds", "2"], "targets (the medians of the rounds"),
    ("telemetry.py", ["--quick"], "points/s through the API and through stdout"),
]


def test_every_benchmark_under_bench_is_listed_here():
    assert sorted(script for script, _args, _line in BENCHMARKS) == sorted(
        path.name for path in (ROOT / "bench").glob("*.py"))


#: bench/admission.py's TEMPLATE_ENV: the migrated database each benchmark's scratch database copies.
TEMPLATE_ENV = "SLIPWAY_BENCH_TEMPLATE_DB"
#: The server the benchmarks use without a PostgreSQL DATABASE_URL (bench/admission.py DEFAULT_URL).
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/test"


def _server(url: str):
    import psycopg

    parts = urlsplit(url)
    return psycopg.connect(host=parts.hostname, port=parts.port or 5432, user=parts.username or "postgres",
                           password=parts.password, dbname="postgres", autocommit=True)


@pytest.fixture(scope="module")
def migrated_template(django_db_setup, tmp_path_factory):
    """A migrated database for every benchmark of the module to copy (``CREATE DATABASE … TEMPLATE``): each
    would otherwise migrate a scratch database of its own from nothing. Under xdist on PostgreSQL, the run's
    template (tests/db_template.py), which this worker's own test database was copied from; else one
    migrated here."""
    from django.conf import settings

    if db_template.template() and db_template.is_postgres(settings.DATABASES["default"]):
        yield db_template.template()
        return
    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith(("postgres://", "postgresql://")):
        base = DEFAULT_URL
    parts = urlsplit(base)
    name = f"{parts.path.lstrip('/') or 'postgres'}_bench_template"
    with _server(base) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    env = {key: value for key, value in os.environ.items() if key not in ("DJANGO_SETTINGS_MODULE", "REDIS_URL")}
    env.update(DATABASE_URL=urlunsplit(parts._replace(path=f"/{name}")), DJANGO_SETTINGS_MODULE="portal.settings",
               DEBUG="true", SLIPWAY_VAR_DIR=str(tmp_path_factory.mktemp("bench-template")))
    subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True,
                   timeout=240)
    yield name
    with _server(base) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize(("script", "args", "line"), BENCHMARKS, ids=[b[0] for b in BENCHMARKS])
def test_the_benchmark_runs_and_prints_its_figures(script, args, line, migrated_template, tmp_path):
    # As `make bench` runs it: production settings, not the test suite's; the scratch
    # databases are named after DATABASE_URL's (``<name>_bench_…``), never the suite's own.
    env = {key: value for key, value in os.environ.items() if key not in ("DJANGO_SETTINGS_MODULE", "DEBUG")}
    # Its temporary files in a directory watched here: a run leaves none behind (six benchmarks left their var
    # directory, one a SQLite copy, in /tmp on every run).
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env["TMPDIR"] = str(temporary)
    env["SLIPWAY_BENCH_REDIS_URL"] = "redis://127.0.0.1:6379/13"
    env[TEMPLATE_ENV] = migrated_template
    env["SLIPWAY_BENCH_SQLITE_TEMPLATE"] = str(db_template.migrated_sqlite())  # bench/sandbox_tick.py's
    result = subprocess.run([sys.executable, f"bench/{script}", *args], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert line in result.stdout, result.stdout[-3000:]
    assert sorted(path.name for path in temporary.iterdir()) == []


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def _sharing_bench():
    return _bench("sharing")


@pytest.mark.parametrize("limits", ["", "team-a=2,team-c=1"], ids=["unlimited", "borrowing-limits"])
def test_the_sharing_bench_prints_its_figures_and_keeps_the_invariants_at_every_sample(limits, capsys):
    """bench/sharing.py on its quick trace: the figures are printed (victims by work lost and by
    recency side by side), and at every simulated cycle
    no team holds more than its nominal quota plus what it may borrow, the cohort never more than
    its nominal quotas, a walled team never more than its own — and the cohort did borrow."""
    handlers = list(logging.getLogger().handlers)
    sharing = _sharing_bench()
    # Loaded in this process, it must not set Django up again: that would bind the log handlers to
    # this test's captured stderr, closed when the test ends, and break every later log line here.
    assert logging.getLogger().handlers == handlers
    args = ["--quick", "--borrowing-limit", limits] if limits else ["--quick"]
    assert sharing.main(args) == 0
    out = capsys.readouterr().out
    for figure in ("utilization", "fair-share error", "preemptions", "lost GPU-hours", "mean queue wait",
                   "team-a", "team-b", "team-c", "targets:"):
        assert figure in out, out
    setup, _trace, (cohort, recency, foresight, walls) = sharing.simulate(sharing.parse(args))
    nominal = setup.nominal
    lends = sum(nominal.values())
    ceiling = {team: nominal[team] + min(setup.borrowing_limit[team] if setup.borrowing_limit[team] is not None
                                         else lends, lends - nominal[team]) for team in nominal}
    assert cohort.samples and walls.samples
    for sample in cohort.samples + recency.samples + foresight.samples:
        assert sum(sample.values()) <= lends
        assert all(sample[team] <= ceiling[team] for team in nominal), sample
    for sample in walls.samples:
        assert all(sample[team] <= nominal[team] for team in nominal), sample
    # Not vacuous: teams went above their nominal quota, up to a borrowing limit where there is one.
    assert any(sample[team] > nominal[team] for sample in cohort.samples for team in nominal)
    if limits:
        assert max(sample["team-a"] for sample in cohort.samples) == ceiling["team-a"] == nominal["team-a"] + 2
    assert cohort.preemptions > 0 and not cohort.broken and not walls.broken
    # Both victim orders replayed (issue #24's comparison), each keeping the invariants.
    assert recency.preemptions > 0 and not recency.broken
    assert foresight.preemptions > 0 and not foresight.broken
    assert "the best any victim order could do" in out, out
    assert "shared GPUs: 24 light endpoints" in out and "physical GPU-hours whole / time-sliced" in out, out
    assert "lost GPU-hours fall by at least half against recency" in out, out


def test_the_sharing_bench_serves_light_endpoints_on_a_third_of_the_physical_gpus(capsys):
    """Issue 37: the same light inference demand on whole T4s and on time-sliced ×4 T4s, side by side —
    at least 3× fewer physical GPU-hours shared, the time-sliced replicas sized on their guaranteed quarter
    (so more of them at peak: not 4× by construction), the model fitting the memory 4 pods share."""
    sharing = _sharing_bench()
    whole, shared = sharing.shared_mix(sharing.parse([]))
    assert (whole.flavor.gpu_fraction, shared.flavor.gpu_fraction) == (1, Decimal("0.25"))
    assert whole.unit_hours == whole.physical_gpu_hours == 24 * 24  # one whole T4 per endpoint, all day
    assert shared.unit_hours > whole.unit_hours  # busy hours need a second quarter for some endpoints
    assert shared.physical_gpu_hours == shared.unit_hours / 4 and shared.peak_replicas > whole.peak_replicas
    assert whole.physical_gpu_hours >= 3 * shared.physical_gpu_hours
    assert shared.cost == shared.unit_hours * Decimal("0.10") and whole.cost == whole.unit_hours * Decimal("0.40")
    assert shared.warnings == () and shared.peak_gpus < whole.peak_gpus
    # A model too large for 4 pods on one 16 GB GPU is warned about and fails the target.
    crowded = sharing.parse(["--model-gb", "5"])
    assert sharing.shared_mix(crowded)[1].warnings
    assert not sharing.report_mix(crowded, sharing.shared_mix(crowded), quick=False)
    assert "FAIL" in capsys.readouterr().out


def test_the_reservations_bench_prints_targeted_and_open_bookings_beside_the_runs_unbooked(capsys):
    """Issue 49: bench/reservations.py on the trace's first 12 hours, two rounds — per booking mode (targeted,
    open) the booked runs' start delay p50 / p95 with the target and whether it is met, the reserved capacity used,
    and utilization, fair-share error and the others' mean wait beside the same runs unbooked and the trace
    alone: each printed, each a figure that can be (not the targets: a quick run does not judge them)."""
    import re

    reservations = _bench("reservations")
    assert reservations.main(["--quick", "12", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "each figure the median of 2 rounds (seeds 49, 50)" in out, out
    assert ("the order rotating: targeted, open, unbooked, trace; open, unbooked, trace, targeted" in out), out
    assert re.search(r"^ +targeted +open +unbooked +trace$", out, re.M), out
    for line in ("utilization (all work)", "holder start delay p95 (s)", "preemptions by windows",
                 "invariants: held at"):
        assert line in out, out
    for mode in ("targeted", "open"):
        block = out[out.index(f"\n{mode} bookings ("):]
        p50, p95 = map(float, re.search(r"booked runs p50 / p95 +(\d+) / (\d+) s", block).groups())
        assert 0 <= p50 <= p95
        assert re.search(r"target: p95 <= notice \+ one cycle \(35 s\) +(met|not met)\n", block), block
        assert 0 < float(re.search(r"reserved capacity used +([\d.]+)%", block).group(1)) <= 100
        utilization = re.search(r"utilization \(all work\) +([\d.]+) \(unbooked ([\d.]+), the trace alone ([\d.]+)\)",
                                block).groups()
        assert all(0 < float(value) <= 1 for value in utilization), utilization
        fair = re.search(r"fair-share error \(all work\) +([\d.]+)% \(unbooked ([\d.]+)%, the trace alone "
                         r"([\d.]+)%\)", block).groups()
        assert all(0 <= float(value) < 100 for value in fair), fair
        waits = re.search(r"the others' mean queue wait \(min\) +([\d.]+) \(unbooked ([\d.]+), the trace alone "
                          r"([\d.]+)\)", block).groups()
        assert all(float(value) >= 0 for value in waits), waits
        assert f"reserved windows, {mode}: " in out, out
        assert re.search(rf"  {mode}: holder start delay p95 <= grace \+ cycle \(35 s\) +\d+ s", out), out


def _pools_bench():
    return _bench("pools")


def test_the_pools_bench_bills_no_failed_gang_and_grows_within_its_max(capsys):
    """Issue 52: bench/pools.py's replay with half its provisioning requests failing — every run still ends, no
    node ever holds more than its units nor the pool more than its ``max``, the failed gangs ran no pod (0
    GPU-minutes billed by the ledger's rule over their requests' lives) while the others were billed, and the
    figures and targets are printed."""
    pools = _pools_bench()
    argv = ["--quick", "16", "--rounds", "1", "--fail", "0.5"]
    assert pools.main(argv) == 0
    out = capsys.readouterr().out
    for figure in ("median relative error", "with provisioning", "ignoring it", "idle node-hours", "targets:",
                   "the floor for a wait that is all provisioning"):
        assert figure in out, out
    parser_args = pools.sharing.parse(["--quick", "16", "--node", "2"])
    for name, value in {"delay_median": 210, "delay_tail": 900, "fail": 0.5, "unneeded": 10, "limit_slack": 1.25,
                        "limit_round": 15}.items():
        setattr(parser_args, name, value)
    trace = pools.sharing.read_trace(parser_args.trace, 16)
    setup = pools.sharing.make_setup(parser_args, trace)
    replay = pools.PoolReplay(setup, trace, parser_args, seed=52)
    peaks = []
    settle = replay.settle

    def watched(now):
        moved = settle(now)
        assert all(0 <= node.used <= node.units for node in replay.nodes)
        peaks.append(len(replay.nodes))
        return moved

    replay.settle = watched
    result = replay.run()
    assert not result.broken and all(run.finished_at is not None for run in result.runs)
    assert max(peaks) <= replay.max_nodes == 8
    failed = {run.ref for run, _since, _failed in replay.failed_spans}
    assert failed and replay.stats.failed >= len(failed)
    for run, since, ended in replay.failed_spans:  # no pod of a failed gang ran while its request was open
        assert not any(start < ended and end > since for start, end, _units in replay.pod_spans.get(run.ref, []))
    assert all(replay.pod_spans.get(ref) for ref in failed)  # …and each ran later, billed then
