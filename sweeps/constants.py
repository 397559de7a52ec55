"""Sweeps' vocabularies and bounds (docs/sweeps.md)."""

from __future__ import annotations

from django.db import models


class SweepState(models.TextChoices):
    RUNNING = "running", "Running"  #: launching trials and following them
    STOPPING = "stopping", "Stopping"  #: stopped by a user: its trials are saving and stopping
    COMPLETED = "completed", "Completed"  #: no trial left to launch (max_trials, the grid, or a cap), none active
    STOPPED = "stopped", "Stopped"  #: stopped by a user, every trial ended


#: States a sweep never leaves; states in which its driver still acts.
FINAL_STATES = (SweepState.COMPLETED, SweepState.STOPPED)
LIVE_STATES = (SweepState.RUNNING, SweepState.STOPPING)


class TrialState(models.TextChoices):
    """A trial as its sweep sees it (its work has a state of its own, in its kind's words)."""

    ACTIVE = "active", "Active"  #: its work is queued or holds quota
    COMPLETED = "completed", "Completed"  #: ended with a value of the objective
    PRUNED = "pruned", "Pruned"  #: stopped early by the pruner, its checkpoint kept
    FAILED = "failed", "Failed"  #: failed, or ended with no value of the objective
    STOPPED = "stopped", "Stopped"  #: ended by a user or with its sweep


class Sampler(models.TextChoices):
    TPE = "tpe", "TPE (Optuna's TPESampler)"
    RANDOM = "random", "Random (Optuna's RandomSampler)"
    GRID = "grid", "Grid (Optuna's GridSampler)"


class PrunerType(models.TextChoices):
    NONE = "none", "None"
    MEDIAN = "median", "Median stopping (Optuna's MedianPruner)"
    ASHA = "asha", "ASHA (Optuna's SuccessiveHalvingPruner)"


class Goal(models.TextChoices):
    MINIMIZE = "minimize", "Minimize"
    MAXIMIZE = "maximize", "Maximize"


#: A trial's name is its sweep's and its number, ``<sweep>-t007``: the sweep's name leaves room for the suffix.
TRIAL_SUFFIX = "-t{number:03d}"
MAX_NAME_LENGTH = 35
MAX_TRIALS = 999
MAX_PARALLEL = 32
MAX_PARAMETERS = 16
MAX_CHOICES = 64
MAX_GRID_POINTS = 10_000
DEFAULT_MAX_TRIALS = 20
DEFAULT_PARALLEL = 2
#: Optuna's MedianPruner's defaults (n_startup_trials, n_warmup_steps), and ASHA's reduction factor.
DEFAULT_STARTUP_TRIALS, DEFAULT_WARMUP_STEPS, DEFAULT_REDUCTION_FACTOR = 5, 0, 3

AUDIT_CREATED, AUDIT_STOPPED, AUDIT_CONTINUED = "sweep_created", "sweep_stopped", "sweep_trial_continued"
AUDIT_ACTIONS = {AUDIT_CREATED: "Sweep created", AUDIT_STOPPED: "Sweep stopped",
                 AUDIT_CONTINUED: "Sweep trial continued"}
