"""CPU seconds per test module, printed at the end of a run (``-p tests.cpu_time``; CI loads it: scripts/test.sh).

On the 2-vCPU VM the suite keeps both cores busy (vmstat: 87 % user + system through a pass), so a test's
duration is mostly its wait for a core and ``--durations`` ranks tests by their neighbours' load as much as
by their own work. What a test costs the pass is its CPU: this process's, and that of the processes it started
and waited for (``RUSAGE_CHILDREN`` grows when a child is reaped, so a fixture's server counts in the test whose
teardown stops it; a child nobody waited for is reaped when its ``Popen`` is collected, in whatever test runs then:
on 2026-11-29 the workspaces' manifest tests, which start no process, were charged ~40 s that way. The first
column is exact; read the second by module and with that in mind). PostgreSQL's backends, Redis and a browser left running are not counted: on 2026-11-29 they
were about a fifth of the CPU a pass used (docs/operations.md "What the suite costs").

Each phase's figure travels in its report's ``user_properties``, so the controller of an xdist run sums its
workers' tests as well as a single process's.
"""

from __future__ import annotations

import resource
from collections import defaultdict

import pytest

PROPERTY = "cpu_seconds"
SHOWN = 20

_mark: dict[str, float] = {}
_by_module: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # module -> [own, children]


def _now() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def pytest_runtest_logstart(nodeid: str, location) -> None:
    _mark[nodeid] = _now()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    then = _mark.get(item.nodeid)
    if then is None:
        return
    now = _now()
    _mark[item.nodeid] = now
    report.user_properties.append((PROPERTY, (now[0] - then[0], now[1] - then[1])))


def pytest_runtest_logreport(report) -> None:
    for name, value in report.user_properties:
        if name == PROPERTY:
            sums = _by_module[report.nodeid.split("::")[0]]
            sums[0] += value[0]
            sums[1] += value[1]


def pytest_terminal_summary(terminalreporter) -> None:
    if not _by_module:
        return
    rows = sorted(_by_module.items(), key=lambda item: -sum(item[1]))
    own, children = (sum(sums[i] for _m, sums in rows) for i in (0, 1))
    terminalreporter.section("CPU seconds by module (tests/cpu_time.py)")
    terminalreporter.write_line(f"all {len(rows)} modules: {own + children:,.0f} s "
                                f"({own:,.0f} in the test processes, {children:,.0f} in processes they waited for)")
    for module, (mine, theirs) in rows[:SHOWN]:
        terminalreporter.write_line(f"{mine + theirs:8.1f} s  {module}  ({mine:.1f} + {theirs:.1f})")
