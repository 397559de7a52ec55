"""Named constants of the quotas app: admission outcomes, admission codes and priorities, the zero of money.

Admission codes (:class:`AdmissionCode`) follow kueue's naming style (``WaitingForQuota``,
``NoMatchingFlavor``): stable identifiers that callers and tests compare against, while the
plain-words message that goes with each decision is for people. They are one of three reason
vocabularies, beside a workload's reason codes and the messages of its ``reason``
(:mod:`workloads.constants`, docs/glossary.md "reason").
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models

from cluster import specs

#: Zero, as money and ledger amounts count it (a Decimal). Here rather than in the ledger, so
#: admission's pure rule uses the same zero without importing the ledger.
ZERO = Decimal(0)


class Outcome:
    ADMIT = "admit"
    QUEUE = "queue"
    REJECT = "reject"


class DecisionLabel:
    """The ``decision`` label of ``slipway_admissions_total`` (:attr:`quotas.decide.Decision.label`)."""

    ADMITTED = "admitted"  # within the team's nominal quota
    BORROWED = "borrowed"  # with units its cohort lends
    QUEUED = "queued"
    REJECTED = "rejected"


class AdmissionCode:
    """Why admission decided as it did: the code of a :class:`quotas.decide.Decision`'s ``reason`` (its words beside it)."""

    ADMITTED = "Admitted"
    WAITING_FOR_QUOTA = "WaitingForQuota"
    WAITING_FOR_BUDGET = "WaitingForBudget"
    WAITING_FOR_CLUSTER = "WaitingForCluster"  # every cluster that offers the flavor is draining, degraded or lost
    BUDGET_EXHAUSTED = "BudgetExhausted"
    BUDGET_ALERT = "BudgetAlert"  # burst only: past the alert threshold no burst is granted
    NO_QUOTA_FOR_FLAVOR = "NoQuotaForFlavor"
    EXCEEDS_QUOTA = "ExceedsQuota"
    EXCEEDS_LARGEST_NODE = "ExceedsLargestNode"
    UNKNOWN_FLAVOR = "UnknownFlavor"
    INACTIVE_FLAVOR = "InactiveFlavor"
    INVALID_REQUEST = "InvalidRequest"


#: Admission codes that say the flavor is what to change: unknown, no longer offered, or not in the team's quota.
FLAVOR_CODES = (AdmissionCode.UNKNOWN_FLAVOR, AdmissionCode.INACTIVE_FLAVOR, AdmissionCode.NO_QUOTA_FOR_FLAVOR)

#: Admission codes that can never turn into an admission by waiting (the caller answers 400).
PERMANENT_CODES = (
    AdmissionCode.NO_QUOTA_FOR_FLAVOR,
    AdmissionCode.EXCEEDS_QUOTA,
    AdmissionCode.EXCEEDS_LARGEST_NODE,
    AdmissionCode.UNKNOWN_FLAVOR,
    AdmissionCode.INACTIVE_FLAVOR,
    AdmissionCode.INVALID_REQUEST,
)


class Priority(models.TextChoices):
    """The one priority vocabulary of every workload kind; it orders a team's queue.

    Stored on queue entries and holds as its :attr:`rank` (higher is admitted first),
    so the queue sorts by an integer column.
    """

    LOW = "low", "Low"
    NORMAL = "normal", "Normal"
    HIGH = "high", "High"

    @property
    def rank(self) -> int:
        return list(Priority).index(self)

    @classmethod
    def from_rank(cls, rank: int) -> Priority:
        return list(cls)[rank]

    @classmethod
    def rank_choices(cls) -> list[tuple[int, str]]:
        return [(p.rank, p.value) for p in cls]


class Sharing(models.TextChoices):
    """How a flavor's units share a physical GPU (:data:`cluster.specs.SHARINGS`, the one vocabulary)."""

    NONE = specs.SHARING_NONE, specs.SHARING_LABELS[specs.SHARING_NONE]
    MIG = specs.SHARING_MIG, specs.SHARING_LABELS[specs.SHARING_MIG]
    TIME_SLICING = specs.SHARING_TIME_SLICING, specs.SHARING_LABELS[specs.SHARING_TIME_SLICING]
    MPS = specs.SHARING_MPS, specs.SHARING_LABELS[specs.SHARING_MPS]


#: The most units one GPU may be cut into by time-slicing or MPS (the MPS daemon serves at most 48
#: clients per GPU on Volta and newer; more replicas than that would never all run).
MAX_REPLICAS = 48
#: The resource names a time-sliced or MPS flavor may request: the whole-GPU name the device plugin
#: keeps with ``renameByDefault: false``, or the ``.shared`` name it advertises when renamed.
SHARED_RESOURCE_NAMES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
