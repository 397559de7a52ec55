"""The metric lines a run prints to its stdout, read as Kubeflow Katib's StdOut collector reads them (pure).

Katib's StdOut metrics collector (``pkg/metricscollector/v1beta1``) takes every ``name=value``
pair of a line with its default filter ``([\\w|-]+)\\s*=\\s*((-?\\d+)(\\.\\d+)?)``, and a line's time
from its first word when that word is an RFC 3339 time stamp. Slipway reads the same lines, so a
training script written for Katib reports here unchanged, with these differences (docs/metrics.md):

* a line counts only with a ``step=<whole number>`` pair: a point is stored per (run, name, step);
* a value may have an exponent and a ``+`` sign (``lr=3e-4``: Katib's filter reads ``3``); a value
  glued to more text (``loss=0.4abc``, ``x=1.2.3``) is not a value; ``nan``/``inf`` and values
  past the float range are dropped (never stored);
* names are Katib's characters without its ``|`` (letters, digits, ``_``, ``-``), start with a
  letter or ``_``, at most :data:`MAX_NAME` long; ``step`` is the step, not a metric;
* ``SLIPWAY_PROGRESS step=<n> total=<m>`` (anywhere in a line) is the run's progress, not metrics;
* lines longer than :data:`MAX_LINE` characters and pairs past :data:`MAX_PAIRS` in one line are ignored.

:func:`parse_lines` never raises, whatever it is given: a line it cannot read is skipped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from cluster.status import parse_time

#: Longest metric name (Katib's are free; a column needs a bound).
MAX_NAME = 64
#: Longest line read (a longer one is not a metric line someone meant; it is skipped whole).
MAX_LINE = 4096
#: Most pairs read from one line.
MAX_PAIRS = 32
#: Largest step: 2**53, the largest whole number a JSON reader (a browser's chart, JavaScript) and a
#: float keep exactly; the API refuses more (400), the stdout reader skips the line (security review 5 #6).
MAX_STEP = 2**53

#: A metric name: Katib's ``[\w|-]`` without the ``|``, beginning with a letter or ``_``.
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,%d}" % (MAX_NAME - 1))  # noqa: UP031 - a regex's braces
#: One ``name=value`` pair: not glued to what is before the name or after the value.
PAIR = re.compile(
    r"(?<![A-Za-z0-9_.|/-])(?P<name>[A-Za-z_][A-Za-z0-9_-]*)\s*=\s*"
    r"(?P<value>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(?![A-Za-z0-9_.])")
STEP = re.compile(r"(?<![A-Za-z0-9_.|/-])step\s*=\s*(?P<step>\d{1,19})(?![A-Za-z0-9_.])")
PROGRESS = re.compile(r"SLIPWAY_PROGRESS\s+step=(?P<step>\d{1,19})\s+total=(?P<total>\d{1,19})(?![A-Za-z0-9_.])")
#: A line's leading time stamp (Katib's rule: the first word), fractions and offsets allowed.
STAMP = re.compile(r"\s*(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d))(?:\s|$)")


@dataclass(frozen=True)
class Point:
    """One metric value at one step; ``at``: the line's time stamp (None without one)."""

    step: int
    name: str
    value: float
    at: datetime | None = None


@dataclass(frozen=True)
class ProgressMark:
    """A ``SLIPWAY_PROGRESS`` line: ``step`` of ``total`` done at ``at`` (None without a stamp)."""

    step: int
    total: int
    at: datetime | None = None


@dataclass(frozen=True)
class Parsed:
    points: list[Point]
    progress: list[ProgressMark]
    last_at: datetime | None  #: the last time stamp of any line (where the next read may start)


def line_time(line: str) -> datetime | None:
    """The line's leading RFC 3339 time stamp, or None."""
    found = STAMP.match(line)
    if found is None:
        return None
    try:
        return parse_time(found.group(1))
    except (ValueError, OverflowError):
        return None


def parse_line(line: object) -> tuple[list[Point], ProgressMark | None]:
    """The points and progress of one line; ``([], None)`` when it has neither (or is not a line)."""
    if not isinstance(line, str) or len(line) > MAX_LINE:
        return [], None
    at = line_time(line)
    if "SLIPWAY_PROGRESS" in line:  # a progress line, read or not: never metrics
        progress = PROGRESS.search(line)
        if progress is None:
            return [], None
        step, total = int(progress["step"]), int(progress["total"])
        if 0 < total <= MAX_STEP and step <= min(total, MAX_STEP):
            return [], ProgressMark(step, total, at)
        return [], None
    step_pair = STEP.search(line)
    if step_pair is None or int(step_pair["step"]) > MAX_STEP:
        return [], None
    step = int(step_pair["step"])
    values: dict[str, float] = {}  # a name given twice in a line: the last one
    for number, pair in enumerate(PAIR.finditer(line)):
        if number >= MAX_PAIRS:
            break
        name = pair["name"]
        if name == "step" or not NAME.fullmatch(name):
            continue
        try:
            value = float(pair["value"])
        except (ValueError, OverflowError):
            continue
        if math.isfinite(value):
            values[name] = value
    return [Point(step, name, value, at) for name, value in values.items()], None


def parse_lines(lines: Iterable[object]) -> Parsed:
    """Every point and progress mark of ``lines``, in their order. Never raises on what it is given."""
    points: list[Point] = []
    marks: list[ProgressMark] = []
    last_at = None
    try:
        iterator = iter(lines)
    except TypeError:
        return Parsed([], [], None)
    for line in iterator:
        found, mark = parse_line(line)
        points += found
        if mark is not None:
            marks.append(mark)
        at = line_time(line) if isinstance(line, str) and len(line) <= MAX_LINE else None
        if at is not None:
            last_at = at
    return Parsed(points, marks, last_at)
