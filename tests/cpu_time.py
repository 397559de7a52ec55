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

It also prints each serial lane's length (tests/conftest.py ``LANES``): the wall seconds of its tests, which
one worker runs one after another, and its modules' share of it (what to move when lanes grow apart). A lane as long as the pass is its floor: on 2026-11-29 the first lane ran 980 s
of a 990 s pass while the machine idled through the last 260 s of it (issue 48). And when each lane and the rest of
the tests ran, in seconds into the pass (from the first test's start to the last one's end, as the reports reach
the process that prints): which of them the pass waited for at its end.

And what the machine was like (:func:`machine_line`): how busy its cores were over the pass, what its host took
(steal), and how long a fixed piece of Python takes on it, timed once the tests are done. The 2-vCPU VM is not one
speed: on 2026-12-01 the same clean clone of the same commit took 1,112 s for ``.ci/run`` on one boot and 2,721 s
on the next, its cores busy both times and next to nothing stolen by the host on the slow one — the CPU itself
was slower. The figure tells such boots apart (0.029 s on a fast one, 0.084-0.089 s on that slow one) and no
finer: on one boot two runs differed by 23 % while it moved 10 %, so a change to the suite's cost is still judged
before against after on one boot (docs/operations.md "What the suite costs").
"""

from __future__ import annotations

import resource
import time
from collections import defaultdict
from pathlib import Path

import pytest

PROPERTY = "cpu_seconds"
SHOWN = 20

_mark: dict[str, float] = {}
_by_module: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # module -> [own, children]
_lanes: dict[str, float] = defaultdict(float)  # xdist group -> wall seconds of its tests' phases
_lane_modules: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # group -> module -> seconds
_spans: dict[str, list[float]] = {}  # xdist group (or REST) -> [first start, last end], seconds into the pass
_began = time.monotonic()
REST = "the other tests"
_stat_began: tuple[int, ...] | None = None
PROC_STAT = Path("/proc/stat")
#: /proc/stat's ``cpu`` line, in its order (proc(5)); guest time is already counted in user time.
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def pytest_sessionstart(session) -> None:
    global _began, _stat_began
    _began = time.monotonic()
    _stat_began = cpu_counters()


def cpu_counters(stat: Path = PROC_STAT) -> tuple[int, ...] | None:
    """The machine's CPU time so far, all cores, in :data:`STAT_FIELDS` order (clock ticks); None off Linux."""
    try:
        first = stat.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    return tuple(int(value) for value in first[1:1 + len(STAT_FIELDS)])


def cpu_shares(before: tuple[int, ...], after: tuple[int, ...]) -> dict[str, float]:
    """Percent of the machine's CPU time between two :func:`cpu_counters` readings that was busy (user, nice,
    system and interrupts), waiting (idle and I/O wait) and stolen by its host; empty when no time passed."""
    spent = dict(zip(STAT_FIELDS, (b - a for a, b in zip(before, after, strict=True)), strict=True))
    total = sum(spent.values())
    if total <= 0:
        return {}
    busy = spent["user"] + spent["nice"] + spent["system"] + spent["irq"] + spent["softirq"]
    return {"busy": 100 * busy / total, "idle": 100 * (spent["idle"] + spent["iowait"]) / total,
            "steal": 100 * spent["steal"] / total}


def reference_work() -> int:
    """A fixed piece of plain Python: arithmetic, dictionary and string work, a sort — the shapes of the suite's own."""
    table: dict[str, int] = {}
    total = 0
    for i in range(120_000):
        key = f"k{i % 4999}"
        table[key] = table.get(key, 0) + i * i % 7
        total += len(key)
    return total + len(sorted(table.items(), key=lambda item: (item[1], item[0])))


def reference_seconds(rounds: int = 5) -> float:
    """The fastest of ``rounds`` timings of :func:`reference_work` on one core (the least disturbed one, as timeit
    advises): the machine's speed for the suite's kind of work."""
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        reference_work()
        best = min(best, time.perf_counter() - began)
    return best


def machine_line(before: tuple[int, ...] | None, after: tuple[int, ...] | None, seconds: float) -> str:
    """The machine over the pass and its speed, as CI prints them."""
    speed = f"the reference work (tests/cpu_time.py reference_work) {seconds:.3f} s, timed after the tests"
    shares = cpu_shares(before, after) if before and after else {}
    if not shares:
        return f"the machine: {speed}"
    return (f"the machine over the pass: cores {shares['busy']:.0f} % busy, {shares['idle']:.0f} % idle, "
            f"{shares['steal']:.1f} % stolen by its host; {speed}")


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
    group = REST
    if "@" in report.nodeid.rpartition("]")[2]:  # an xdist group's test: "path::name[params]@group"
        group = report.nodeid.rpartition("@")[2]
        _lanes[group] += report.duration
        _lane_modules[group][report.nodeid.split("::")[0]] += report.duration
    ended = time.monotonic() - _began
    span = _spans.setdefault(group, [ended - report.duration, ended])
    span[0], span[1] = min(span[0], ended - report.duration), max(span[1], ended)
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
    terminalreporter.write_line(machine_line(_stat_began, cpu_counters(), reference_seconds()))
    if _lanes:
        terminalreporter.write_line("serial lanes (wall seconds of their tests, one after another): " + ", ".join(
            f"{group} {seconds:,.1f} s" for group, seconds in sorted(_lanes.items())))
        for group, modules in sorted(_lane_modules.items()):
            terminalreporter.write_line(f"  {group}: " + ", ".join(
                f"{module.removeprefix('tests/')} {seconds:,.0f}" for module, seconds in
                sorted(modules.items(), key=lambda item: -item[1])))
        terminalreporter.write_line("when they ran (seconds into the pass, first start to last end): " + ", ".join(
            f"{group} {start:,.1f}-{end:,.1f}" for group, (start, end) in sorted(_spans.items(), key=lambda s: s[1][1])))
