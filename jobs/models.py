"""Training runs: a workload kind (see :mod:`workloads`; the words as docs/glossary.md defines them).

A :class:`TrainingRun` is what a data scientist asked for (the submitted fields, kept as
submitted) on top of what every workload has (:class:`workloads.models.Workload`: team,
state, timestamps, billing). State moves only through conditional updates.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils.dateparse import parse_datetime

from cluster.training import (
    ASSUMED,
    DEFAULT_FRAMEWORK,
    FRAMEWORKS,
    TRAINING_APIS,
    TRAINJOB,
    V1_FRAMEWORKS,
    runtime_for,
)
from core.priority import Priority
from jobs.constants import ACTIVE_STATES, FINAL_STATES, HOLDING_STATES, REF_PREFIX, RunResourceKind, RunState
from jobs.progress import TrainerReport
from workloads.models import Workload, detail_link


class TrainingRun(Workload):
    KIND_PREFIX = REF_PREFIX
    FINAL_STATES = FINAL_STATES
    HOLDING_STATES = HOLDING_STATES
    ACTIVE_STATES = ACTIVE_STATES
    STATES = RunState
    INITIAL_STATE = RunState.QUEUED

    id = models.BigAutoField(primary_key=True)  # the number its refs and API ids carry
    workload = detail_link()

    # What was submitted (docs/api.md field names), beyond the shared name, flavor and spot.
    image = models.CharField(max_length=300)
    command = models.JSONField(default=list)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    gpus_per_worker = models.PositiveIntegerField(default=1)
    workers = models.PositiveIntegerField(default=1)
    #: What its distributed training runs (:data:`cluster.training.FRAMEWORKS`; docs/training.md "Frameworks").
    framework = models.CharField(max_length=20, choices=[(f, f) for f in FRAMEWORKS], default=DEFAULT_FRAMEWORK)
    cpu = models.FloatField(null=True, blank=True)
    memory_gb = models.FloatField(null=True, blank=True)
    shm_gb = models.FloatField(null=True, blank=True)
    max_retries = models.PositiveSmallIntegerField(default=2)
    max_runtime_minutes = models.PositiveIntegerField(null=True, blank=True)
    priority = models.CharField(max_length=10, choices=Priority.choices, default=Priority.NORMAL)
    volumes = models.JSONField(default=list, blank=True)
    #: The checkpoint contract as submitted (``{"grace_seconds", "volume"}``), None without one.
    checkpoint = models.JSONField(null=True, blank=True, default=None)
    #: The size and storage class of the claim Slipway provides for the contract (``<run>-checkpoints``),
    #: fixed when the run is submitted: a claim's size cannot shrink and its class cannot change, and
    #: each attempt applies the claim again, so a changed ``SLIPWAY_CHECKPOINT_STORAGE`` (or class)
    #: must not reach a claim that exists. "" without a provided claim (no contract, or the team's).
    checkpoint_storage = models.CharField(max_length=64, blank=True, default="")
    checkpoint_storage_class = models.CharField(max_length=253, blank=True, default="")
    #: The run whose checkpoint this one goes on from (a sweep's continued trial, :mod:`jobs.trials`): it mounts
    #: that run's claim, on that run's cluster, and starts from its last checkpoint. Its claim then follows this
    #: run (the claim is relabelled with this run's name at its first apply, and the cleanup of kept objects
    #: keeps it while this run lives: ``Lifecycle.resumes``). None for every other run.
    resumes = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="resumed_by")
    #: The provided claim's name when it is not the run's own ``<object name>-checkpoints``: a continued trial
    #: mounts the claim of the run it resumes. "" otherwise.
    checkpoint_claim = models.CharField(max_length=253, blank=True, default="")

    # The last checkpoint the run reported (jobs.checkpoints): the newest report wins, whatever
    # its step (a run resumed from an older checkpoint reports lower steps again).
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    last_checkpoint_step = models.PositiveBigIntegerField(null=True, blank=True)
    last_checkpoint_path = models.CharField(max_length=1000, blank=True, default="")
    #: SHA-256 of the run token (jobs.checkpoints), "" without the contract; the token itself is
    #: sealed with the run's secret env and forgotten when the run ends.
    run_token_hash = models.CharField(max_length=64, blank=True, default="", db_index=True)
    #: What a TrainJob's trainer last said of its progress (``trainerStatus``, Trainer v2 only; docs/training.md
    #: "Progress"): ``{"at", "percent", "remaining_seconds", "metrics": [[name, value], …]}``, None when nothing.
    trainer_status = models.JSONField(null=True, blank=True, default=None)
    #: The training API its current attempt is applied with (:data:`cluster.training.TRAINING_APIS`): its cluster's
    #: when the attempt's apply began, fixed then (:meth:`jobs.kind.TrainingKind.fix_applied`), so a cluster that
    #: moves to another API meanwhile changes nothing of what runs — work applied under v1 finishes under v1
    #: (docs/training.md "Moving a cluster from v1 to v2"). Its next attempt takes its cluster's API anew. ""
    #: until an apply began (runs of before it was kept: what their cluster had at the upgrade, migration 0019).
    applied_training_api = models.CharField(max_length=20, blank=True, default="",
                                            choices=[(api, api) for api in TRAINING_APIS])
    #: The ClusterTrainingRuntime its current attempt's TrainJob names (``spec.runtimeRef``, which the API server
    #: refuses to change once the TrainJob exists), fixed with :attr:`applied_training_api`: a runtime its cluster
    #: gained meanwhile (discovery finds ``slipway-pytorch`` beside the one it was applied with) would make every
    #: later try of the attempt a 422, and its manifest show a runtime it does not run on. "" until an apply began
    #: (and for runs applied before it was kept: derived from the cluster's runtimes, as then).
    applied_runtime = models.CharField(max_length=253, blank=True, default="")

    def get_absolute_url(self) -> str:
        return reverse("jobs:run-detail", args=[self.pk])

    @property
    def resource_kind(self) -> str:
        """The resource kind of its main object: ``Job`` for one worker; for several, ``TrainJob`` on a Trainer v2
        cluster, else ``PyTorchJob`` (:attr:`training_api`)."""
        if self.workers == 1:
            return RunResourceKind.JOB
        return RunResourceKind.TRAINJOB if self.training_api == TRAINJOB else RunResourceKind.PYTORCHJOB

    @property
    def trainer_report(self) -> TrainerReport | None:
        """The trainer's last word of its current attempt (:class:`jobs.progress.TrainerReport`); None without one,
        or when it is an earlier attempt's (said before this attempt's pods started, or none started yet)."""
        found = self.trainer_status
        if not found:
            return None
        at = parse_datetime(str(found.get("at") or ""))
        if at is None or (self.attempt > 1 and (self.attempt_started is None or at < self.attempt_started)):
            return None
        return TrainerReport(at, found.get("percent"), found.get("remaining_seconds"),
                             tuple((str(n), str(v)) for n, v in found.get("metrics") or []))

    @property
    def training_api(self) -> str:
        """The training API its distributed training goes to: once its attempt's apply began, the one it was
        applied with (:attr:`applied_training_api`: what its objects are, whatever its cluster moved to since);
        before that its cluster's (:func:`cluster.training.effective`); not placed yet, Trainer v2 for a framework
        only Trainer v2 runs, else the v1 PyTorchJob (what Slipway assumes of a cluster until discovery says:
        :data:`cluster.training.ASSUMED`). What its manifest shows until placement decides (docs/training.md
        "The TrainJob")."""
        if self.applied_training_api and self.apply_began:
            return self.applied_training_api
        if self.cluster_id is not None:
            return self.cluster.effective_training_api
        return TRAINJOB if self.framework not in V1_FRAMEWORKS else ASSUMED

    @property
    def training_runtime(self) -> str:
        """The ClusterTrainingRuntime its TrainJob names: once its attempt's apply began, the one it was applied
        with (:attr:`applied_runtime`); before that its cluster's choice now (:func:`cluster.training.runtime_for`)."""
        if self.applied_runtime and self.apply_began:
            return self.applied_runtime
        return runtime_for(self.cluster.runtimes if self.cluster_id else (), self.framework)

    @property
    def apply_began(self) -> bool:
        """Whether its current attempt's apply began: it was applied, or an apply is being tried. Every move that
        starts the apply afresh (a requeue as its next attempt, a withdrawal to another cluster, nodes given back)
        resets ``apply_attempts`` and ``applied_at``: what was fixed for the attempt before no longer holds."""
        return self.applied_at is not None or self.apply_attempts > 0

    @property
    def has_checkpoint_contract(self) -> bool:
        return self.checkpoint is not None

    @property
    def last_checkpoint(self) -> dict | None:
        """``{"at", "step", "path"}`` of the last reported checkpoint, or None (docs/api.md)."""
        if self.last_checkpoint_at is None:
            return None
        return {"at": self.last_checkpoint_at, "step": self.last_checkpoint_step, "path": self.last_checkpoint_path}

    @property
    def total_units(self) -> int:
        return self.gpus_per_worker * self.workers

    @property
    def placement_shape(self) -> tuple[int, int]:
        """All its workers' units, one worker's per node."""
        return self.total_units, self.gpus_per_worker

    @property
    def training_framework(self) -> str:
        """Several workers are distributed training, which only a cluster whose training API takes the run's framework
        runs (docs/training.md); one worker is a plain Job, which needs none."""
        return self.framework if self.workers > 1 else ""

    @property
    def estimated_cost_per_hour(self) -> Decimal:
        return self.cost_per_hour_at(self.total_units)

    @property
    def estimated_total_cost(self) -> Decimal | None:
        """At most this, when it has a runtime limit (docs/api.md ``estimated_total_cost``); else unknown."""
        if self.max_runtime_minutes is None:
            return None
        return self.estimated_cost_per_hour * self.max_runtime_minutes / 60


class LaterDemoRun(models.Model):
    """A demo run ``manage.py seed_demo`` submits some minutes after seeding, not at once.

    The demo's reclaim needs time: a team borrows its cohort's idle GPUs at seed time, and
    only later does the lender submit work of its own and take them back. There is no clock
    for "later" in Celery's beat schedule alone, so the run waits here with its time;
    :func:`jobs.demo.submit_due_demo_runs` (beat, every few seconds) submits it through
    :func:`jobs.services.submit_run` like any run once it is due, and records what happened.
    """

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    spec = models.JSONField(help_text="The run's fields, as POST /runs/ takes them.")
    due_at = models.DateTimeField(db_index=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=300, blank=True, help_text="The run submitted, or why it was not.")

    class Meta:
        ordering = ["due_at", "pk"]

    def __str__(self) -> str:
        return f"{self.team_id}: {self.spec.get('name', '?')} at {self.due_at:%H:%M:%S}"


class RunMetric(models.Model):
    """One training metric value of a run at one step (:mod:`jobs.metrics`): ``loss`` at step 200.

    One row per (run, name, step): a value reported again for the same step replaces the one
    stored (the last report wins, as for checkpoints: an attempt that resumes from an older
    checkpoint counts those steps again, and its values are the ones that now hold). The unique
    constraint's index is also the charts' index: a run's series by name, in step order.
    """

    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="metric_points")
    name = models.CharField(max_length=64)
    step = models.PositiveBigIntegerField()
    value = models.FloatField()
    recorded_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "name", "step"], name="uniq_run_metric_step")]

    def __str__(self) -> str:
        return f"run {self.run_id} {self.name}@{self.step}={self.value:g}"


class RunProgress(models.Model):
    """A run's progress as it last reported it, and the rate of it (:mod:`jobs.progress` folds the reports)."""

    run = models.OneToOneField(TrainingRun, on_delete=models.CASCADE, primary_key=True, related_name="progress")
    step = models.PositiveBigIntegerField()
    total = models.PositiveBigIntegerField()
    #: When the last report was made (a log line's time stamp, else when it was received).
    at = models.DateTimeField()
    window_step = models.PositiveBigIntegerField()
    window_at = models.DateTimeField()
    #: Steps per second (None: not measured yet).
    rate = models.FloatField(null=True, blank=True)

    def __str__(self) -> str:
        return f"run {self.run_id}: {self.step} of {self.total}"


class RunLogCursor(models.Model):
    """Where the stdout reader (:func:`jobs.metrics.read_run_logs`) is in a run's log."""

    run = models.OneToOneField(TrainingRun, on_delete=models.CASCADE, primary_key=True, related_name="log_cursor")
    #: The time stamp of the last line read: the next read asks the cluster for lines from then on.
    since = models.DateTimeField(null=True, blank=True)
    #: When it was last read (the reader takes the runs read longest ago first).
    read_at = models.DateTimeField(db_index=True)
    #: Its log was read once more after it ended: it is not read again.
    done = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"run {self.run_id} log read at {self.read_at:%H:%M:%S}"
