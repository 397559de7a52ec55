"""A run's progress and its ETA: the one rule (pure; no database, no clock).

A run reports its progress as ``step`` of ``total`` (a ``SLIPWAY_PROGRESS`` line, or the
``progress`` of a metrics call). :func:`advance` folds each report into a :class:`Progress`:
the last report and the *rate* of progress in steps per second, an exponentially weighted mean
of the rates over windows of at least :data:`MIN_WINDOW` (time constant :data:`TAU`), so a run
that slows down (evaluation, a slower node) moves its ETA within minutes, and one odd window
does not swing it. Reports closer together than the window (several lines of one second, a
batch read from a log) extend the current window instead of dividing by almost nothing.

:func:`eta` is the only answer to "when will it finish": the run page, the API (and so the
CLI) and the queue's start estimates (:meth:`jobs.kind.TrainingRunKind.progress_ends`) call it.
An ETA is *stale* once the last report is older than :data:`STALE_AFTER`: a run that stopped
reporting (hung, or printing nothing) is not trusted to end on time, and the start estimates fall
back to its typical running time.

A step lower than the last one is a restart (a retried or resumed attempt counting again): the
window starts afresh there, and the rate learned so far is kept — it is the same job. So does the
first report of a new attempt whatever its step (issue 46: a run queued again after a preemption
resumes from its checkpoint, at or above its last report): the time it waited in the queue is no
progress, and a window across it would divide its steps by the wait.

Progress and its ETA belong to an **attempt** (issue 46). While a run is queued again after a
preemption (no pods), and in its next attempt until that attempt's first report, the stored
progress is the last attempt's (:func:`earlier_attempt`): :func:`eta` then says no rate and no ETA —
a queued run has no end to expect — and its readers say "last attempt reached step N of M" (what
the checkpoint it resumes from is likely near), never an ETA counting the queue's wait as work.
The next attempt's first report starts its own window (above) and so its own ETA.

**The trainer's word** (issue 51). On a Kubeflow Trainer v2 cluster the TrainJob's ``trainerStatus`` may say how
far the training is (a percentage), how long it still expects to take and its latest metrics
(:class:`TrainerReport`, :func:`trainer_eta`). One rule, :func:`pick`, decides which answer a run shows: **the run's
own reports win while they are fresh** (they count real steps and measure a rate); the trainer's status answers when
the run reports nothing of its current attempt, or its reports went stale and the trainer's did not. A trainer's
report from before the current attempt started is an earlier attempt's and says nothing. Every reader — the run
page, the API and CLI, the queue's start estimates — goes through :func:`pick`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

#: The shortest window a rate is measured over (reports closer than this extend the window).
MIN_WINDOW = timedelta(seconds=5)
#: The time constant of the rate's weighted mean: a window this long weighs 63 % against the past.
TAU = timedelta(minutes=5)
#: A report older than this makes the ETA stale (see the module docstring).
STALE_AFTER = timedelta(minutes=15)
#: An ETA further out than this is no ETA (a rate of almost nothing).
FARTHEST = timedelta(days=3650)


@dataclass(frozen=True)
class Progress:
    """What is known of a run's progress: the last report (``step`` of ``total`` at ``at``), the
    start of the current rate window and the rate in steps per second (None: not measured yet)."""

    step: int
    total: int
    at: datetime
    window_step: int
    window_at: datetime
    rate: float | None = None


@dataclass(frozen=True)
class Eta:
    """When a run should finish, from its progress. ``at`` None: unknown (no rate yet)."""

    at: datetime | None
    percent: float  #: 0-100
    remaining: timedelta | None
    done: bool  #: it reported its last step
    stale: bool  #: its last report is older than STALE_AFTER
    rate: float | None  #: steps per second
    #: the progress is an earlier attempt's (:func:`earlier_attempt`): no rate, no ETA, not done, not stale
    earlier: bool = False


@dataclass(frozen=True)
class TrainerReport:
    """The trainer's own status of a TrainJob as last observed: ``percent`` done (None: it does not say), the
    seconds it expects still, its latest metrics (name → value) and when it said so."""

    at: datetime
    percent: int | None = None
    remaining_seconds: int | None = None
    metrics: tuple[tuple[str, str], ...] = ()


def trainer_eta(report: TrainerReport | None, now: datetime) -> Eta | None:
    """The ETA the trainer's report gives at ``now`` (None without a percentage): its remaining seconds from when
    it said them; done at 100 %; stale as a run's own report is, after :data:`STALE_AFTER`."""
    if report is None or report.percent is None:
        return None
    stale = now - report.at > STALE_AFTER
    if report.percent >= 100:
        return Eta(report.at, 100.0, timedelta(0), True, stale, None)
    if report.remaining_seconds is None:
        return Eta(None, float(report.percent), None, False, stale, None)
    remaining = timedelta(seconds=report.remaining_seconds)
    return Eta(report.at + remaining, float(report.percent), remaining, False, stale, None)


def pick(own: Eta | None, trainer: Eta | None) -> tuple[Eta | None, str]:
    """The one answer of a run's progress and the source it is from, ``"run"`` or ``"trainer"`` (the module
    docstring's rule): its own while fresh and of this attempt, else the trainer's while fresh, else its own (an
    earlier attempt's, or stale), else the trainer's (stale); ``(None, "")`` when neither says anything."""
    if own is not None and not own.stale and not own.earlier:
        return own, "run"
    if trainer is not None and not trainer.stale:
        return trainer, "trainer"
    if own is not None:
        return own, "run"
    return (trainer, "trainer") if trainer is not None else (None, "")


def advance(state: Progress | None, step: int, total: int, at: datetime,
            attempt_started: datetime | None = None) -> Progress:
    """``state`` with the report "``step`` of ``total`` at ``at``" folded in (the module docstring's rules);
    ``attempt_started``: when the run's current attempt started (a report after it, on a state from
    before it, is the new attempt's first)."""
    if state is None:
        return Progress(step, total, at, step, at)
    new_attempt = attempt_started is not None and state.at < attempt_started <= at
    if step < state.step or new_attempt:  # counted again, or anew: a new window, the same job's rate
        return Progress(step, total, at, step, at, state.rate)
    if at < state.at:  # an older report arriving late says nothing new of the rate
        return replace(state, step=max(step, state.step), total=total)
    span = (at - state.window_at).total_seconds()
    if at - state.window_at < MIN_WINDOW or span <= 0:
        return replace(state, step=step, total=total, at=at)
    measured = (step - state.window_step) / span
    if state.rate is None:
        rate = measured
    else:
        weight = 1 - math.exp(-span / TAU.total_seconds())
        rate = state.rate + weight * (measured - state.rate)
    return Progress(step, total, at, step, at, rate)


def current_rate(state: Progress) -> float | None:
    """The rate an ETA uses: the weighted mean, or before one exists the open window's own."""
    if state.rate is not None:
        return state.rate
    span = (state.at - state.window_at).total_seconds()
    if span > 0 and state.step > state.window_step:
        return (state.step - state.window_step) / span
    return None


def earlier_attempt(state: Progress | None, attempt: int, attempt_started: datetime | None) -> bool:
    """``state`` is an earlier attempt's progress: the run is on a later attempt (``attempt`` > 1) whose pods
    have not started (queued again, admitted, starting: ``attempt_started`` None) or have reported nothing
    since they did."""
    return state is not None and attempt > 1 and (attempt_started is None or state.at < attempt_started)


def eta(state: Progress | None, now: datetime, earlier: bool = False) -> Eta | None:
    """When the run whose progress is ``state`` should finish, seen at ``now``; None without progress.

    From the last report: the steps left at the current rate. Done when it reported its last
    step (then ``at`` is when it did). Not clamped to ``now``: an ETA in the past says the run is
    late, which its readers word themselves ("any moment now", the next cycle). ``earlier``
    (:func:`earlier_attempt`): the last attempt's step and percent alone, no ETA.
    """
    if state is None or state.total <= 0:
        return None
    percent = max(0.0, min(100.0, 100.0 * state.step / state.total))
    if earlier:
        return Eta(None, percent, None, False, False, None, earlier=True)
    stale = now - state.at > STALE_AFTER
    if state.step >= state.total:
        return Eta(state.at, 100.0, timedelta(0), True, stale, state.rate)
    rate = current_rate(state)
    if rate is None or rate <= 0:
        return Eta(None, percent, None, False, stale, rate)
    seconds = (state.total - state.step) / rate
    if not math.isfinite(seconds) or seconds > FARTHEST.total_seconds():
        return Eta(None, percent, None, False, stale, rate)
    remaining = timedelta(seconds=seconds)
    return Eta(state.at + remaining, percent, remaining, False, stale, rate)
