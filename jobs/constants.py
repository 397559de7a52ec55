"""States and bounds of training runs (shared messages: :mod:`workloads.constants`)."""

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
    #: Stopped early by its sweep's pruner, with its checkpoint saved (docs/sweeps.md "Pruning"): never "failed".
    PRUNED = "pruned", "Pruned"


#: States a run never leaves.
FINAL_STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.PRUNED)
#: States in which the run holds quota (a hold).
HOLDING_STATES = (RunState.ADMITTED, RunState.PENDING, RunState.RUNNING)
#: Active: queued or holding quota (docs/glossary.md) — for a run, every state but the final ones.
ACTIVE_STATES = (RunState.QUEUED, *HOLDING_STATES)
#: The happy path, for the state timeline.
TIMELINE = (RunState.QUEUED, RunState.ADMITTED, RunState.PENDING, RunState.RUNNING, RunState.SUCCEEDED)


class RunResourceKind(models.TextChoices):
    """The resource kind that runs a training run (docs/glossary.md "resource kind"; not a workload
    kind: both are runs). The API shows it as ``resource_kind``."""

    JOB = "Job", "Job"
    PYTORCHJOB = "PyTorchJob", "PyTorchJob"
    TRAINJOB = "TrainJob", "TrainJob"


# Bounds of the submitted fields (docs/api.md "Training runs").
MAX_WORKERS = 64
MAX_RETRIES = 10
MAX_CPU = 256
MAX_MEMORY_GB = 2048
MAX_SHM_GB = 512
MAX_RUNTIME_MINUTES = 60 * 24 * 14  # two weeks

#: The checkpoint contract's grace (docs/api.md): SIGTERM, then this long to save before SIGKILL.
DEFAULT_CHECKPOINT_GRACE_SECONDS = 60
MAX_CHECKPOINT_GRACE_SECONDS = 600
#: The keys a ``checkpoint`` object may have (anything else is refused, not dropped).
CHECKPOINT_KEYS = ("grace_seconds", "volume")
#: Longest checkpoint path a run may report (it becomes SLIPWAY_RESUME_FROM of the next attempt).
MAX_CHECKPOINT_PATH = 1000

#: The kind's identity prefix: run 42 is "run:42" in quotas and the ledger, "run-42" on the cluster.
REF_PREFIX = "run"


# Audit actions of runs, declared with the kind (RunKind.audit_actions): the audit vocabulary learns them
# from the registry (teams.models.audit_actions), so teams/ names no kind's actions.
AUDIT_SUBMITTED = "run_submitted"
AUDIT_CANCELLED = "run_cancelled"
AUDIT_ACTIONS = {AUDIT_SUBMITTED: "Run submitted", AUDIT_CANCELLED: "Run cancelled"}
