"""The shapes of ``/api/v1/sweeps/`` (docs/api.md "Sweeps"): a sweep, its trials, its dry run.

Read-only serializers over what :mod:`sweeps.services` prepares (:func:`sweep_answer`, :func:`trial_answer`):
the request is checked by the services (:mod:`sweeps.spec` and the trial kind's own checks), never here.
"""

from __future__ import annotations

from decimal import Decimal

from django.urls import reverse
from rest_framework import serializers

from sweeps import constants as c
from sweeps.models import Sweep, Trial
from sweeps.services import Figures
from workloads.api import PreviewSerializer
from workloads.registry import kind_for


class MoneySerializer(serializers.Serializer):
    spent = serializers.DecimalField(max_digits=16, decimal_places=2, help_text="Its trials' cost to now.")
    committed = serializers.DecimalField(
        max_digits=16, decimal_places=2,
        help_text="What its unfinished trials may still cost: the rest of each one's runtime limit at its price.")
    gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=2)
    committed_gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=2)
    currency = serializers.CharField()


class BestSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    name = serializers.CharField()
    value = serializers.FloatField()
    params = serializers.DictField()
    run_id = serializers.IntegerField(source="work_id",
                                      help_text="The id of the trial's work (its page and API under its kind).")


class TrialSerializer(serializers.Serializer):
    number = serializers.IntegerField(help_text="1 for the first trial (Optuna's trial 0).")
    name = serializers.CharField(help_text="The name of the trial's work: <sweep>-t001, or <sweep>-t001-2 when a run "
                                           "of the team held that name as the trial launched.")
    state = serializers.ChoiceField(choices=c.TrialState.choices)
    reason = serializers.CharField(allow_blank=True)
    params = serializers.DictField(help_text="The parameters Optuna chose, as the trial's env and args carry them.")
    run_id = serializers.IntegerField(source="work_id", allow_null=True,
                                      help_text="The id of the trial's work (null: it was refused).")
    run_state = serializers.CharField(source="work_state", allow_null=True,
                                      help_text="The state of the trial's work, in its kind's words.")
    run_url = serializers.CharField(source="work_url", allow_null=True, help_text="The page of the trial's work.")
    objective = serializers.FloatField(allow_null=True, help_text="The newest value of the objective it reported.")
    best = serializers.FloatField(allow_null=True, help_text="The best value it reported.")
    step = serializers.IntegerField(allow_null=True, help_text="The step of the newest value.")
    value = serializers.FloatField(allow_null=True, help_text="The value the study was told at its end.")
    continues = serializers.IntegerField(allow_null=True, help_text="The number of the pruned trial this one goes "
                                         "on from, from its checkpoint (null: a trial of its own).")
    continued_as = serializers.IntegerField(allow_null=True, help_text="The number of the trial that goes on from "
                                            "this pruned one (null: not continued).")
    cost = serializers.DecimalField(max_digits=16, decimal_places=2)
    gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=2)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class SweepSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    team = serializers.CharField()
    name = serializers.CharField()
    state = serializers.ChoiceField(choices=c.SweepState.choices)
    reason = serializers.CharField(allow_blank=True, help_text="Why it stopped launching or ended.")
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    run = serializers.DictField(source="base", help_text="The trials' base: their fields as creating one takes them, without a name.")
    parameters = serializers.DictField()
    objective = serializers.DictField(help_text='{"metric", "goal"}')
    sampler = serializers.ChoiceField(choices=c.Sampler.choices)
    pruner = serializers.DictField()
    parallel = serializers.IntegerField()
    max_trials = serializers.IntegerField()
    max_cost = serializers.DecimalField(max_digits=16, decimal_places=2, allow_null=True)
    max_gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=2, allow_null=True)
    seed = serializers.IntegerField()
    trial_cost = serializers.DecimalField(max_digits=16, decimal_places=2,
                                          help_text="A whole trial at the dearest price of its flavor's clusters when "
                                                    "the sweep was created: what the caps count.")
    trials = serializers.DictField(child=serializers.IntegerField(), help_text="Its trials by state.")
    best_trial = BestSerializer(allow_null=True)
    spend = MoneySerializer()
    url = serializers.CharField()


class SweepListSerializer(serializers.Serializer):
    """A list's row: the sweep without its figures (``GET /sweeps/{id}/`` has them)."""

    id = serializers.IntegerField()
    team = serializers.CharField(source="team.slug")
    name = serializers.CharField()
    state = serializers.ChoiceField(choices=c.SweepState.choices)
    reason = serializers.CharField(allow_blank=True)
    created_by = serializers.CharField(source="created_by.username")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    metric = serializers.CharField()
    goal = serializers.CharField()
    max_trials = serializers.IntegerField()


class SweepCreateSerializer(serializers.Serializer):
    """The body of ``POST /sweeps/`` for the schema (docs/sweeps.md "The sweep file"); the services check it."""

    team = serializers.CharField()
    name = serializers.CharField(max_length=c.MAX_NAME_LENGTH, help_text="Its trials are <name>-t001, …")
    run = serializers.DictField(help_text="The trials' base: a run's fields as its create takes them, without a "
                                          "name; max_runtime_minutes required.")
    parameters = serializers.DictField(help_text='{"lr": {"type": "float", "min": 1e-5, "max": 0.1, "log": true}, '
                                                 '"bs": {"type": "categorical", "choices": [16, 32]}}')
    objective = serializers.DictField(help_text='{"metric": "loss", "goal": "minimize"}')
    sampler = serializers.ChoiceField(choices=c.Sampler.choices, required=False)
    pruner = serializers.DictField(required=False, help_text='{"type": "asha", "min_resource": 100, '
                                                             '"reduction_factor": 3, "max_resource": 3000}')
    parallel = serializers.IntegerField(required=False, min_value=1, max_value=c.MAX_PARALLEL)
    max_trials = serializers.IntegerField(required=False, min_value=1, max_value=c.MAX_TRIALS)
    max_cost = serializers.DecimalField(max_digits=16, decimal_places=2, required=False, allow_null=True)
    max_gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=2, required=False, allow_null=True)
    seed = serializers.IntegerField(required=False, min_value=0)


class RungSerializer(serializers.Serializer):
    steps = serializers.IntegerField()
    trials = serializers.IntegerField(help_text="Trials that reach it if the halving goes as designed.")


class TrialPreviewSerializer(PreviewSerializer):
    cost = serializers.DecimalField(max_digits=16, decimal_places=2,
                                    help_text="A whole trial to its runtime limit, at the dearest price of its flavor's "
                                              "clusters (it may land on any): what the caps count.")
    gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=2)


class RangeSerializer(serializers.Serializer):
    low = serializers.DecimalField(max_digits=16, decimal_places=2)
    high = serializers.DecimalField(max_digits=16, decimal_places=2)
    currency = serializers.CharField(required=False)


class ShapeSerializer(serializers.Serializer):
    """The dry run (``POST /sweeps/?dry_run=1``): the sweep's shape and cost range; nothing is created."""

    trials = serializers.IntegerField()
    parallel = serializers.IntegerField()
    sampler = serializers.CharField()
    pruner = serializers.CharField()
    rungs = RungSerializer(many=True, help_text="ASHA's rungs (empty for another pruner).")
    trial = TrialPreviewSerializer(help_text="The first trial's preview, and a whole trial's cost.")
    cost = RangeSerializer(help_text="low: as the pruner's nominal shape stops trials; high: every trial to its "
                                     "runtime limit, within the cap.")
    gpu_hours = RangeSerializer()
    max_cost = serializers.DecimalField(max_digits=16, decimal_places=2, allow_null=True)
    max_gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=2, allow_null=True)
    trials_within_cap = serializers.IntegerField(allow_null=True,
                                                 help_text="Whole trials the caps allow (null: all of them).")


def _cents(amount: Decimal) -> Decimal:
    return amount.quantize(Decimal("0.01"))


def trial_answer(trial: Trial, figures: Figures) -> dict:
    work = trial.workload
    number = work.number if work is not None else None
    url = None
    if work is not None:
        url = kind_for(work.kind).model(pk=number).get_absolute_url()
    return {
        "number": trial.number, "name": trial.name, "state": trial.state,
        "reason": trial.reason, "params": trial.params, "work_id": number,
        "work_state": work.state if work is not None else None, "work_url": url, "objective": trial.objective,
        "best": trial.best, "step": trial.step, "value": trial.value,
        "continues": figures.numbers.get(trial.continues_id), "continued_as": figures.continued_as.get(trial.pk),
        "cost": _cents(figures.spend.by_trial.get(trial.workload_id, Decimal(0))),
        "gpu_hours": _cents(figures.spend.gpu_hours_by_trial.get(trial.workload_id, Decimal(0))),
        "created_at": trial.created_at, "finished_at": trial.finished_at,
    }


def sweep_answer(sweep: Sweep, figures: Figures) -> dict:
    best = figures.best
    return {
        "id": sweep.pk, "team": sweep.team.slug, "name": sweep.name, "state": sweep.state, "reason": sweep.reason,
        "created_by": sweep.created_by.username, "created_at": sweep.created_at, "finished_at": sweep.finished_at,
        "base": sweep.base, "parameters": sweep.parameters, "objective": {"metric": sweep.metric, "goal": sweep.goal},
        "sampler": sweep.sampler, "pruner": sweep.pruner, "parallel": sweep.parallel, "max_trials": sweep.max_trials,
        "max_cost": sweep.max_cost, "max_gpu_hours": sweep.max_gpu_hours, "seed": sweep.seed,
        "trial_cost": _cents(sweep.trial_cost), "trials": figures.counts,
        "best_trial": None if best is None else {
            "number": best.number, "name": best.name, "value": best.value, "params": best.params,
            "work_id": best.workload.number if best.workload is not None else None},
        "spend": {"spent": _cents(figures.spend.spent), "committed": _cents(figures.spend.committed),
                  "gpu_hours": _cents(figures.spend.gpu_hours),
                  "committed_gpu_hours": _cents(figures.spend.committed_gpu_hours), "currency": sweep.currency},
        "url": reverse("sweep-detail", args=[sweep.pk]),
    }
