"""States, reasons and bounds of training runs."""

from __future__ import annotations

from django.db import models


class RunState(models.TextChoices):
    QUEUED = "queued", "Queued"
    ADMITTED = "admitted", "Admitted"
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


#: States a run never leaves.
FINAL_STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)
#: States in which the run holds quota (a reservation).
HOLDING_STATES = (RunState.ADMITTED, RunState.PENDING, RunState.RUNNING)
#: States in which cluster objects should exist.
ON_CLUSTER_STATES = (RunState.PENDING, RunState.RUNNING)
#: The happy path, for the state timeline.
TIMELINE = (RunState.QUEUED, RunState.ADMITTED, RunState.PENDING, RunState.RUNNING, RunState.SUCCEEDED)


class RunKind(models.TextChoices):
    JOB = "Job", "Job"
    PYTORCHJOB = "PyTorchJob", "PyTorchJob"


class Priority(models.TextChoices):
    LOW = "low", "Low"
    NORMAL = "normal", "Normal"
    HIGH = "high", "High"


#: quotas.admission orders its queue by these integers (higher first).
PRIORITY_RANK = {Priority.LOW: 0, Priority.NORMAL: 1, Priority.HIGH: 2}


class Reason:
    """Named reasons (plain-words messages are built around them)."""

    SUBMITTED_TO_CLUSTER = "submitted to the cluster"
    CANCELLED_BY = "cancelled by {user}"
    OBJECTS_VANISHED = "the run's cluster objects disappeared (deleted outside Slipway?)"
    CLUSTER_REJECTED = "the cluster rejected the run: {message}"
    CLUSTER_UNREACHABLE = "the cluster could not be reached after {attempts} attempts: {message}"
    WAITING_FOR_WORKER = "admitted; waiting for a worker to create the cluster objects"


# Bounds of the submitted fields (API.md "Training runs").
NAME_MAX_LENGTH = 40
MAX_WORKERS = 64
MAX_RETRIES = 10
MAX_CPU = 256
MAX_MEMORY_GB = 2048
MAX_SHM_GB = 512
MAX_RUNTIME_MINUTES = 60 * 24 * 14  # two weeks
MAX_ARGV_ITEMS = 256
MAX_ARG_LENGTH = 4096
MAX_ENV_VARS = 100
MAX_ENV_VALUE_LENGTH = 8192
MAX_VOLUMES = 16

#: How many times the reconciler re-drives a run whose cluster objects never appeared before
#: it gives up and fails the run (a run must never stay admitted forever).
MAX_APPLY_ATTEMPTS = 10

#: Prefix of quota references and workload labels: run 42 is "run:42" / "run-42".
REF_PREFIX = "run"
