"""Messages and limits every workload kind shares.

A reason is a pair, a code and its words (:class:`cluster.reasons.Reason`); the codes and words come
in three vocabularies, named apart (docs/glossary.md "reason"):

* *admission codes* (:class:`quotas.constants.AdmissionCode`, kueue style: ``WaitingForQuota``) — why
  admission decided as it did, the code of a :class:`quotas.decide.Decision`'s reason;
* *reason codes* (:class:`workloads.models.ReasonCode`: ``queued``, ``preempted``…) — stored in a
  workload's ``reason_code`` beside its words, what code branches on;
* *messages* (:class:`Message` below) — templates of the plain words a workload's ``reason``
  field shows people (which also holds admission's messages and the cluster's own words).
"""

from __future__ import annotations


class Message:
    """Plain-words templates for a workload's ``reason`` (``{noun}`` is "run", "endpoint", …); the code
    that sets one sets its :class:`~workloads.models.ReasonCode` too."""

    WAITING_FOR_WORKER = "admitted; waiting for a worker to create the cluster objects"
    SUBMITTED_TO_CLUSTER = "submitted to the cluster"
    CANCELLED_BY = "cancelled by {user}"
    DELETED_BY = "deleted by {user}"
    OBJECTS_VANISHED = "the {noun}'s cluster objects disappeared (deleted outside Slipway?)"
    CLUSTER_REJECTED = "the cluster rejected the {noun}: {message}"
    CLUSTER_UNREACHABLE = "the cluster could not be reached after {attempts} attempts: {message}"
    CLUSTER_LOST = "cluster {cluster} unreachable since {since}"
    STOPPED_BY_BUDGET = "stopped: the team's monthly budget is spent (its policy stops running work)"


#: How many times the reconciler re-drives a workload whose cluster objects never appeared
#: before it gives up and fails it (a workload must never stay admitted forever).
MAX_APPLY_ATTEMPTS = 10

#: Workloads whose billing moves in one transaction of the steady batch: bounds how long
#: their rows stay locked when an hour boundary closes every running workload's segment.
STEADY_BATCH = 500

# Bounds of the fields every kind shares (docs/api.md: names ≤ 40 characters).
NAME_MAX_LENGTH = 40
#: Units of a flavor (docs/glossary.md "unit") one worker or replica may ask for (no node has more).
MAX_UNITS_PER_NODE = 64
MAX_ARGV_ITEMS = 256
MAX_ARG_LENGTH = 4096
MAX_ENV_VARS = 100
MAX_ENV_VALUE_LENGTH = 8192

#: What pages and the API show in place of a secret env value (the value itself never leaves).
SECRET_MASK = "••••••"
MAX_VOLUMES = 16
#: ``gpu_memory_gb`` (what each pod needs of GPU memory) at most: more than any one GPU has, so a typo
#: is refused rather than advised about.
MAX_GPU_MEMORY_GB = 1024
#: The sandbox's knob for a pod's simulated GPU memory use: set from ``gpu_memory_gb`` when given.
SIM_GPU_MEMORY_ENV = "SLIPWAY_SIM_GPU_MEMORY_GB"
