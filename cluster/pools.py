"""Elastic GPU node pools (docs/pools.md): the rules for capacity that grows and shrinks. Pure.

A *pool* is one cluster's nodes of one flavor that an autoscaler (Cluster Autoscaler or Karpenter)
adds and removes between ``min_nodes`` and ``max_nodes``. Each node offers the flavor's
``units_per_node``. Two provisioning modes:

* ``atomic``: Slipway asks for a workload's nodes all at once with a ``ProvisioningRequest`` of the
  ``best-effort-atomic-scale-up`` class (Cluster Autoscaler provisions every pod set or none) and
  creates the workload only once it is ``Provisioned``: a gang never starts, and is never billed,
  on a pool that built 3 of its 4 nodes;
* ``any``: the autoscaler adds nodes for pending pods as they come (no request), node by node.

What this module decides, for the portal's cycle and the sandbox alike: how many nodes a workload
still needs (:func:`nodes_needed`, :func:`new_nodes`), the retry rule
of a failed provisioning (:func:`backoff_seconds`, Kueue's defaults), a ProvisioningRequest's state
from its conditions (:func:`provisioning_state`), the annotations that keep running work from being
evicted by scale-down (:func:`disruption_annotations`), and the words a waiting workload shows
(:func:`growing_words`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cluster.backends.base import ResourceKind

#: The provisioning modes (the one vocabulary; fleet.constants.PoolMode names them for the admin).
ATOMIC = "atomic"
ANY = "any"
MODES = (ATOMIC, ANY)
MODE_LABELS = {ATOMIC: "atomic (ProvisioningRequest, all nodes or none)", ANY: "any (node by node)"}

#: The ProvisioningRequest class of an atomic pool: all of a request's pod sets or none.
ATOMIC_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
#: How long a Provisioned request's capacity is kept for its pods (the class's ``ValidUntilSeconds``
#: parameter; Cluster Autoscaler's own default booking time is 10 minutes).
VALID_UNTIL_SECONDS = 600
#: The pod annotations that tie a workload's pods to the capacity its ProvisioningRequest booked.
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"

#: Minutes a node stands idle before the pool may remove it (issue 52's default).
DEFAULT_UNNEEDED_MINUTES = 10

#: A failed provisioning's retries, Kueue's defaults for its ProvisioningRequest admission check:
#: 3 tries, backoff from 60 s doubling, at most 30 minutes. The backoff's first wait and its cap are settings
#: (``SLIPWAY_PROVISIONING_BACKOFF_SECONDS``, ``SLIPWAY_PROVISIONING_BACKOFF_MAX_SECONDS``), as Kueue's
#: ``retryStrategy`` lets a ProvisioningRequestConfig set them; these are their defaults.
MAX_TRIES = 3
BACKOFF_BASE_SECONDS = 60
BACKOFF_MAX_SECONDS = 1800

#: What a pool is taken to need to provision a node until it has a history of its own (seconds).
DEFAULT_PROVISIONING_SECONDS = 240
DEFAULT_PROVISIONING_TAIL_SECONDS = 600
#: How many observed provisioning times a pool keeps (newest last).
HISTORY = 50

#: The annotations of Karpenter and Cluster Autoscaler that keep a node with this pod from being
#: removed while it runs.
DO_NOT_DISRUPT = {
    "karpenter.sh/do-not-disrupt": "true",
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
}

#: The objects of an atomic provisioning, as a workload kind declares them (its ``resources``): observed, so the
#: cycle reads the request's conditions, and deleted with the workload (the request before its PodTemplates).
PROVISIONING_REQUEST = ResourceKind("autoscaling.x-k8s.io", "v1", "ProvisioningRequest", "provisioningrequests",
                                    observed=True, deleted=True)
POD_TEMPLATE = ResourceKind("", "v1", "PodTemplate", "podtemplates", deleted=True)
PROVISIONING_RESOURCES = (PROVISIONING_REQUEST, POD_TEMPLATE)

# A ProvisioningRequest's states, from its conditions (autoscaling.x-k8s.io/v1).
PENDING = "pending"
PROVISIONED = "provisioned"
FAILED = "failed"
BOOKING_EXPIRED = "booking_expired"


@dataclass(frozen=True)
class Provisioning:
    """What a ProvisioningRequest's conditions say: its state and the words of the condition that says it."""

    state: str
    message: str = ""


def nodes_needed(free_per_node: list[int], units_per_node: int, workers: int) -> int:
    """How many new nodes ``workers`` pods of ``units_per_node`` units each need beyond the free units of the
    ready nodes (``free_per_node``): each pod binds on one node, several to a node when they fit (as
    :func:`cluster.capacity.free_blocks` counts), and a new node holds ``units_per_node`` or more of them."""
    if units_per_node <= 0 or workers <= 0:
        return 0
    fitting = sum(free // units_per_node for free in free_per_node)
    return max(workers - fitting, 0)


def new_nodes(missing_workers: int, node_units: int, units_per_node: int) -> int:
    """Nodes of ``node_units`` units each that ``missing_workers`` pods of ``units_per_node`` units need."""
    if missing_workers <= 0:
        return 0
    per_node = max(node_units // max(units_per_node, 1), 1)
    return math.ceil(missing_workers / per_node)


def backoff_seconds(tries: int, base: int = BACKOFF_BASE_SECONDS, cap: int = BACKOFF_MAX_SECONDS) -> int:
    """How long a workload waits before its next provisioning after ``tries`` failed ones (1, 2, …): ``base``
    doubling each try, at most ``cap``."""
    return min(base * 2 ** max(tries - 1, 0), cap)


def provisioning_state(request: dict) -> Provisioning:
    """The state of a ProvisioningRequest object (as the API server returns it) from its conditions.

    ``Failed`` and ``BookingExpired`` end it (the capacity will not come, or was not used in time);
    ``Provisioned`` True means its nodes are up; anything else is still pending (``Accepted``, none yet).
    """
    conditions = {c.get("type"): c for c in (request.get("status") or {}).get("conditions") or []
                  if isinstance(c, dict)}

    def true(kind: str) -> dict | None:
        condition = conditions.get(kind)
        return condition if condition and condition.get("status") == "True" else None

    for kind, state in (("Failed", FAILED), ("BookingExpired", BOOKING_EXPIRED), ("Provisioned", PROVISIONED)):
        if condition := true(kind):
            return Provisioning(state, str(condition.get("message") or condition.get("reason") or kind))
    pending = true("Accepted")
    return Provisioning(PENDING, str(pending.get("message") or "") if pending else "")


def disruption_annotations(preemptible: bool) -> dict[str, str]:
    """The pod annotations that keep scale-down from evicting a running pod: all of them, unless the work is
    preemptible with the checkpoint contract (it saves and resumes, so its node may go)."""
    return {} if preemptible else dict(DO_NOT_DISRUPT)


def percentile(values: list[float], share: float) -> float | None:
    """The ``share`` (0..1) quantile of ``values``, nearest rank; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def provisioning_seconds(history: list[float]) -> tuple[float, float]:
    """A pool's provisioning time, median and tail (p90), from its own ``history`` of observed times (seconds);
    the defaults until it has three of its own."""
    if len(history) < 3:
        return float(DEFAULT_PROVISIONING_SECONDS), float(DEFAULT_PROVISIONING_TAIL_SECONDS)
    return percentile(history, 0.5) or 0.0, percentile(history, 0.9) or 0.0
