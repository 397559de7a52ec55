"""Sweeps' tables (docs/sweeps.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from sweeps import constants as c

# -- Optuna's study storage (sweeps.storage) --
#
# The rows behind sweeps.storage.DjangoStorage, Optuna's storage over the portal's own database, so that
# a study commits and rolls back with the rest of the portal (that module says why not Optuna's own).
# Written and read through the storage only: it encodes what JSON cannot hold (NaN and ±inf) and turns
# the rows back into Optuna's objects. Optuna is not imported here: every process loads the models.


class StudyTrialState(models.IntegerChoices):
    """A trial's state, with the numbers of Optuna's ``TrialState`` (tests/sweeps/test_storage.py checks
    they stay equal), so the column reads the same in SQL as in Optuna."""

    RUNNING = 0
    COMPLETE = 1
    PRUNED = 2
    FAIL = 3
    WAITING = 4


class Study(models.Model):
    """One Optuna study: its name, what it optimizes and its attributes; its trials are :class:`StudyTrial`.

    Optuna's study id is the primary key.
    """

    #: Optuna's study name, unique among the studies (Optuna allows the empty name).
    name = models.CharField(max_length=300, unique=True)
    #: The objectives' directions, one per objective, by Optuna's ``StudyDirection`` name: ``["MINIMIZE"]``.
    directions = models.JSONField()
    #: ``study.user_attrs``: ``{key: the value as JSON text}``; text, so NaN and ±inf inside a value survive.
    user_attrs = models.JSONField(default=dict)
    #: ``study.system_attrs`` (Optuna's own bookkeeping), encoded as ``user_attrs``.
    system_attrs = models.JSONField(default=dict)
    #: ``{parameter name: distribution JSON}``: the distribution each parameter was first set with in this
    #: study; a later trial's must be compatible with it (same kind, same categorical choices), or Optuna's
    #: storage contract refuses it. Kept here so that the check reads one row, not every trial's.
    param_distributions = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "studies"

    def __str__(self) -> str:
        return self.name


class StudyTrial(models.Model):
    """One trial of a :class:`Study`, as Optuna's ``FrozenTrial`` holds it.

    Optuna's trial id is the primary key; ``number`` counts the study's trials from 0. The float columns
    hold finite floats as JSON numbers and the others as the strings ``"inf"``, ``"-inf"`` and ``"nan"``
    (JSON has no such numbers, and PostgreSQL's jsonb refuses Python's ``NaN``).
    """

    # No index of its own: the (study, number) constraint's index leads with the study.
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="trials", db_index=False)
    #: 0, 1, 2 … in the order the study's trials were created; allocated under the study's row lock.
    number = models.PositiveIntegerField()
    state = models.PositiveSmallIntegerField(choices=StudyTrialState.choices)
    #: The objective values, one per direction of the study; null until the trial reports them.
    values = models.JSONField(null=True, blank=True)
    #: When it started running (null while it waits) and when it finished (null until then).
    datetime_start = models.DateTimeField(null=True, blank=True)
    datetime_complete = models.DateTimeField(null=True, blank=True)
    #: The suggested parameters in the order they were suggested (Optuna keeps that order, and jsonb
    #: would sort an object's keys): ``[{"name", "value": the internal float, "distribution": its JSON
    #: text (optuna.distributions.distribution_to_json; text, since categorical choices may be NaN)}]``.
    params = models.JSONField(default=list)
    #: What the objective reported along the way: ``{str(step): float}``.
    intermediate_values = models.JSONField(default=dict)
    #: ``trial.user_attrs`` and ``trial.system_attrs``, encoded as the study's.
    user_attrs = models.JSONField(default=dict)
    system_attrs = models.JSONField(default=dict)

    class Meta:
        constraints = [
            # The backstop of the number allocated under the study's row lock (sweeps.storage).
            models.UniqueConstraint(fields=["study", "number"], name="sweeps_studytrial_number_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.study_id} #{self.number}"


# -- Sweeps and their trials --------------------------------------------------------------------------------


class Sweep(models.Model):
    """A team's hyperparameter search (docs/sweeps.md): the base of its trials, the space Optuna samples, the
    objective, the sampler and pruner, how many trials at once and in all, and its caps in money and GPU-hours.

    Not a workload: it holds no units and is never admitted; its trials are (:class:`Trial`: each one the team's
    work of the trial kind, through the one admission). Its study is Optuna's record of the search
    (:class:`Study`, in these tables: :mod:`sweeps.storage`). Its state moves by conditional updates; the driver
    (:mod:`sweeps.driver`) holds its row while it acts, so two workers never launch or judge for one sweep at once.
    """

    team = models.ForeignKey("portal.Team", on_delete=models.PROTECT, related_name="sweeps")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="sweeps")
    name = models.CharField(max_length=c.MAX_NAME_LENGTH)
    state = models.CharField(max_length=16, choices=c.SweepState.choices, default=c.SweepState.RUNNING,
                             db_index=True)
    #: Why it stopped launching, or ended ("" while it runs as asked).
    reason = models.CharField(max_length=500, blank=True)
    #: Its trials' fields as the trial kind's create takes them, without a name (its noun's field of the request).
    base = models.JSONField(default=dict)
    parameters = models.JSONField(default=dict)  #: {name: {"type", …}} as checked (sweeps.spec.Parameter.as_field)
    metric = models.CharField(max_length=64)
    goal = models.CharField(max_length=8, choices=c.Goal.choices, default=c.Goal.MINIMIZE)
    sampler = models.CharField(max_length=8, choices=c.Sampler.choices, default=c.Sampler.TPE)
    pruner = models.JSONField(default=dict)  #: sweeps.spec.Pruner.as_field
    parallel = models.PositiveSmallIntegerField(default=c.DEFAULT_PARALLEL)
    max_trials = models.PositiveSmallIntegerField(default=c.DEFAULT_MAX_TRIALS)
    max_cost = models.DecimalField(max_digits=16, decimal_places=2, null=True, blank=True)
    max_gpu_hours = models.DecimalField(max_digits=16, decimal_places=2, null=True, blank=True)
    #: Seeds its sampler: each trial's draw is seeded from it and the trial's number (sweeps.study.sampler_for).
    seed = models.PositiveIntegerField(default=0)
    #: A whole trial at the dearest price of its flavor's clusters when the sweep was created: its units' cost per
    #: hour times its runtime limit (what the caps count for a trial not placed yet), and the same in GPU-hours.
    trial_cost = models.DecimalField(max_digits=20, decimal_places=10)
    trial_gpu_hours = models.DecimalField(max_digits=20, decimal_places=10)
    currency = models.CharField(max_length=3)
    #: False once it stopped launching (a cap, a refused trial): it ends when its active trials have.
    launching = models.BooleanField(default=True)
    study = models.OneToOneField(Study, on_delete=models.PROTECT, related_name="sweep")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    stopped_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], condition=Q(state__in=c.LIVE_STATES),
                                               name="uniq_live_sweep_name")]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.name}"

    @property
    def is_final(self) -> bool:
        return self.state in c.FINAL_STATES

    def trial_name(self, number: int) -> str:
        return f"{self.name}{c.TRIAL_SUFFIX.format(number=number)}"

    @property
    def secret_ref(self) -> str:
        """Where its trials' secret env is stored, sealed (:func:`workloads.secrets.seal_apart`): ``sweep:12``."""
        return f"sweep:{self.pk}"


class Trial(models.Model):
    """One trial of a sweep: Optuna's trial (its number and id in the study) and the work that runs it.

    ``number`` counts from 1 (trial 1 is Optuna's trial 0) and names the work (``<sweep>-t001``). ``workload``
    is None only for a trial whose work was refused at submission (its ``reason`` says why). What the work
    reported of the objective is followed here as the driver reads it: the newest value and its step, the best,
    and the last step told to the study (a value is told once: ``reported_step``), so a driver killed between two
    reads re-reads from there and loses nothing.
    """

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveIntegerField()
    study_trial = models.OneToOneField(StudyTrial, on_delete=models.PROTECT, related_name="+")
    workload = models.OneToOneField("workloads.Workload", null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="trial")
    params = models.JSONField(default=dict)
    state = models.CharField(max_length=10, choices=c.TrialState.choices, default=c.TrialState.ACTIVE, db_index=True)
    reason = models.CharField(max_length=500, blank=True)
    objective = models.FloatField(null=True, blank=True)  #: the newest value reported
    best = models.FloatField(null=True, blank=True)  #: the best value reported (by the sweep's goal)
    step = models.BigIntegerField(null=True, blank=True)  #: the step of the newest value
    reported_step = models.BigIntegerField(default=-1)  #: the last step told to the study
    #: The value the study was told at its end (completed: its last value; pruned: the value it was pruned at).
    value = models.FloatField(null=True, blank=True)
    #: The pruned trial this one goes on from, from its checkpoint (docs/sweeps.md "Continue a pruned trial"):
    #: the same parameters, its own number and work; never judged by the pruner, not counted in ``max_trials``.
    continues = models.OneToOneField("self", null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="continued_by")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["sweep", "number"]
        constraints = [models.UniqueConstraint(fields=["sweep", "number"], name="uniq_sweep_trial_number")]

    def __str__(self) -> str:
        return f"{self.sweep.name} trial {self.number}"

    @property
    def name(self) -> str:
        """Its work's name: ``<sweep>-t007``, or the one its launch chose when a run of the team held that
        (:func:`sweeps.driver.free_name`); the numbered name while it has no work."""
        work = self.workload
        return work.name if work is not None else self.sweep.trial_name(self.number)
