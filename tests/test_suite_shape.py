"""The suite's own bookkeeping: what scripts/test.sh selects by marker must exist."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import LANES, SQLITE_MODULES
from tests.settings import UIDS_PER_WORKER

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_the_sqlite_pass_names_exists():
    """A renamed or deleted module would drop out of the SQLite pass without a word."""
    missing = [path for path in SQLITE_MODULES if not (ROOT / path).is_file()]
    assert missing == []


def test_every_module_a_lane_names_exists_is_slow_and_is_in_one_lane():
    """A renamed module would fall back to the first lane without a word, and an unmarked one would
    run outside the lanes (the two 64-connection modules beside each other)."""
    listed = [path for modules in LANES.values() for path in modules]
    assert len(listed) == len(set(listed))
    missing = [path for path in listed if not (ROOT / path).is_file()]
    assert missing == []
    unmarked = [path for path in listed if "pytest.mark.slow" not in (ROOT / path).read_text()]
    assert unmarked == []


def test_every_module_that_opens_dozens_of_connections_is_marked_to_run_in_the_second_lane():
    """Two such modules at once pass PostgreSQL's 100 connections (tests/conftest.py ``lane``): a module with 32
    threads or more (``THREADS = N``, the races' convention) must be marked ``many_connections`` and ``slow``."""
    import re

    racing = {path.relative_to(ROOT).as_posix(): path.read_text() for path in (ROOT / "tests").rglob("test_*.py")
              if any(int(n) >= 32 for n in re.findall(r"^THREADS = (\d+)", path.read_text(), re.MULTILINE))}
    assert {"tests/quotas/test_concurrency.py", "tests/reservations/test_booking_race.py"} <= set(racing)
    unmarked = [path for path, text in racing.items()
                if "pytest.mark.many_connections" not in text or "pytest.mark.slow" not in text]
    assert unmarked == []


def test_a_many_connections_test_is_in_the_second_lane_wherever_it_is_listed():
    from types import SimpleNamespace

    from tests.conftest import lane

    racing = SimpleNamespace(nodeid="tests/x/test_race.py::test_it", keywords={"slow": 1, "many_connections": 1})
    plain = SimpleNamespace(nodeid="tests/x/test_race.py::test_it", keywords={"slow": 1})
    listed = SimpleNamespace(nodeid=f"{next(iter(LANES['processes-2']))}::test_it", keywords={"slow": 1})
    assert (lane(racing), lane(plain), lane(listed)) == ("processes-2", "processes", "processes-2")


def test_the_flush_deletes_every_referenced_table_before_the_tables_referencing_it():
    """So that a row a process adds beside the flush (a gateway's traffic row) is swept or refused, never left
    pointing at a deleted one (tests/conftest.py delete_flush)."""
    from django.apps import apps
    from django.db import connection

    from tests.conftest import parents_first

    tables = connection.introspection.django_table_names(only_existing=False)
    order = {table: n for n, table in enumerate(parents_first(tables))}
    assert sorted(order) == sorted(set(tables))
    late = [(model._meta.db_table, field.related_model._meta.db_table)
            for model in apps.get_models(include_auto_created=True) for field in model._meta.concrete_fields
            if field.is_relation and field.related_model not in (None, model)
            and order[field.related_model._meta.db_table] > order[model._meta.db_table]]
    assert late == []
    assert order["inference_inferenceendpoint"] < order["inference_trafficwindow"]


def test_a_flush_that_lost_a_race_to_a_writer_is_tried_again_and_nothing_else_is():
    import psycopg
    from django.db import DatabaseError, OperationalError

    from tests.conftest import retried_flush

    def failing(*causes):
        calls = []

        def flush(_ops, sql_list):
            calls.append(sql_list)
            if len(calls) <= len(causes):
                error = OperationalError("flush failed")
                error.__cause__ = causes[len(calls) - 1]
                raise error
            return "flushed"
        return flush, calls

    flush, calls = failing(psycopg.errors.DeadlockDetected(), psycopg.errors.ForeignKeyViolation())
    assert retried_flush(flush)(None, ["DELETE FROM x"]) == "flushed" and len(calls) == 3
    flush, calls = failing(psycopg.errors.UndefinedTable())
    with pytest.raises(DatabaseError):
        retried_flush(flush)(None, ["DELETE FROM x"])
    assert len(calls) == 1
    flush, calls = failing(*[psycopg.errors.DeadlockDetected()] * 3)
    with pytest.raises(DatabaseError):
        retried_flush(flush)(None, ["DELETE FROM x"])
    assert len(calls) == 3


BURNING = '''
import subprocess, sys, time

def burn(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass

def test_burns_in_this_process():
    burn(0.4)

def test_burns_in_a_child():
    subprocess.run([sys.executable, "-c", "import time\\nstart = time.process_time()\\n"
                    "while time.process_time() - start < 0.4: pass"], check=True)
'''


LANE = '''
import pytest
from test_burning import burn

@pytest.mark.xdist_group("lane-a")
@pytest.mark.parametrize("turn", [1, 2])
def test_burns_in_a_lane(turn):
    burn(0.3)
'''


@pytest.mark.parametrize("spread", [[], ["-n", "2", "--dist", "loadgroup"]], ids=["one process", "xdist"])
def test_ci_prints_the_cpu_seconds_of_each_module_its_own_and_its_childrens(tmp_path, spread):
    """tests/cpu_time.py (scripts/test.sh loads it in CI): a module that burns 0.4 s of CPU in its process and
    0.4 s in a child it waits for is listed with both, whether its tests ran in this process or on xdist workers;
    on xdist, each serial lane (an ``xdist_group``) is printed with the seconds its tests took, one after another."""
    import os
    import re
    import subprocess
    import sys

    (tmp_path / "test_burning.py").write_text(BURNING)
    (tmp_path / "test_idle.py").write_text("def test_idle():\n    pass\n")
    (tmp_path / "test_lane.py").write_text(LANE)
    env = {name: value for name, value in os.environ.items() if name != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.cpu_time", "-p", "no:cacheprovider",
                           "-p", "no:django", "--rootdir", str(tmp_path), "-q", *spread, str(tmp_path)],
                          cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CPU seconds by module (tests/cpu_time.py)" in done.stdout
    line = re.search(r"^ *([\d.]+) s  test_burning\.py  \(([\d.]+) \+ ([\d.]+)\)$", done.stdout, re.MULTILINE)
    assert line, done.stdout
    total, own, children = map(float, line.groups())
    assert own >= 0.4 and children >= 0.4 and total == pytest.approx(own + children, abs=0.11)
    assert re.search(r"^ *[\d.]+ s  test_idle\.py ", done.stdout, re.MULTILINE), done.stdout
    assert "all 3 modules:" in done.stdout
    machine = re.search(r"^the machine over the pass: cores (\d+) % busy, (\d+) % idle, ([\d.]+) % stolen by its "
                        r"host; the reference work \(tests/cpu_time.py reference_work\) ([\d.]+) s", done.stdout,
                        re.MULTILINE)
    assert machine, done.stdout
    busy, idle, stolen, seconds = map(float, machine.groups())
    assert busy > 0 and busy + idle + stolen == pytest.approx(100, abs=1.5) and 0 < seconds < 10
    lanes = re.search(r"^serial lanes \(.*\): (.*)$", done.stdout, re.MULTILINE)
    if not spread:  # one process: no groups, no lanes
        assert lanes is None, done.stdout
        return
    assert lanes, done.stdout
    lane = re.fullmatch(r"lane-a ([\d.]+) s", lanes.group(1))
    assert lane and float(lane.group(1)) >= 0.6, done.stdout
    when = re.search(r"^when they ran \(.*\): (.*)$", done.stdout, re.MULTILINE)
    assert when, done.stdout
    spans = {name: (float(start), float(end)) for name, start, end in
             re.findall(r"([\w -]+?) ([\d.]+)-([\d.]+)(?:, |$)", when.group(1))}
    assert set(spans) == {"lane-a", "the other tests"}, when.group(1)
    start, end = spans["lane-a"]
    # Its two tests, 0.3 s of CPU each, one after the other: at least 0.6 s apart, less the print's rounding of
    # both ends to a tenth (4.04-4.63 s prints as 4.0-4.6, which reads back as 0.5999…).
    assert start >= 0 and end - start >= 0.6 - 0.1, spans


def test_the_machines_shares_are_read_from_the_cpu_counters_between_two_readings(tmp_path):
    """What CI prints of the machine (tests/cpu_time.py): the shares of the time between two readings of /proc/stat,
    steal apart (the host's), I/O wait with idle; a file that is not /proc/stat's shape reads as none."""
    from tests.cpu_time import cpu_counters, cpu_shares, machine_line

    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 20 400 10 0 0 0 0 0\ncpu0 50 0 10 200 5 0 0 0 0 0\n")
    before = cpu_counters(stat)
    stat.write_text("cpu  800 10 120 530 30 5 5 30 300 0\ncpu0 400 5 60 265 15 2 2 15 150 0\n")
    after = cpu_counters(stat)
    assert before == (100, 0, 20, 400, 10, 0, 0, 0) and after == (800, 10, 120, 530, 30, 5, 5, 30)
    # 1,000 ticks between them: 700 + 10 + 100 + 5 + 5 busy, 130 + 20 idle or waiting, 30 stolen (guest's 300 are in user).
    assert cpu_shares(before, after) == {"busy": 82.0, "idle": 15.0, "steal": 3.0}
    assert cpu_shares(after, after) == {}
    assert machine_line(before, after, 0.0912) == (
        "the machine over the pass: cores 82 % busy, 15 % idle, 3.0 % stolen by its host; the reference work "
        "(tests/cpu_time.py reference_work) 0.091 s, timed after the tests")
    stat.write_text("intr 1 2 3\n")
    assert cpu_counters(stat) is None and cpu_counters(tmp_path / "absent") is None
    assert machine_line(None, after, 0.0912).startswith("the machine: the reference work")


def _workspace_uid_base(env: dict[str, str], module: str = "tests.settings") -> tuple[int, dict[str, str]]:
    """The workspace uid base the settings ``module`` give a process started with ``env``, and the environment they
    leave for the processes it starts."""
    script = (f"import json, os, {module} as s; "
              "print(json.dumps([s.SLIPWAY_WORKSPACE_LOCAL_UID_BASE, dict(os.environ)]))")
    clean = {name: value for name, value in os.environ.items()
             if name not in ("PYTEST_XDIST_WORKER", "TESTS_WORKSPACE_USERS_OF", "SLIPWAY_WORKSPACE_LOCAL_UID_BASE")}
    out = subprocess.run([sys.executable, "-c", script], env={**clean, **env}, cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    base, environ = json.loads(out)
    return base, environ


def test_each_xdist_worker_runs_its_workspaces_as_users_no_other_process_uses():
    """Workspace N's server runs as uid BASE + N and its stop kills every process of that uid; every worker's database
    numbers its workspaces from the same sequence, so with one base one worker's teardown killed another's server as
    it started (CI, 2026-11-30). Each worker, and a run outside xdist, has a range of its own, away from the demo's
    (the production base), and a process a test starts keeps its test process's."""
    production, _ = _workspace_uid_base({}, module="portal.settings")  # the demo's of `make run` on this machine
    alone, _ = _workspace_uid_base({})
    gw0, inherited = _workspace_uid_base({"PYTEST_XDIST_WORKER": "gw0"})
    gw1, _ = _workspace_uid_base({"PYTEST_XDIST_WORKER": "gw1"})
    starts = sorted([production, alone, gw0, gw1])
    assert len(set(starts)) == 4
    assert all(later - earlier >= UIDS_PER_WORKER for earlier, later in itertools.pairwise(starts))
    started_by_gw0, _ = _workspace_uid_base({name: inherited[name] for name in (
        "PYTEST_XDIST_WORKER", "TESTS_WORKSPACE_USERS_OF", "SLIPWAY_WORKSPACE_LOCAL_UID_BASE")})
    assert started_by_gw0 == gw0
    assert production != settings.SLIPWAY_WORKSPACE_LOCAL_UID_BASE


def test_a_failed_test_with_a_worker_carries_the_workers_log(tmp_path):
    """tests/conftest.py ``pytest_runtest_makereport``: a test whose worker fixture is a ``WorkerProcess`` gets the
    worker's log (its tail) in its report when it fails — what a timeout in CI needs to be read."""
    from types import SimpleNamespace

    from tests.conftest import worker_logs
    from tests.e2e.conftest import WorkerProcess

    worker = WorkerProcess(tmp_path)
    worker.log_path.write_text("x" * 30_000 + "\nsweeps.tasks.advance_sweeps succeeded\n")
    item = SimpleNamespace(funcargs={"worker": worker, "team": object(), "unstarted": WorkerProcess(tmp_path / "no"),
                                     "lent": worker})
    [(name, log)] = worker_logs(item)
    assert name == "worker" and len(log) == 20_000 and log.endswith("advance_sweeps succeeded\n")
