"""What a simulated training run prints for its metrics and progress (docs/metrics.md).

A simulated run's training lines are the ones Kubeflow Katib's StdOut collector reads —
``name=value`` pairs with ``step=`` — and every :data:`PROGRESS_EVERY` of them it prints its
progress, ``SLIPWAY_PROGRESS step=<n> total=<m>``, so the portal's stdout reader (docs/metrics.md)
charts its loss and gives it an ETA like a real script's.
:func:`sandbox.simulation.training_log` calls these; everything stays a function of the plan and time.

Knob, from the first container's env: ``SLIPWAY_SIM_LOG_EVERY`` — seconds between training
lines, fractions allowed (``0.1``: ten lines a second, for a short run with many points);
default :data:`DEFAULT_EVERY`. Each line is 20 steps, as before.
"""

from __future__ import annotations

import math
from datetime import datetime

#: Seconds between training lines without the knob (the simulation's historical 10 s).
DEFAULT_EVERY = 10.0
#: The knob's bounds: at most 20 lines a second, at least one an hour.
MIN_EVERY, MAX_EVERY = 0.05, 3600.0
#: Steps per training line.
STEPS_PER_LINE = 20
#: A progress line after every this many training lines (and none before the first).
PROGRESS_EVERY = 6


def log_every(env: dict[str, str]) -> float | None:
    """``SLIPWAY_SIM_LOG_EVERY`` in seconds, within the bounds; None when absent or not a number (the default)."""
    raw = env.get("SLIPWAY_SIM_LOG_EVERY", "").strip().lower().removesuffix("s")
    try:
        every = float(raw)
    except ValueError:
        return None
    if not MIN_EVERY <= every <= MAX_EVERY:  # also refuses nan
        return None
    return every


def stamp(at: datetime, every: float) -> str:
    """A line's RFC 3339 time: whole seconds for whole-second lines, milliseconds for finer ones."""
    if float(every).is_integer():
        return at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def lines_in(seconds: float, every: float) -> int:
    """Training lines printed in ``seconds`` (``30 // 0.1`` is 299 in floating point: not here)."""
    return math.floor(seconds / every + 1e-9)


def total_steps(seconds: float, every: float) -> int:
    """The steps a run training for ``seconds`` in all (earlier attempts' included) ends at."""
    return lines_in(seconds, every) * STEPS_PER_LINE


def step_line(when: str, step: int, loss: float, lr: float, samples: int) -> str:
    """One training line: a logger's prefix, then Katib's ``name=value`` pairs."""
    return f"{when} INFO  step={step} loss={loss:.4f} lr={lr:.1e} samples_per_sec={samples}"


def progress_line(when: str, step: int, total: int) -> str:
    return f"{when} INFO  SLIPWAY_PROGRESS step={min(step, total)} total={total}"


def lines_since(lines: list[str], since: datetime) -> list[str]:
    """The lines written at or after ``since`` (to the whole second, as the API's ``sinceTime``): a
    simulated line begins with its time; one without (an access log's) goes with the line before it."""
    cut = since.replace(microsecond=0)
    kept, keeping = [], False
    for line in lines:
        head = line.split(" ", 1)[0]
        try:
            written = datetime.fromisoformat(head.replace("Z", "+00:00"))
        except ValueError:
            written = None
        if written is not None and written.tzinfo is not None:
            keeping = written >= cut
        if keeping:
            kept.append(line)
    return kept


def last_report(lines: list[str]) -> tuple[str, int, list[tuple[str, str]]] | None:
    """The newest training line of ``lines`` (:func:`step_line`'s): its time, its step and its other
    ``name=value`` pairs in order, as a TrainJob's ``trainerStatus`` reports them; None when there is none."""
    for line in reversed(lines):
        head, _, rest = line.partition(" INFO  ")
        if not rest.startswith("step="):  # a progress, checkpoint or other line
            continue
        pairs = [tuple(word.split("=", 1)) for word in rest.split() if "=" in word]
        if not pairs[0][1].isdigit():
            continue
        return head, int(pairs[0][1]), [(name, value) for name, value in pairs[1:]]
    return None
