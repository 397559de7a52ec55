"""Sweeps' user actions, one function each — :func:`preview` (the dry run), :func:`create`, :func:`stop`,
:func:`delete` — and what the pages and the API read (:func:`visible_sweeps`, :func:`get_sweep_for_user`,
:func:`figures`).

A sweep is checked before anything is written: its own fields (:func:`sweeps.spec.parse`), then one trial of
it as the trial kind checks its own work — rendered with a value of each parameter and previewed through the
kind's dry run (:class:`workloads.registry.Api`), whose field errors come back under the base's field
(``run.image``). A trial must have a runtime limit: the cost range and the caps count each trial to it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.money import ZERO
from core.queueing import publish_on_commit
from fleet.models import GpuFlavor
from sweeps import constants as c
from sweeps import driver, tasks, work
from sweeps import spec as specs
from sweeps import study as studies
from sweeps.models import Study, Sweep, Trial
from sweeps.storage import DjangoStorage
from teams.models import Role, Team
from teams.permissions import get_for_user, require_team, visible_to
from teams.services import audit
from workloads import secrets
from workloads import services as workloads
from workloads.registry import Api


class SweepConflict(Exception):
    """The sweep is not in a state that allows the action (a 409)."""


@dataclass(frozen=True)
class Shape:
    """What a sweep would be before anything runs (the dry run, docs/sweeps.md "Money first"): its trials, its
    rungs (ASHA), one trial's preview and price, and the cost range at today's price."""

    trials: int
    parallel: int
    sampler: str
    pruner: str
    rungs: tuple[specs.Rung, ...]
    trial: object  #: the first trial's preview (workloads.estimates.preview.Preview)
    trial_cost: Decimal  #: a whole trial: its cost per hour times its runtime limit
    trial_gpu_hours: Decimal
    cost_low: Decimal  #: if the pruner stops trials as its nominal shape says (sweeps.spec.low_share)
    cost_high: Decimal  #: every trial to its runtime limit, within the cap (plus nothing: the cap holds)
    gpu_hours_low: Decimal
    gpu_hours_high: Decimal
    max_cost: Decimal | None
    max_gpu_hours: Decimal | None
    #: Whole trials the caps allow at the most (None: the caps allow all of them).
    trials_within_cap: int | None
    currency: str = field(default_factory=lambda: settings.SLIPWAY_CURRENCY)

    def as_dict(self) -> dict:
        return {
            "trials": self.trials, "parallel": self.parallel, "sampler": self.sampler, "pruner": self.pruner,
            "rungs": [{"steps": r.steps, "trials": r.trials} for r in self.rungs],
            "trial": {**self.trial.as_dict(), "cost": _money(self.trial_cost), "gpu_hours": _hours(self.trial_gpu_hours)},
            "cost": {"low": _money(self.cost_low), "high": _money(self.cost_high), "currency": self.currency},
            "gpu_hours": {"low": _hours(self.gpu_hours_low), "high": _hours(self.gpu_hours_high)},
            "max_cost": _money(self.max_cost) if self.max_cost is not None else None,
            "max_gpu_hours": _hours(self.max_gpu_hours) if self.max_gpu_hours is not None else None,
            "trials_within_cap": self.trials_within_cap,
        }


def _money(amount: Decimal) -> str:
    return str(amount.quantize(Decimal("0.01")))


def _hours(hours: Decimal) -> str:
    return str(hours.quantize(Decimal("0.01")))


def base_key() -> str:
    """The request's field of the trials' base: the trial kind's noun (docs/sweeps.md "The sweep file")."""
    return work.trial_kind().noun


def _checked(team: Team, data) -> tuple[specs.SweepRequest, Shape]:
    """The request checked whole (module docstring), and its shape; ``ValidationError`` with every field's errors."""
    kind = work.trial_kind()
    key = kind.noun
    request = specs.parse(data, key)
    limit = kind.runtime_limit
    if limit and not request.base.get(limit):
        raise ValidationError({f"{key}.{limit}": ["A sweep's trials need a runtime limit: the cost range and the "
                                                  "caps count each trial to it."]})
    fields = kind.trial_fields(request.base, f"{request.name}-t001", request.example_params())
    try:
        preview = Api.of(kind).preview(team, fields)
    except ValidationError as exc:
        raise ValidationError({f"{key}.{name}" if name not in ("non_field_errors", "__all__") else key: messages
                               for name, messages in exc.message_dict.items()}) from None
    if preview.outcome in ("reject", "invalid"):
        raise ValidationError({key: [preview.message]})
    return request, _shape(request, preview)


def _shape(request: specs.SweepRequest, preview) -> Shape:
    """The shape and cost range of ``request`` whose first trial previews as ``preview``. A whole trial is counted at
    the dearest price of the clusters that offer its flavor (the quote's range): a trial placed later may land on
    any of them, and the cap must hold wherever it does; the range's low end is at the price quoted now."""
    quoted = preview.estimated_total_cost or ZERO
    price = preview.price
    trial_cost = quoted * price.high / price.price if price is not None and price.price else quoted
    flavor = GpuFlavor.objects.filter(name=request.base.get("flavor")).first()
    fraction = Decimal(flavor.gpu_fraction) if flavor is not None else Decimal(1)
    unit_price = preview.price_per_hour or ZERO
    trial_gpu_hours = quoted / unit_price * fraction if unit_price else ZERO  # its unit-hours, at any price
    trials = request.max_trials
    share = Decimal(str(round(specs.low_share(trials, request.pruner), 6)))
    within = None
    if request.max_cost is not None and trial_cost:
        within = int(request.max_cost // trial_cost)
    if request.max_gpu_hours is not None and trial_gpu_hours:
        by_hours = int(request.max_gpu_hours // trial_gpu_hours)
        within = by_hours if within is None else min(within, by_hours)
    if within is not None and within >= trials:
        within = None
    high_trials = trials if within is None else within
    rungs = tuple(specs.asha_rungs(trials, request.pruner)) if request.pruner.type == c.PrunerType.ASHA else ()
    return Shape(trials=trials, parallel=request.parallel, sampler=request.sampler, pruner=request.pruner.type,
                 rungs=rungs, trial=preview, trial_cost=trial_cost, trial_gpu_hours=trial_gpu_hours,
                 cost_low=min(quoted * trials * share, trial_cost * high_trials),
                 cost_high=trial_cost * high_trials,
                 gpu_hours_low=min(trial_gpu_hours * trials * share, trial_gpu_hours * high_trials),
                 gpu_hours_high=trial_gpu_hours * high_trials, max_cost=request.max_cost,
                 max_gpu_hours=request.max_gpu_hours, trials_within_cap=within)


def preview(user, team: Team | str, data) -> Shape:
    """The dry run: the sweep's shape and cost range; nothing is written (``?dry_run=1``, ``--dry-run``)."""
    team = require_team(user, team, Role.MEMBER).team
    return _checked(team, data)[1]


def create(user, team: Team | str, data) -> Sweep:
    """Create a sweep for ``team``; its first trials launch at once (after commit). ``ValidationError`` (a 400,
    nothing written) for bad input, ``PermissionDenied`` below the member role, ``Http404`` for outsiders."""
    team = require_team(user, team, Role.MEMBER).team
    request, shape = _checked(team, data)
    # Its trials' secret env is sealed apart (as a run's is); the base it keeps, and shows, names it masked.
    base = dict(request.base)
    secret_env = tuple(sorted((base.pop("secret_env", None) or {}).items()))
    if secret_env:
        base["secret_env"] = secrets.masked([name for name, _ in secret_env])
    try:
        with transaction.atomic():
            storage = DjangoStorage()
            study_id = storage.create_new_study([studies.direction(request.goal)], f"sweep-{uuid.uuid4().hex}")
            sweep = Sweep.objects.create(
                team=team, created_by=user, name=request.name, base=base, metric=request.metric,
                parameters={p.name: p.as_field() for p in request.parameters}, goal=request.goal,
                sampler=request.sampler, pruner=request.pruner.as_field(), parallel=request.parallel,
                max_trials=request.max_trials, max_cost=request.max_cost, max_gpu_hours=request.max_gpu_hours,
                seed=request.seed, trial_cost=shape.trial_cost, trial_gpu_hours=shape.trial_gpu_hours,
                currency=settings.SLIPWAY_CURRENCY, study=Study.objects.get(pk=study_id))
            if secret_env:
                secrets.seal_apart(sweep.secret_ref, team, secret_env)
            audit(c.AUDIT_CREATED, actor=user, team=team, target=f"sweep {sweep.pk} ({sweep.name})",
                  trials=request.max_trials, parallel=request.parallel,
                  max_cost=str(request.max_cost) if request.max_cost is not None else None)
            publish_on_commit(tasks.advance_sweep, sweep.pk)
    except IntegrityError:
        raise ValidationError({"name": [f"The team already has a live sweep named {request.name!r}."]}) from None
    return sweep


def stop_refusal(user, sweep: Sweep, membership) -> str:
    """Why ``user`` (``membership``: theirs of the sweep's team, None outside it) may not stop or delete ``sweep``,
    in words; '' when they may. The one rule, as for ending work (``Team.members_may_cancel_teammates_work``): a
    team admin may stop any of the team's sweeps, a member their own, and their teammates' when the team lets
    members end one another's work; a viewer none. The page shows it beside a disabled button."""
    if membership is None:
        return "Platform staff read another team's sweep here: its members stop it."
    if not membership.allows(Role.MEMBER):
        return "Viewers can't stop the team's sweeps — ask a team admin."
    if membership.allows(Role.ADMIN) or sweep.created_by_id == user.pk or sweep.team.members_may_cancel_teammates_work:
        return ""
    return (f"Only {sweep.team.name}'s admins and {sweep.created_by.username} (who created it) may stop it: the "
            "team does not let members end their teammates' work.")


def _check_may_stop(user, sweep: Sweep) -> None:
    """:func:`stop_refusal` as the actions check it: 404 outside the team, 403 below member or by the rule."""
    refusal = stop_refusal(user, sweep, require_team(user, sweep.team, Role.MEMBER))
    if refusal:
        raise PermissionDenied(refusal)


def stop(user, sweep: Sweep) -> Sweep:
    """Stop ``sweep``: no trial launches any more, and its active trials stop through the checkpoint contract
    (notice, a grace to save, then ended; queued ones at once). It is ``stopping`` until they have, then
    ``stopped``. ``SweepConflict`` when it is not running."""
    _check_may_stop(user, sweep)
    kind = work.trial_kind()
    with transaction.atomic():
        moved = Sweep.objects.filter(pk=sweep.pk, state=c.SweepState.RUNNING).update(
            state=c.SweepState.STOPPING, stopped_by=user, launching=False,
            reason=f"stopped by {user.username}"[:500])
        if not moved:
            sweep.refresh_from_db()
            raise SweepConflict(f"The sweep is {sweep.state}: there is nothing to stop.")
        uids = list(sweep.trials.filter(state=c.TrialState.ACTIVE, workload__isnull=False)
                    .values_list("workload_id", flat=True))
        for row in kind.model.objects.select_related("team", "flavor").filter(workload_id__in=uids):
            workloads.stop_with_notice(row, f"stopped with sweep {sweep.name} by {user.username}", prune=False)
        audit(c.AUDIT_STOPPED, actor=user, team=sweep.team, target=f"sweep {sweep.pk} ({sweep.name})")
        publish_on_commit(tasks.advance_sweep, sweep.pk)
    sweep.refresh_from_db()
    return sweep


def continue_trial(user, sweep: Sweep, number: int) -> Trial:
    """Continue pruned trial ``number`` from its checkpoint (docs/sweeps.md "Continue a pruned trial"): a new trial
    of the sweep, with the same parameters (Optuna's trial asked with them fixed), whose work goes on from the
    pruned work's last checkpoint on its cluster (the trial kind's ``Trials.submit_continuation``), submitted by
    ``user`` through the one admission. The pruner never judges it (someone decided it goes on) and it does not
    count in ``max_trials``; it must fit the caps as a whole trial. A finished sweep runs again until it ends,
    launching nothing new.

    ``SweepConflict`` (a 409, with why) when the sweep is stopping, the trial is not pruned or was continued
    already, its checkpoint cannot be gone on from, or the caps do not allow it; the submission's own errors
    (``ValidationError``: a 400) as for any run; ``PermissionDenied`` below member, ``Http404`` outside the team.
    """
    require_team(user, sweep.team, Role.MEMBER)
    kind = work.trial_kind()
    now = timezone.now()
    with transaction.atomic():
        locked = Sweep.objects.select_for_update(of=("self",)).select_related("team", "study").get(pk=sweep.pk)
        if locked.state == c.SweepState.STOPPING:
            raise SweepConflict("The sweep is stopping: wait until it has stopped, then continue the trial.")
        pruned = locked.trials.select_related("workload").filter(number=number).first()
        if pruned is None:
            raise SweepConflict(f"The sweep has no trial {number}.")
        if pruned.state != c.TrialState.PRUNED:
            raise SweepConflict(f"Trial {number} is {pruned.state}: only a pruned trial can be continued.")
        taken = locked.trials.filter(continues=pruned).values_list("number", flat=True).first()
        if taken is not None:
            raise SweepConflict(f"Trial {number} was continued already, as trial {taken}.")
        refusal = kind.continuation_refusal(pruned.workload)
        if refusal:
            raise SweepConflict(f"Trial {number} cannot be continued: {refusal}.")
        trials = list(locked.trials.all())
        capped = driver.cap_words(locked, work.spend([t.workload_id for t in trials if t.workload_id], now))
        if capped:
            raise SweepConflict(f"Trial {number} cannot be continued: {capped}.")
        trial = driver.ask_again(locked, pruned, len(trials))
        fields = driver.trial_fields(locked, kind, trial.number, pruned.params)
        # Refused (the team's quota can never fit it, a name taken meanwhile): everything above rolls back with it.
        created = kind.submit_continuation(user, locked.team, fields, pruned.workload)
        trial.workload_id = created.workload_id
        trial.save()
        if locked.is_final:
            reason = (f"running again: trial {number} continued as trial {trial.number} by {user.username}; "
                      "it launches no new trials")
            try:
                with transaction.atomic():
                    Sweep.objects.filter(pk=locked.pk).update(state=c.SweepState.RUNNING, finished_at=None,
                                                              launching=False, reason=reason[:500])
            except IntegrityError:
                raise SweepConflict(f"The team has another live sweep named {locked.name!r}: it cannot run "
                                    "again meanwhile.") from None
        audit(c.AUDIT_CONTINUED, actor=user, team=locked.team, target=f"sweep {locked.pk} ({locked.name})",
              trial=number, continued_as=trial.number)
        publish_on_commit(tasks.advance_sweep, locked.pk)
    return trial


def delete(user, sweep: Sweep) -> None:
    """Delete a finished sweep and its study; its trials' work stays the team's (its runs list, its costs).
    ``SweepConflict`` while it is live (stop it first)."""
    _check_may_stop(user, sweep)
    with transaction.atomic():
        locked = Sweep.objects.select_for_update().filter(pk=sweep.pk, state__in=c.FINAL_STATES).first()
        if locked is None:
            raise SweepConflict("The sweep is still live: stop it first.")
        study = locked.study
        locked.trials.all().delete()
        secrets.drop(locked.secret_ref)
        locked.delete()
        study.delete()


def visible_sweeps(user, team: str | None = None, state: str | None = None) -> QuerySet:
    rows = visible_to(Sweep.objects.select_related("team", "created_by"), user)
    if team:
        require_team(user, team)  # another team's is a 404, not an empty list
        rows = rows.filter(team__slug=team)
    if state:
        rows = rows.filter(state=state)
    return rows


def get_sweep_for_user(user, pk, role: str = Role.VIEWER) -> Sweep:
    """The sweep ``pk`` for ``user``: 404 outside its team, 403 below ``role``; platform staff read any team's."""
    return get_for_user(Sweep.objects.select_related("team", "created_by", "study"), user, role, pk=pk,
                        staff_reads=role == Role.VIEWER)


@dataclass(frozen=True)
class Figures:
    """A sweep's figures now: its trials by state, its best trial, its money (:func:`sweeps.work.spend`)."""

    counts: dict[str, int]
    best: Trial | None
    spend: work.Spend
    trials: list[Trial]
    #: Each trial's number by its id, and the number of the trial that continues a pruned one, by the pruned one's id.
    numbers: dict[int, int] = field(default_factory=dict)
    continued_as: dict[int, int] = field(default_factory=dict)


def best_of(sweep: Sweep, trials: list[Trial]) -> Trial | None:
    """The completed trial with the best value by the sweep's goal (the study's best trial)."""
    done = [t for t in trials if t.state == c.TrialState.COMPLETED and t.value is not None]
    if not done:
        return None
    pick = max if sweep.goal == c.Goal.MAXIMIZE else min
    return pick(done, key=lambda t: (t.value, -t.number) if sweep.goal == c.Goal.MAXIMIZE else (t.value, t.number))


def saved_by_pruning(sweep: Sweep, figures: Figures) -> Decimal:
    """What pruning saved, in money: for each pruned trial, what a trial that ran to its end cost (the mean of the
    completed trials', else a whole trial to its runtime limit) less what the pruned one cost; never below zero."""
    completed = [figures.spend.by_trial.get(t.workload_id, ZERO) for t in figures.trials
                 if t.state == c.TrialState.COMPLETED and t.workload_id is not None]
    whole = sum(completed, ZERO) / len(completed) if completed else sweep.trial_cost
    return sum((max(whole - figures.spend.by_trial.get(t.workload_id, ZERO), ZERO)
                for t in figures.trials if t.state == c.TrialState.PRUNED), ZERO)


def figures(sweep: Sweep, now: datetime | None = None) -> Figures:
    now = now or timezone.now()
    trials = list(Trial.objects.filter(sweep=sweep).select_related("workload").order_by("number"))
    counts = dict.fromkeys(c.TrialState.values, 0)
    for trial in trials:
        counts[trial.state] += 1
    spend = work.spend([t.workload_id for t in trials if t.workload_id is not None], now)
    numbers = {t.pk: t.number for t in trials}
    continued_as = {t.continues_id: t.number for t in trials if t.continues_id is not None}
    return Figures(counts, best_of(sweep, trials), spend, trials, numbers, continued_as)
