"""Named constants of the quotas app: admission outcomes and admission codes.

The priorities admission orders by are :class:`core.priority.Priority`; the zero of money is
:data:`core.money.ZERO`; how a flavor shares a GPU is :class:`fleet.constants.Sharing`.

Admission codes (:class:`AdmissionCode`) follow kueue's naming style (``WaitingForQuota``,
``NoMatchingFlavor``): stable identifiers that callers and tests compare against, while the
plain-words message that goes with each decision is for people. They are one of three reason
vocabularies, beside a workload's reason codes and the messages of its ``reason``
(:mod:`workloads.constants`, docs/glossary.md "reason").
"""

from __future__ import annotations


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
