"""The sweep driver: each few seconds, for each live sweep, follow its trials, judge them, launch the next.

:func:`advance` acts for one sweep in one transaction that holds the sweep's row (``SELECT … FOR UPDATE``): two
workers never act for one sweep at once, and a worker killed mid-act rolls back whole — a trial is asked for
(its study trial and number), submitted as the team's work (the one admission) and recorded together, or not
at all, so no trial number is given twice and none is lost (docs/sweeps.md "Crash safety"). In order:

1. **Follow** every active trial (:func:`follow`): the values of the objective its work reported since the
   last act are told to the study (``Trial.report``, each step once: ``Trial.reported_step``); work that ended
   and whose last values are read (``TrialReport.settled``) is told to the study as its end reads — completed
   with its last value, pruned, or failed (a failure, a user's end, or no value at all).
2. **Judge** each trial that reported something new by the pruner (``Trial.should_prune``), but a continued
   one (someone decided it goes on: :func:`sweeps.services.continue_trial`): one Optuna stops is
   stopped through the checkpoint contract (:func:`workloads.services.stop_with_notice`): the notice, a grace
   to save a checkpoint, and then its work ends ``pruned`` — told to the study then, as step 1 reads it.
3. **Launch** (:func:`launch`) while fewer than ``parallel`` trials are active, fewer than ``max_trials`` were
   launched, and the caps allow one more trial: spent + committed by the active trials + one more whole trial
   must stay within ``max_cost`` (and ``max_gpu_hours``), so a sweep's spend never passes its cap while its
   trials keep their runtime limits (docs/sweeps.md "Money first").
4. **End** the sweep once nothing is active and nothing more will launch.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from datetime import datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from core.formatting import format_money as money
from sweeps import constants as c
from sweeps import study as studies
from sweeps import work
from sweeps.events import sweep_finished
from sweeps.models import Sweep, Trial
from sweeps.spec import Parameter, Pruner
from sweeps.storage import DjangoStorage
from workloads import secrets
from workloads import services as workloads
from workloads.constants import NAME_MAX_LENGTH
from workloads.models import STOP_CODES
from workloads.registry import TrialReport

logger = logging.getLogger(__name__)


def parameters_of(sweep: Sweep) -> list[Parameter]:
    return [Parameter(name=name, type=spec["type"], low=spec.get("min"), high=spec.get("max"),
                      log=bool(spec.get("log")), step=spec.get("step"), choices=tuple(spec.get("choices", ())))
            for name, spec in sweep.parameters.items()]


def pruner_of(sweep: Sweep) -> Pruner:
    return replace(Pruner(), **sweep.pruner)


def load_study(sweep: Sweep):
    """The sweep's study, with its pruner; its sampler is set per draw (:func:`sweeps.study.sampler_for`)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=sweep.study.name, storage=DjangoStorage(),
                             sampler=optuna.samplers.RandomSampler(seed=0), pruner=studies.pruner_for(pruner_of(sweep)))


def advance(sweep_id: int, now: datetime | None = None) -> str:
    """One act of the driver for one sweep (module docstring); what it did, in words for the task's log."""
    now = now or timezone.now()
    with transaction.atomic():
        # Another worker acting for it now: skipped (its act covers this one's).
        sweep = (Sweep.objects.select_for_update(of=("self",), skip_locked=True)
                 .select_related("team", "created_by", "study")
                 .filter(pk=sweep_id, state__in=c.LIVE_STATES).first())
        if sweep is None:
            return "not live"
        kind = work.trial_kind()
        study = load_study(sweep)
        active = list(sweep.trials.filter(state=c.TrialState.ACTIVE).select_related("workload"))
        ended, pruning = follow(sweep, kind, study, active, now)
        launched = launch(sweep, kind, study, now) if sweep.state == c.SweepState.RUNNING else 0
        finished = finish_if_done(sweep, now)
    return f"{sweep.name}: {ended} ended, {pruning} pruning, {launched} launched" + (", finished" if finished else "")


def follow(sweep: Sweep, kind, study, active: list[Trial], now: datetime) -> tuple[int, int]:
    """Steps 1 and 2 for the active trials: ``(trials ended, trials told to stop by the pruner)``."""
    import optuna

    with_work = [t for t in active if t.workload_id is not None]
    reports = kind.objective([t.workload for t in with_work], sweep.metric,
                             {t.workload_id: t.reported_step for t in with_work})
    judging = pruner_of(sweep).type != c.PrunerType.NONE
    ended = pruning = 0
    for trial in with_work:
        report = reports.get(trial.workload_id, TrialReport((), False))
        handle = optuna.trial.Trial(study, trial.study_trial_id)
        for step, value in report.points:
            handle.report(value, step)
            _took(sweep, trial, step, value)
        done = work.final(kind, trial.workload)
        if done and report.settled:
            _tell(sweep, kind, study, trial, now)
            ended += 1
        elif (not done and judging and report.points and trial.continues_id is None
              and trial.workload.preempting_since is None
              and trial.workload.reason_code not in STOP_CODES and handle.should_prune()):
            pruning += _prune(sweep, kind, trial)
        trial.save(update_fields=["objective", "best", "step", "reported_step", "state", "value", "reason",
                                  "finished_at"])
    return ended, pruning


def _took(sweep: Sweep, trial: Trial, step: int, value: float) -> None:
    """Keep a reported value on the trial: the newest, its step, and the best by the sweep's goal."""
    trial.objective, trial.step, trial.reported_step = value, step, step
    if math.isfinite(value) and (trial.best is None or better(sweep.goal, value, trial.best)):
        trial.best = value


def better(goal: str, value: float, than: float) -> bool:
    return value > than if goal == c.Goal.MAXIMIZE else value < than


def _prune(sweep: Sweep, kind, trial: Trial) -> int:
    """Stop a trial the pruner judged, through the checkpoint contract; 1 when it was told."""
    row = kind.model.objects.select_related("team", "flavor").filter(workload_id=trial.workload_id).first()
    rule = "ASHA" if pruner_of(sweep).type == c.PrunerType.ASHA else "median stopping"
    reason = (f"pruned by sweep {sweep.name} ({rule}) at step {trial.step}: "
              f"{sweep.metric} {trial.objective:.4g} is not among the trials that go on")
    if row is None or not workloads.stop_with_notice(row, reason, prune=True):
        return 0
    trial.reason = reason[:500]
    return 1


def _tell(sweep: Sweep, kind, study, trial: Trial, now: datetime) -> None:
    """Its work ended and its last values are read: tell the study how it ended, and keep that on the trial."""
    import optuna

    state = work.outcome(kind, trial.workload)
    if state == c.TrialState.COMPLETED and trial.objective is None:
        state = c.TrialState.FAILED
        trial.reason = f"it ended without reporting {sweep.metric}"
    elif state == c.TrialState.COMPLETED and not math.isfinite(trial.objective):
        state = c.TrialState.FAILED
        trial.reason = f"its last {sweep.metric} is {trial.objective}, not a number the study can rank"
    elif state != c.TrialState.COMPLETED and state != c.TrialState.PRUNED:
        trial.reason = trial.reason or (trial.workload.reason or f"it ended {trial.workload.state}")[:500]
    told = {c.TrialState.COMPLETED: optuna.trial.TrialState.COMPLETE,
            c.TrialState.PRUNED: optuna.trial.TrialState.PRUNED}.get(state, optuna.trial.TrialState.FAIL)
    try:
        if told == optuna.trial.TrialState.COMPLETE:
            study.tell(trial.number - 1, trial.objective)
        else:
            study.tell(trial.number - 1, state=told)
    except RuntimeError:
        # GridSampler stops the study once its grid is done (Study.stop, which outside optimize() raises);
        # the tell is stored before it: the driver ends the sweep when nothing more can launch.
        pass
    trial.state = state
    trial.value = trial.objective if state in (c.TrialState.COMPLETED, c.TrialState.PRUNED) else None
    trial.finished_at = trial.workload.finished_at or now


def launch(sweep: Sweep, kind, study, now: datetime) -> int:
    """Step 3: launch trials while ``parallel``, ``max_trials`` and the caps allow; how many were launched."""
    trials = list(sweep.trials.all())
    active = sum(1 for t in trials if t.state == c.TrialState.ACTIVE)
    sampled = sum(1 for t in trials if t.continues_id is None)  # a continued trial samples nothing new
    room = min(sweep.parallel - active, sweep.max_trials - sampled)
    if room <= 0:
        return 0
    spent = work.spend([t.workload_id for t in trials if t.workload_id is not None], now)
    parameters = parameters_of(sweep)
    distributions = {p.name: p.distribution() for p in parameters}
    done = 0
    for _ in range(room):
        capped = cap_words(sweep, spent)
        if capped:
            stop_launching(sweep, capped)
            break
        number = len(trials) + done  # Optuna's number of the trial asked for now
        study.sampler = studies.sampler_for(sweep.sampler, parameters, sweep.seed, number)
        asked = study.ask(distributions)
        trial = Trial(sweep=sweep, number=asked.number + 1, study_trial_id=asked._trial_id, params=asked.params)
        fields = trial_fields(sweep, kind, trial.number, asked.params)
        try:
            with transaction.atomic():
                created = kind.submit(sweep.created_by, sweep.team, fields)
        except (ValidationError, PermissionDenied, Http404) as exc:
            # The same fields are refused next time too (they differ only in the parameters): stop launching.
            words = _refusal(exc)
            study.tell(asked.number, state=_fail_state())
            trial.state, trial.reason, trial.finished_at = c.TrialState.FAILED, f"refused: {words}"[:500], now
            trial.save()
            stop_launching(sweep, f"its trial {trial.number} was refused: {words}")
            break
        trial.workload_id = created.workload_id
        trial.save()
        done += 1
        spent.committed += sweep.trial_cost  # the trial just launched commits a whole trial until it runs
        spent.committed_gpu_hours += sweep.trial_gpu_hours
    return done


def ask_again(sweep: Sweep, pruned: Trial, number: int) -> Trial:
    """Optuna's trial ``number`` asked with ``pruned``'s parameters fixed (``enqueue_trial``, then ``ask``): the
    study's record of a continued trial (:func:`sweeps.services.continue_trial`). Returned unsaved, its work not
    submitted yet."""
    study = load_study(sweep)
    parameters = parameters_of(sweep)
    study.enqueue_trial(pruned.params, skip_if_exists=False)
    study.sampler = studies.sampler_for(sweep.sampler, parameters, sweep.seed, number)
    asked = study.ask({p.name: p.distribution() for p in parameters})
    return Trial(sweep=sweep, number=asked.number + 1, study_trial_id=asked._trial_id, params=asked.params,
                 continues=pruned)


def free_name(sweep: Sweep, kind, number: int) -> str:
    """The name trial ``number``'s work takes: ``<sweep>-t008``, else — a run of the team not of this sweep holds
    it, named so before the trial launched — ``<sweep>-t008-2`` to ``-9``, the sweep's part cut to keep the name
    within a workload name's length. A teammate's run named after a trial to come refused that trial on its name,
    and the sweep stopped launching for good (:meth:`sweeps.models.Trial.name` shows the name it got)."""
    suffix = c.TRIAL_SUFFIX.format(number=number)
    names = [sweep.trial_name(number), *(f"{sweep.name[:NAME_MAX_LENGTH - len(suffix) - len(str(again)) - 1]}"
                                         f"{suffix}-{again}" for again in range(2, 10))]
    taken = set(kind.model.objects.filter(team=sweep.team, name__in=names).unfinished().values_list("name", flat=True))
    # All nine held: it is refused on its name, as before, and the sweep says so.
    return next((name for name in names if name not in taken), names[0])


def trial_fields(sweep: Sweep, kind, number: int, params: dict) -> dict:
    """Trial ``number``'s fields: the base with its name (:func:`free_name`) and ``params`` put in (the kind's
    ``Trials.trial_fields``), and the sweep's secret env, unsealed for its submission only (the base names it
    masked)."""
    fields = kind.trial_fields(sweep.base, free_name(sweep, kind, number), params)
    if sweep.base.get("secret_env"):
        fields["secret_env"] = dict(secrets.unsealed(sweep.secret_ref))
    return fields


def _fail_state():
    import optuna

    return optuna.trial.TrialState.FAIL


def _refusal(exc: Exception) -> str:
    if isinstance(exc, ValidationError) and hasattr(exc, "message_dict"):
        return "; ".join(f"{name}: {' '.join(messages)}" for name, messages in exc.message_dict.items())[:400]
    if isinstance(exc, Http404):
        return "its creator is no longer a member of the team"
    return str(exc)[:400] or "its creator may no longer submit work for the team"


def cap_words(sweep: Sweep, spent: work.Spend) -> str:
    """Why one more whole trial would pass a cap, in words ("" when it would not): the money cap first, then the
    GPU-hours one, each judged as spent + committed + a whole trial."""
    caps = ((sweep.max_cost, spent.spent, spent.committed, sweep.trial_cost, lambda v: money(v, sweep.currency)),
            (sweep.max_gpu_hours, spent.gpu_hours, spent.committed_gpu_hours, sweep.trial_gpu_hours,
             lambda v: f"{v:.2f} GPU-hours"))
    for cap, so_far, committed, trial, said in caps:
        if cap is not None and so_far + committed + trial > cap:
            return (f"one more trial would pass the cap of {said(cap)}: spent {said(so_far)}, committed "
                    f"{said(committed)}, a trial up to {said(trial)}")
    return ""


def stop_launching(sweep: Sweep, why: str) -> None:
    """No more trials: the sweep finishes once the active ones end (:func:`finish_if_done`)."""
    sweep.reason = f"stopped launching: {why}"[:500]
    sweep.launching = False
    Sweep.objects.filter(pk=sweep.pk).update(reason=sweep.reason, launching=False)


def finish_if_done(sweep: Sweep, now: datetime) -> bool:
    """Step 4: a sweep with no active trial and none to launch ends (completed, or stopped when a user stopped it)."""
    if sweep.trials.filter(state=c.TrialState.ACTIVE).exists():
        return False
    if (sweep.state == c.SweepState.RUNNING and sweep.launching
            and sweep.trials.filter(continues__isnull=True).count() < sweep.max_trials):
        return False
    state = c.SweepState.STOPPED if sweep.state == c.SweepState.STOPPING else c.SweepState.COMPLETED
    if not Sweep.objects.filter(pk=sweep.pk, state=sweep.state).update(state=state, finished_at=now):
        return False
    sweep.state, sweep.finished_at = state, now
    sweep_finished.send(sender=Sweep, sweep=sweep, at=now)
    return True
