"""Which cluster a workload goes to, and why, in plain words (pure).

:func:`place` is the ``place(request, clusters)`` of docs/design.md "Sharing, preemption, clusters": the portal describes each cluster
as a :class:`ClusterOffer` (its state, labels, what its nodes offer now, its prices) and the
workload as a :class:`PlacementRequest`; it gets back every cluster either ranked as a
:class:`Candidate` or set aside as a :class:`Rejection`, each with a reason. No clock, no
database, no randomness: the same clusters in any order give the same answer.

The rules, in the order they apply:

1. **Filter.** A cluster is considered only when it is ``ready``: ``draining`` finishes what
   runs and takes nothing new, ``lost`` does not answer, and ``degraded`` (its last observation
   failed) is treated as lost for new work — work sent there could not be followed, and the
   apply would be retried into a run failed for a cluster that "could not be reached" (issue
   34). Work that no ready cluster can take waits in its team's queue instead
   (:func:`no_usable_cluster` says why, admission reads it). A cluster considered also carries every
   label of the request's ``cluster_selector``, has a node that serves the request
   (:func:`cluster.capacity.serves`: it offers the flavor by :func:`cluster.capacity.offers`,
   the rule the Capacity page and the waiting reason use, and it is a spot node exactly when
   the work is spot) and has a price for the flavor. Distributed training goes only to a cluster whose
   training API takes its framework (:func:`cluster.training.takes`: the v1 PyTorchJob takes pytorch, Trainer
   v2 the frameworks its runtimes offer, a cluster with neither none); single-node work needs none.
2. **Fit.** Each worker is one pod of ``units_per_node`` units on one node, so a cluster holds
   :func:`cluster.capacity.free_blocks` workers now; it fits when that is at least
   ``nodes_needed``.
3. **Rank** the clusters that fit now:

   - any other cluster before ``previous``, the one a re-placed workload waited on past the
     placement timeout (going back would repeat what just failed);
   - the cheapest unit price (the spot price for spot work, when the cluster has one);
   - the most free units of the flavor (the least loaded cluster keeps room for what comes next);
   - the name, so that ties are decided the same way every time.

   A cluster that serves the request but has no room now is rejected — unless no cluster
   fits now. Then those clusters are the candidates, flagged ``fits=False``, ranked by where
   the work should fit soonest: the same first key, then a cluster that could hold it
   at all when idle, the most free blocks (for a distributed request), the largest free block,
   the cheapest, the name. The work is placed on the first to wait there, holding its quota,
   and :attr:`Placement.waiting` says why it waits, naming each cluster's largest free block
   (:func:`cluster.capacity.clusters_capacity_reason`).

4. **Reasons.** The first candidate's reason names the cluster it won over and on what
   ground: "east: cheapest with 8 free a100-80gb (2.10/h; west 2.50/h)", "east: most free
   a100-80gb at 2.10/h (8; west 2)". With no runner-up it says so: "east: the only cluster that can take it now, 8
   free a100-80gb at 2.10/h"; a single-cluster install reads "default: the only cluster, 8
   free a100-80gb at 2.10/h". A candidate without room says where the work waits: "west: no
   cluster has room now; waits here, where it should fit soonest (largest free block 2 at
   2.50/h; east 0)". Decisions look at the fields and the rejection ``code``, never at
   the words.

Prices are written with two decimals, four when cents would lose some (a MIG slice priced at
a seventh of a GPU), as the portal writes money; without a currency, as docs/api.md's example.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_UP, Decimal

from cluster.backends.base import NodeCapacity
from cluster.capacity import clusters_capacity_reason, free_blocks, serves, withhold
from cluster.reasons import Reason
from cluster.specs import FlavorSpec
from cluster.training import ASSUMED, V1_FRAMEWORKS, refusal, takes


class ClusterState:
    """A cluster's states (docs/api.md "Clusters"): the one vocabulary, the Cluster model's choices come from it."""

    READY = "ready"
    DEGRADED = "degraded"
    LOST = "lost"
    DRAINING = "draining"


#: Every state, in the order people read them.
CLUSTER_STATES = (ClusterState.READY, ClusterState.DEGRADED, ClusterState.LOST, ClusterState.DRAINING)
#: The states new work may be placed in: ready only (module docstring, rule 1).
PLACEABLE_STATES = (ClusterState.READY,)


class Rejected:
    """Why a cluster is not a candidate: :attr:`Rejection.reason`'s code, what decisions and tests look at."""

    LOST = "lost"
    DEGRADED = "degraded"
    DRAINING = "draining"
    NOT_READY = "not_ready"  # a state this module does not know
    SELECTOR = "selector"
    TRAINING_API = "training_api"  # distributed training, and its training API takes none (cluster.training)
    NO_FLAVOR = "no_flavor"
    NO_PRICE = "no_price"
    NO_ROOM = "no_room"  # serves the request but has no room now, while another cluster has


@dataclass(frozen=True)
class ClusterOffer:
    """One cluster as placement sees it: the caller resolves prices (the flavor's, or the cluster's override).

    ``labels`` are what a ``cluster_selector`` matches, and nothing else is: a cluster's region
    is for people unless its labels carry it too (``region: west``).
    """

    name: str
    state: str  # a ClusterState
    nodes: tuple[NodeCapacity, ...] = ()  # what the cluster's backend.capacity() returns
    prices: Mapping[str, Decimal] = field(default_factory=dict, hash=False)  # flavor name -> price per unit-hour
    spot_prices: Mapping[str, Decimal] = field(default_factory=dict, hash=False)  # the same for spot work
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: The training API it is taken to have (:func:`cluster.training.effective`; the caller resolves the override),
    #: and the frameworks it offers (:func:`cluster.training.frameworks`).
    training_api: str = ASSUMED
    frameworks: tuple[str, ...] = field(default=V1_FRAMEWORKS, hash=False)


@dataclass(frozen=True)
class PlacementRequest:
    """What a workload needs: ``nodes_needed`` blocks (workers) of ``units_per_node`` × ``flavor``, each on one node."""

    flavor: FlavorSpec
    units_per_node: int = 1
    nodes_needed: int = 1
    spot: bool = False
    cluster_selector: tuple[tuple[str, str], ...] = ()  # labels the cluster must carry, all of them
    previous: str = ""  # the cluster a re-placed workload waited on ("" for a first placement)
    #: The framework of distributed training (a run of several workers; "" for any other work): only a cluster
    #: whose training API takes that framework (:func:`cluster.training.takes`, rule 1).
    training_framework: str = ""

    def __post_init__(self) -> None:
        # Admission refuses such requests first (quotas.admission); here they would divide by zero.
        if self.units_per_node < 1 or self.nodes_needed < 1:
            raise ValueError(f"a request needs at least one unit and one worker, not "
                             f"{self.nodes_needed} × {self.units_per_node}")

    @classmethod
    def shaped(cls, flavor: FlavorSpec, units: int, units_per_node: int, spot: bool = False,
               selector: Mapping[str, str] | None = None, previous: str = "",
               training_framework: str = "") -> PlacementRequest:
        """The request of work of ``units`` in workers of ``units_per_node``: what placement and
        the price quote (billing.pricing) both ask with, so a quote prices the cluster placement picks."""
        per_node = max(units_per_node, 1)
        return cls(flavor=flavor, units_per_node=per_node, nodes_needed=max(units // per_node, 1), spot=spot,
                   cluster_selector=tuple(sorted((selector or {}).items())), previous=previous,
                   training_framework=training_framework)


@dataclass(frozen=True)
class Candidate:
    """A cluster the work can go to: its unit price, its room for the request, and why it ranks where it does."""

    cluster: str
    state: str
    price: Decimal
    spot_price: bool  # whether ``price`` is the cluster's spot price
    free: int  # free units of the flavor on the nodes that serve the request
    blocks: int  # workers of the request it holds now
    largest_block: int  # free units of its serving node with the most free
    fits: bool  # blocks >= nodes_needed: False only for the clusters work would wait on
    reason: str = ""


@dataclass(frozen=True)
class Rejection:
    """A cluster set aside, and why: the reason's code (a :class:`Rejected`) for decisions, its words for people
    ("draining (takes no new work)")."""

    cluster: str
    reason: Reason


@dataclass(frozen=True)
class Placement:
    """Candidates best first, and the clusters set aside (by name).

    ``waiting`` is "" when the best candidate fits now; else the capacity reason the work
    waits with, naming each candidate's largest free block.
    """

    candidates: tuple[Candidate, ...]
    rejected: tuple[Rejection, ...]
    waiting: str = ""

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    @property
    def reason(self) -> str:
        """The best candidate's reason, or why no cluster can take it.

        "no cluster can take it: east: draining (takes no new work); west: lost (not answering)".
        """
        if self.best is not None:
            return self.best.reason
        return "no cluster can take it: " + "; ".join(f"{r.cluster}: {r.reason.words}" for r in self.rejected)


def place(request: PlacementRequest, clusters: Sequence[ClusterOffer]) -> Placement:
    """Rank ``clusters`` for ``request`` (module docstring: the rules and why). Cluster names are unique."""
    flavor = request.flavor.name
    rejected: list[Rejection] = []
    # 1. Filter, keeping each serving cluster's candidate figures, its serving nodes and its idle room.
    eligible: list[tuple[Candidate, list[NodeCapacity], bool]] = []
    for offer in clusters:
        serving = [n for n in offer.nodes if serves(n, request.flavor, request.spot)]
        why = _rejection(request, offer, serving)
        if why is not None:
            rejected.append(Rejection(offer.name, why))
            continue
        spot_price = request.spot and flavor in offer.spot_prices
        blocks = free_blocks(serving, request.units_per_node)
        candidate = Candidate(
            cluster=offer.name, state=offer.state,
            price=offer.spot_prices[flavor] if spot_price else offer.prices[flavor], spot_price=spot_price,
            free=sum(n.free for n in serving), blocks=blocks, largest_block=max(n.free for n in serving),
            fits=blocks >= request.nodes_needed)
        idle = sum(n.allocatable // request.units_per_node for n in serving) >= request.nodes_needed
        eligible.append((candidate, serving, idle))
    # 2. Those that fit now, ranked; the others set aside. Or, when none fits, every eligible one to wait on.
    fitting = sorted((c for c, _s, _i in eligible if c.fits), key=lambda c: _fit_key(request, c))
    if fitting:
        rejected.extend(Rejection(c.cluster, Reason(Rejected.NO_ROOM, _no_room(request, c)))
                        for c, _s, _i in eligible if not c.fits)
        ranked, waiting = fitting, ""
    else:
        order = sorted(eligible, key=lambda e: _wait_key(request, e[0], e[2]))
        ranked = [c for c, _s, _i in order]
        waiting = clusters_capacity_reason(request.flavor, request.units_per_node,
                                           [(c.cluster, s) for c, s, _i in order],
                                           workers=request.nodes_needed, spot=request.spot) if order else ""
    # 3. Every candidate's reason, against the one ranked after it.
    reasons = [_reason(request, c, ranked[i + 1] if i + 1 < len(ranked) else None, len(clusters))
               for i, c in enumerate(ranked)]
    return Placement(candidates=tuple(replace(c, reason=r) for c, r in zip(ranked, reasons, strict=True)),
                     rejected=tuple(sorted(rejected, key=lambda r: r.cluster)), waiting=waiting)


def no_usable_cluster(flavor: FlavorSpec, spot: bool, clusters: Sequence[ClusterOffer], framework: str = "") -> str:
    """Why no cluster can take new work of ``flavor`` now because of the clusters' states, or "" when one may.

    "l4-24gb is only offered by east, which is draining"; "a100-80gb is only offered by east
    (draining) and west (lost)"; "no cluster takes new work now: default is degraded". Admission
    reads it (:func:`quotas.decide.decide`'s ``no_cluster``): such work waits in its team's
    queue, holding nothing, and is admitted once a cluster that offers the flavor is ready again
    — rather than admitted to an apply that no cluster takes, retried until the run fails.

    A ready cluster may take the work when one of its nodes serves it (:func:`cluster.capacity.serves`,
    rule 1's), or when it has reported no nodes yet (a fresh install before its first read: not
    known to lack it). Rule 1's other filters are not this function's: a cluster selector that no
    cluster matches, or a flavor that no cluster offers at all, is for :func:`place` to say.

    Distributed training of ``framework`` counts only the clusters whose training API takes it (rule 1's
    :func:`cluster.training.takes`): when none does any more (staff removed an operator or a runtime after the
    work was submitted), or every one that does is unusable, it waits here — not admitted to an apply no cluster
    could take.
    """
    if framework:
        clusters = [c for c in clusters if takes(c.training_api, c.frameworks, framework)]
        if not clusters:
            return f"no cluster takes distributed {framework} training now"
    unusable = sorted((c for c in clusters if c.state not in PLACEABLE_STATES), key=lambda c: c.name)
    if not unusable:
        return ""
    if any(not c.nodes or _serves(c, flavor, spot) for c in clusters if c.state in PLACEABLE_STATES):
        return ""
    what = f"{flavor.name} on spot nodes" if spot else flavor.name
    offering = [c for c in unusable if _serves(c, flavor, spot)]
    if len(offering) == 1:
        return f"{what} is only offered by {offering[0].name}, which is {offering[0].state}"
    if offering:
        return f"{what} is only offered by {_listed([f'{c.name} ({c.state})' for c in offering])}"
    if len(unusable) == len(clusters):
        return f"no cluster takes new work now: {_listed([f'{c.name} is {c.state}' for c in unusable])}"
    return ""


def reserved_in_the_way(request: PlacementRequest, clusters: Sequence[ClusterOffer], kept: Mapping[str, int]) -> bool:
    """Whether units kept for reserved windows (``kept``: per cluster name, the units the request may not use there)
    leave no ready cluster room for ``request`` now (docs/reservations.md "Before the window").

    Admission holds such work in its team's queue, naming the reservation, rather than sending it to a cluster
    whose scheduler would bind its pods on the reserved units (:func:`quotas.facts.reserved_wait`)."""
    if not kept:
        return False
    for offer in clusters:
        if offer.state not in PLACEABLE_STATES:
            continue
        if any(offer.labels.get(key) != value for key, value in request.cluster_selector):
            continue
        serving = [n for n in offer.nodes if serves(n, request.flavor, request.spot)]
        if offer.name in kept:
            serving = withhold(serving, request.flavor, kept[offer.name])
        if free_blocks(serving, request.units_per_node) >= request.nodes_needed:
            return False
    return True


def _serves(offer: ClusterOffer, flavor: FlavorSpec, spot: bool) -> bool:
    return any(serves(n, flavor, spot) for n in offer.nodes)


def _listed(items: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _rejection(request: PlacementRequest, offer: ClusterOffer, serving: list[NodeCapacity]) -> Reason | None:
    """Why ``offer`` fails its first filter, or None when it passes them all."""
    flavor = request.flavor.name
    if offer.state == ClusterState.LOST:
        return Reason(Rejected.LOST, "lost (not answering)")
    if offer.state == ClusterState.DEGRADED:
        return Reason(Rejected.DEGRADED, "degraded (its last observation failed; takes no new work)")
    if offer.state == ClusterState.DRAINING:
        return Reason(Rejected.DRAINING, "draining (takes no new work)")
    if offer.state not in PLACEABLE_STATES:
        return Reason(Rejected.NOT_READY, f"not ready ({offer.state})")
    for key, value in request.cluster_selector:
        if offer.labels.get(key) != value:
            return Reason(Rejected.SELECTOR, f"does not match the cluster selector {key}={value}")
    if not takes(offer.training_api, offer.frameworks, request.training_framework):
        return Reason(Rejected.TRAINING_API, refusal(offer.training_api, request.training_framework, offer.frameworks))
    if not serving:
        return Reason(Rejected.NO_FLAVOR, f"does not offer {flavor}{' on spot nodes' if request.spot else ''}")
    if flavor not in offer.prices:
        return Reason(Rejected.NO_PRICE, f"has no price for {flavor}")
    return None


def _no_room(request: PlacementRequest, c: Candidate) -> str:
    """Why a cluster serving the request is set aside: "no node block fits: largest free block 2"."""
    if request.nodes_needed > 1:
        return (f"no room for {request.nodes_needed} blocks of {request.units_per_node}: "
                f"{c.blocks} free (largest free block {c.largest_block})")
    return f"no node block fits: largest free block {c.largest_block}"


def _fit_key(request: PlacementRequest, c: Candidate) -> tuple:
    return (c.cluster == request.previous, c.price, -c.free, c.cluster)


def _wait_key(request: PlacementRequest, c: Candidate, idle: bool) -> tuple:
    return (c.cluster == request.previous, not idle, -c.blocks, -c.largest_block, c.price, c.cluster)


def _reason(request: PlacementRequest, c: Candidate, runner: Candidate | None, clusters: int) -> str:
    """Why ``c`` ranks above ``runner`` (the next candidate), on the first ground that tells them apart."""
    flavor, price = request.flavor.name, per_hour(c.price, c.spot_price)
    if not c.fits:
        return _waiting_reason(request, c, runner, clusters)
    if runner is None:
        only = "the only cluster" if clusters == 1 else "the only cluster that can take it now"
        return f"{c.cluster}: {only}, {c.free} free {flavor} at {price}"
    r = runner
    if (c.cluster == request.previous) != (r.cluster == request.previous):
        return f"{c.cluster}: {c.free} free {flavor} at {price} (not {r.cluster}, where it waited before)"
    if c.price != r.price:
        return f"{c.cluster}: cheapest with {c.free} free {flavor} ({price}; {r.cluster} {per_hour(r.price, r.spot_price)})"
    if c.free != r.free:
        return f"{c.cluster}: most free {flavor} at {price} ({c.free}; {r.cluster} {r.free})"
    return f"{c.cluster}: {c.free} free {flavor} at {price}, as {r.cluster} (first by name)"


def _waiting_reason(request: PlacementRequest, c: Candidate, runner: Candidate | None, clusters: int) -> str:
    """A candidate without room now: where the work waits, against the next one by the measure that matters."""
    price = per_hour(c.price, c.spot_price)
    measure, mine = ("free blocks", c.blocks) if request.nodes_needed > 1 else ("largest free block", c.largest_block)
    if runner is None:
        only = "the only cluster" if clusters == 1 else "the only cluster that can take it"
        return f"{c.cluster}: {only}, no room now ({measure} {mine} at {price}); waits there"
    theirs = runner.blocks if request.nodes_needed > 1 else runner.largest_block
    return (f"{c.cluster}: no cluster has room now; waits here, where it should fit soonest "
            f"({measure} {mine} at {price}; {runner.cluster} {theirs})")


_CENT = Decimal("0.01")
_TEN_THOUSANDTH = Decimal("0.0001")


def per_hour(price: Decimal, spot: bool = False) -> str:
    """``2.10/h`` (``0.3571/h`` when cents would lose some; `` spot`` after the spot price)."""
    places = _CENT if price == price.quantize(_CENT, ROUND_HALF_UP) else _TEN_THOUSANDTH
    return f"{price.quantize(places, ROUND_HALF_UP)}/h{' spot' if spot else ''}"
