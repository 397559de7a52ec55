"""Named constants of the quotas app: admission outcomes, reasons and priorities.

Reasons follow kueue's naming style (``WaitingForQuota``, ``NoMatchingFlavor``): stable
identifiers that callers and tests compare against, while the plain-words message that goes
with each decision is for people.
"""

from __future__ import annotations


class Outcome:
    ADMIT = "admit"
    QUEUE = "queue"
    REJECT = "reject"


class Reason:
    ADMITTED = "Admitted"
    WAITING_FOR_QUOTA = "WaitingForQuota"
    BUDGET_EXHAUSTED = "BudgetExhausted"
    NO_QUOTA_FOR_FLAVOR = "NoQuotaForFlavor"
    EXCEEDS_QUOTA = "ExceedsQuota"
    EXCEEDS_LARGEST_NODE = "ExceedsLargestNode"
    UNKNOWN_FLAVOR = "UnknownFlavor"
    INACTIVE_FLAVOR = "InactiveFlavor"
    INVALID_REQUEST = "InvalidRequest"


#: Reasons that can never turn into an admission by waiting (the caller answers 400).
PERMANENT_REASONS = (
    Reason.NO_QUOTA_FOR_FLAVOR,
    Reason.EXCEEDS_QUOTA,
    Reason.EXCEEDS_LARGEST_NODE,
    Reason.UNKNOWN_FLAVOR,
    Reason.INACTIVE_FLAVOR,
    Reason.INVALID_REQUEST,
)


class Priority:
    """Queue priorities: higher numbers are admitted first."""

    LOW = 0
    NORMAL = 1
    HIGH = 2

    CHOICES = ((LOW, "low"), (NORMAL, "normal"), (HIGH, "high"))
