"""The run page's model: what its status panel says in each state, and its timeline (pure).

:func:`run_page` decides it from the run's row, its earlier attempts
(:class:`workloads.models.Attempt`, oldest first) and the time; the template renders what it
says and decides nothing. The rules (issue 34: a preempted run's page contradicted itself):

* a queued run says since when it waits — its submission, or the requeue that ended its last
  attempt — and never "Running for"; a running one how long its *current attempt* has run
  (``started_at`` is the first attempt's); a finished one how long its attempts ran in all;
* one "Cluster" row, the current attempt's placement (the Kubernetes objects are a row of their
  own); each earlier attempt shows its own cluster and reason under "Attempts";
* a runtime limit counts every attempt: a run on a later attempt says what its earlier ones left of it;
* "Last checkpoint" is what the current attempt reported; a checkpoint an earlier attempt
  reported is shown under that attempt, and as what the current one resumes from;
* the timeline lists what happened in the order it happened — every attempt's steps, sorted by
  time and then by their order in an attempt (so a later attempt's "Admitted" never follows its
  own "Running") — then the steps still to come of the current attempt.

The progress row (:func:`progress_view`) words the one ETA (:func:`jobs.progress.eta`).

Nothing here reads the database: the caller loads the run with its cluster and its attempts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils.text import capfirst

from core.formatting import format_duration, format_when
from jobs.constants import TIMELINE, RunState
from jobs.models import TrainingRun
from jobs.progress import Eta, Progress, TrainerReport
from workloads.models import Attempt
from workloads.registry import kind_of


@dataclass(frozen=True)
class Step:
    """One step of the state timeline: ``status`` is done, current, todo, stopped (an attempt that was
    preempted) or bad (failed/cancelled)."""

    state: str
    label: str
    at: datetime | None
    status: str


@dataclass(frozen=True)
class AttemptRow:
    """One earlier attempt as the page shows it."""

    number: int
    cluster: str  #: "" when it was placed nowhere (or its cluster was deleted since)
    placement_reason: str
    started_at: datetime | None
    ran_for: timedelta | None
    ended: str  #: "Preempted", "Cluster lost"
    ended_at: datetime | None  #: when it was told to stop, else when it was queued again
    end_reason: str
    checkpoint: dict | None
    has_logs: bool


@dataclass(frozen=True)
class RunPage:
    """What the run page's status panel shows (see the module docstring for the rules)."""

    attempt: int
    queued_since: datetime | None  #: set only while it is queued
    time_label: str  #: "Running for", "Ran for" or "" (no such row)
    time_span: timedelta | None
    cluster: str  #: the current attempt's cluster ("" not placed yet)
    placement_reason: str
    show_cluster: bool
    show_attempt: bool
    show_checkpoint: bool
    checkpoint: dict | None  #: the last checkpoint the current attempt reported
    checkpoint_empty: str  #: what the row says when ``checkpoint`` is None
    resumes_label: str  #: "Resumes from" before its pods started, "Resumed from" after
    resumes_from: dict | None  #: an earlier attempt's checkpoint it resumes from (``attempt`` among its keys)
    attempts: list[AttemptRow]
    timeline: list[Step]
    #: "42 min of its 1 h 00 min limit: its earlier attempts ran 18 min" while a run with a runtime limit that an
    #: earlier attempt used some of is not final (the limit counts every attempt); "" otherwise (no row)
    runtime_left: str = ""


def run_page(run: TrainingRun, earlier: list[Attempt], now: datetime) -> RunPage:
    """The page model of ``run`` at ``now``; ``earlier``: its recorded earlier attempts, oldest first."""
    began = _attempt_began(run, earlier)  # when the current attempt was queued (None: the first)
    queued = run.state == RunState.QUEUED
    ran = run_time(run, now)
    checkpoint = run.last_checkpoint
    resumes = next(({**a.last_checkpoint, "attempt": a.number} for a in reversed(earlier) if a.checkpoint), None)
    if checkpoint is not None and began is not None and checkpoint["at"] < began:
        # Reported by an earlier attempt: what this one resumes from, not what it reported.
        resumes = resumes or {**checkpoint, "attempt": None}
        checkpoint = None
    started = run.attempt_started is not None or run.is_final
    return RunPage(
        attempt=run.attempt,
        queued_since=(began or run.created_at) if queued else None,
        time_label=ran.label, time_span=ran.span,
        cluster=run.cluster.name if run.cluster_id else "",
        placement_reason=run.placement_reason if run.cluster_id else "",
        show_cluster=run.cluster_id is not None or run.attempt > 1,
        show_attempt=run.checkpoint is not None or run.attempt > 1,
        show_checkpoint=run.checkpoint is not None,
        checkpoint=checkpoint,
        checkpoint_empty="none reported in this attempt yet" if run.attempt > 1 else "none reported yet",
        resumes_label="Resumed from" if started else "Resumes from",
        resumes_from=resumes if run.attempt > 1 else None,
        attempts=[_row(a) for a in earlier],
        timeline=timeline(run, earlier),
        runtime_left=_runtime_left(run),
    )


def _runtime_left(run: TrainingRun) -> str:
    """The "Runtime left" row's words (:attr:`RunPage.runtime_left`)."""
    left = kind_of(run).runtime_left(run)
    if left is None or run.is_final or not run.earlier_run_seconds:
        return ""
    return (f"{format_duration(left)} of its {format_duration(run.max_runtime_minutes * 60)} limit: its earlier "
            f"attempts ran {format_duration(run.earlier_run_seconds)}")


def _attempt_began(run: TrainingRun, earlier: list[Attempt]) -> datetime | None:
    """When the current attempt was queued: the requeue that ended the one before (its row; for a
    run requeued before rows were kept, its last preemption); None on the first attempt."""
    if run.attempt == 1:
        return None
    before = next((a for a in earlier if a.number == run.attempt - 1), None)
    if before is not None and before.ended_at is not None:
        return before.ended_at
    return run.last_preempted_at or run.created_at


@dataclass(frozen=True)
class RunTime:
    """How long a run has run, as its page and the runs list say it: ``label`` "Running for", "Ran
    for" or "" (nothing to say: not started, or queued), ``span`` the time."""

    label: str
    span: timedelta | None

    @property
    def short(self) -> str:
        """The list's words: "running 5 min", "ran 1 h 05 min", "" (the list shows a dash)."""
        return {RUNNING_FOR: "running", RAN_FOR: "ran"}.get(self.label, "")


RUNNING_FOR, RAN_FOR = "Running for", "Ran for"


def run_time(run: TrainingRun, now: datetime) -> RunTime:
    """While it runs, the current attempt's time; once final, all its attempts' time (not the waits
    between them: :attr:`workloads.models.Workload.ran_in_all`); nothing otherwise — never while it is
    queued, whatever an earlier attempt ran."""
    if run.is_final:
        ran = run.ran_in_all
        return RunTime(RAN_FOR, ran) if ran is not None else RunTime("", None)
    start = run.attempt_started
    if run.state == RunState.QUEUED or start is None:
        return RunTime("", None)
    return RunTime(RUNNING_FOR, max(now - start, timedelta(0)))


def _row(attempt: Attempt) -> AttemptRow:
    return AttemptRow(
        number=attempt.number, cluster=attempt.cluster.name if attempt.cluster_id else "",
        placement_reason=attempt.placement_reason, started_at=attempt.started_at,
        ran_for=attempt.ran_for, ended=capfirst(attempt.ended_words), ended_at=attempt.stopped_at or attempt.ended_at,
        end_reason=attempt.end_reason, checkpoint=attempt.last_checkpoint, has_logs=bool(attempt.logs))


def timeline(run: TrainingRun, earlier: list[Attempt] = ()) -> list[Step]:
    """Every step that happened, in event order (time, then the step's order), then what is to come.

    Earlier attempts contribute the steps they reached and how they ended; the current attempt
    the happy path up to where the run is (a failed or cancelled run ends where that happened).
    A step whose time is unknown keeps its place after the step before it.
    """
    labels = dict(RunState.choices)
    happened: list[Step] = []
    for attempt in earlier:
        queued_at = run.created_at if attempt.number == 1 else _queued_again(earlier, attempt.number)
        happened.append(Step(RunState.QUEUED, _queued_label(attempt.number, labels), queued_at, "done"))
        happened += [Step(state, labels[state], at, "done") for state, at in (
            (RunState.ADMITTED, attempt.admitted_at), (RunState.PENDING, attempt.applied_at),
            (RunState.RUNNING, attempt.started_at)) if at is not None]
        happened.append(Step("stopped", capfirst(attempt.ended_words), attempt.stopped_at or attempt.ended_at,
                             "stopped"))
    current = _current_steps(run, earlier, labels)
    done = [*happened, *(s for s in current if s.status in ("done", "bad"))]
    return [*_in_event_order(done), *(s for s in current if s.status not in ("done", "bad"))]


def _queued_label(number: int, labels: dict) -> str:
    return labels[RunState.QUEUED] if number == 1 else "Queued again"


def _queued_again(earlier: list[Attempt], number: int) -> datetime | None:
    """When attempt ``number`` was queued: the end of the attempt before it, if recorded."""
    before = next((a for a in earlier if a.number == number - 1), None)
    return before.ended_at if before is not None else None


def _current_steps(run: TrainingRun, earlier: list[Attempt], labels: dict) -> list[Step]:
    """The current attempt's steps: done up to its state, then current, then to do."""
    queued_at = run.created_at if run.attempt == 1 else _attempt_began(run, earlier)
    times = {RunState.QUEUED: queued_at, RunState.ADMITTED: run.admitted_at, RunState.PENDING: run.applied_at,
             RunState.RUNNING: run.attempt_started, RunState.SUCCEEDED: run.finished_at}
    if run.state in (RunState.FAILED, RunState.CANCELLED, RunState.PRUNED):
        # Only the steps this attempt reached (it may, e.g., be cancelled while still queued); pruned is no failure.
        reached = [s for s in TIMELINE[:-1] if s == RunState.QUEUED or times[s] is not None]
        return [*(Step(s, _queued_label(run.attempt, labels) if s == RunState.QUEUED else labels[s], times[s], "done")
                  for s in reached),
                Step(run.state, labels[run.state], run.finished_at, "done" if run.state == RunState.PRUNED else "bad")]
    position = TIMELINE.index(run.state)
    steps = []
    for index, state in enumerate(TIMELINE):
        if index < position or run.state == RunState.SUCCEEDED:
            status = "done"
        elif index == position:
            status = "current"
        else:
            status = "todo"
        label = _queued_label(run.attempt, labels) if state == RunState.QUEUED else labels[state]
        steps.append(Step(state, label, times[state] if index <= position else None, status))
    return steps


def _in_event_order(steps: list[Step]) -> list[Step]:
    """``steps`` sorted by time, then by their order here; one without a time stays after the one before it.

    By the whole second, as the page shows them: the cluster reports a container's start in whole
    seconds, so a pod that starts within the second of its apply must not sort before it.
    """
    keyed, last = [], float("-inf")
    for order, step in enumerate(steps):
        last = math.floor(step.at.timestamp()) if step.at is not None else last
        keyed.append((last, order, step))
    return [step for _at, _order, step in sorted(keyed, key=lambda k: (k[0], k[1]))]


@dataclass(frozen=True)
class ProgressView:
    """The run page's progress row: the bar, and the ETA in words (from :func:`jobs.progress.eta`)."""

    step: int
    total: int
    percent: float
    words: str  #: "ETA 14:05 UTC (in 12 min)", "done", "late: …", "ETA unknown until …"
    eta: datetime | None  #: the ETA itself (for a <time> element), None when unknown or done
    stale: bool
    earlier: bool = False  #: the last attempt's progress (the run is queued again, or its new attempt has not reported)
    trainer: bool = False  #: the trainer's status says it (Trainer v2's trainerStatus; no steps, a percentage)


def progress_view(state: Progress | None, found: Eta | None, now: datetime,
                  trainer: TrainerReport | None = None) -> ProgressView | None:
    """What the page says at ``now`` of the run's progress, ``found`` being its one ETA (:func:`jobs.progress.pick`):
    of its own reports (``state``; an earlier attempt's: its step, no ETA until the new attempt reports), or of its
    trainer's status (``trainer`` given: a percentage and the trainer's ETA); None when neither said anything."""
    if found is None:
        return None
    if trainer is not None:
        return _trainer_view(trainer, found, now)
    if state is None:
        return None
    if found.earlier:
        words = (f"Last attempt reached step {state.step:,} of {state.total:,} "
                 f"({round(found.percent, 1)} %, at {format_when(state.at, 'seconds')}); "
                 "no ETA until the new attempt reports")
        return ProgressView(state.step, state.total, round(found.percent, 1), words, None, False, True)
    return ProgressView(state.step, state.total, round(found.percent, 1), _eta_words(found, now, state.at),
                        found.at if not found.done else None, found.stale)


def _trainer_view(report: TrainerReport, found: Eta, now: datetime) -> ProgressView:
    """The progress row from the trainer's status (the run reports nothing fresh of its own)."""
    percent = round(found.percent, 1)
    return ProgressView(int(percent), 100, percent, _eta_words(found, now, report.at, trainer=True),
                        found.at if not found.done else None, found.stale, trainer=True)


def _eta_words(found: Eta, now: datetime, said_at: datetime, trainer: bool = False) -> str:
    """The ETA in words, from the run's own reports or (``trainer``) its trainer's, last said at ``said_at``."""
    if found.done:
        words = (f"done: the trainer said so at {format_when(said_at, 'seconds')}" if trainer
                 else f"done: its last step at {format_when(found.at, 'seconds')}")
    elif found.at is None:
        words = "the trainer gives no ETA" if trainer else "ETA unknown until a second report gives the rate of progress"
    elif found.at <= now:
        words = f"any moment now (it was due at {format_when(found.at, 'seconds')} " + (
            "by the trainer)" if trainer else "at its rate)")
    else:
        words = f"ETA {format_when(found.at, 'seconds')} (in {format_duration(found.at - now)})" + (
            ", says the trainer" if trainer else "")
    if found.stale and not found.done:
        words += f"; no report for {format_duration(now - said_at)}, so the ETA may not hold"
    return words
