"""Where a workload runs: the portal's side of :func:`cluster.placement.place` (docs/design.md "Sharing, preemption, clusters").

Placement chooses a cluster (docs/glossary.md "placement"); admission, before it, decides whether
the team may run the work at all, and the Kubernetes scheduler, after it, binds pods to nodes.

Placement happens once, in the worker, just before a workload's first apply: the clusters'
capacity is read then, not at admission (quotas and budgets are global per team, so admission
does not depend on the cluster). The choice and its reason are written on the workload by a
conditional update, so two workers applying at once agree on one cluster. Every cluster is read
live when it answers; one that does not is described by the nodes it last reported.

Prices: each cluster offers a flavor at its own price where staff set one
(:class:`billing.models.ClusterPrice`), else at the flavor's; billing charges the same price.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

import fleet.services as fleet
from billing import reserved
from billing.models import QuotaHold, flavor_price
from cluster.capacity import bind, withhold
from cluster.errors import ClusterError
from cluster.placement import ClusterOffer, Placement, PlacementRequest, place
from core.formatting import format_when
from fleet import pools
from fleet.models import Cluster
from quotas import admission
from workloads.registry import Bursts, kinds

#: The placement reason of a single-cluster install.
ONLY_CLUSTER = "{cluster}: the only cluster"
#: The placement reason of a next attempt that stays where the last one ran (workloads.lifecycle.requeue).
KEPT_PLACEMENT = "{cluster}: where attempt {attempt} ran (a {noun} queued again comes back to its cluster)"


def just_placed(clusters: list[Cluster], now: datetime) -> dict[int, list[PlacementRequest]]:
    """Per cluster, the requests of work placed there in the last :func:`pending_window` that has not
    started: its pods may not be bound to nodes yet (the sandbox binds at its next tick, a real
    scheduler within seconds), so the nodes do not show it. Without this a burst of applies (the
    demo's seeding, a CI pipeline) would all read the same free units and pile onto one cluster."""
    since = now - pending_window()
    found: dict[int, list[PlacementRequest]] = {}
    for kind in kinds():
        recent = (kind.model.objects.filter(cluster__in=clusters, placed_at__gte=since, started_at__isnull=True,
                                            state__in=kind.model.HOLDING_STATES)
                  .select_related("flavor", "team"))
        for workload in recent:
            found.setdefault(workload.cluster_id, []).append(request_for(kind, workload))
    return found


def pending_window() -> timedelta:
    """How long placed work may take to show on its cluster's nodes: two reconcile intervals, at least 10 s."""
    return timedelta(seconds=max(2 * settings.CELERY_RECONCILE_INTERVAL, 10))


def offers(clusters: list[Cluster], flavors, now: datetime) -> list[ClusterOffer]:
    """Each cluster as :func:`place` reads it: state, labels, training API, its nodes now (as last seen when it does
    not answer) less what was placed there a moment ago (:func:`just_placed`), and the ``flavors``' prices."""
    found = []
    pending = just_placed(clusters, now)
    for cluster in clusters:
        # Each cluster's own price of the flavor where it has one (billing.models.ClusterPrice).
        prices = {f.name: flavor_price(f, False, cluster.pk) for f in flavors}
        spot_prices = {f.name: flavor_price(f, True, cluster.pk) for f in flavors}
        nodes = fleet.recorded_nodes(cluster)
        if cluster.placeable:
            try:
                live = fleet.backend(cluster).capacity()
            except ClusterError:
                pass
            else:
                fleet.record_nodes(cluster, live, now)
                nodes = pools.with_headroom(cluster, live)  # what its elastic pools may still add counts
        for request in pending.get(cluster.pk, []):
            nodes = bind(nodes, request.flavor, request.units_per_node, request.nodes_needed, request.spot)
        found.append(ClusterOffer(name=cluster.name, state=cluster.state, nodes=tuple(nodes), prices=prices,
                                  spot_prices=spot_prices, labels=dict(cluster.labels),
                                  training_api=cluster.effective_training_api, frameworks=cluster.frameworks))
    return found


def request_for(kind, workload, previous: str = "") -> PlacementRequest:
    """The workload's request in :mod:`cluster.placement`'s terms."""
    units, per_node = workload.placement_shape
    return PlacementRequest.shaped(workload.flavor.to_spec(), units, per_node, workload.spot,
                                   workload.cluster_selector, previous, workload.training_framework)


def choose(kind, workload, now: datetime, previous: str = "") -> Placement:
    """Rank the clusters for ``workload`` (nothing is written)."""
    return place(request_for(kind, workload, previous), offers(fleet.clusters(), [workload.flavor], now))


def place_workload(kind, workload, now: datetime) -> Cluster | None:
    """The cluster ``workload`` runs on: where it was placed, else the best candidate now (recorded
    with its reason). None when no cluster can take it at all (lost, degraded, draining, selector, training API,
    flavor).

    Reserved windows (docs/reservations.md "Inside the window"): work admitted into its team's window runs on
    that window's cluster; other work is kept off the units windows keep (:func:`billing.reserved.withheld`) —
    unless no cluster has room without them, and it is work that may be preempted (not an endpoint's
    replicas): then it goes on them as **lent** work, which the window takes back (:mod:`workloads.cycle.windows`).
    """
    hold = QuotaHold.objects.held().filter(ref=workload.ref).select_related("window__cluster").first()
    if hold is not None and hold.window_id is not None and not hold.lent:
        return _pin(kind, workload, hold.window, now)
    keeps = _kept_for_windows(kind, workload, hold, now)
    if workload.cluster_id is not None:
        # Chosen before it was admitted (an attempt that stays where the last one ran, a continued trial on the
        # cluster of its checkpoint): it is placed there now, and its wait for that cluster's capacity counts from
        # now, as a run placed here counts from its placement — not from the choice, before it waited in the queue.
        if workload.placed_at is None:
            kind.model.objects.filter(pk=workload.pk, cluster_id=workload.cluster_id, placed_at__isnull=True).update(
                placed_at=now)
            workload.placed_at = now
        admission.placed(workload.ref, workload.cluster_id)
        cluster = fleet.placed_on(workload.cluster_id)
        kept = keeps.get(workload.cluster_id)
        if kept is not None and _lendable(kind, kept, now) and not _fits(kind, workload, cluster, kept, now):
            _lend(workload.ref, kept)
        return cluster
    clusters = fleet.clusters()
    lent = None
    if len(clusters) == 1 and not keeps:
        # One cluster: nothing to choose, and nothing to read (a single-cluster install applies as it
        # always did; the cluster's own scheduler says why work waits, in the run's reason).
        cluster = clusters[0]
        if not cluster.placeable or not cluster.training.takes(workload.training_framework):
            return None  # place()'s rules 1 that need no nodes read: its state, its training API
        reason = ONLY_CLUSTER.format(cluster=cluster.name)
    else:
        placement, lent = _choose_around_windows(kind, workload, clusters, keeps, now)
        best = placement.best
        if best is None:
            return None
        cluster = next(c for c in clusters if c.name == best.cluster)
        reason = (best.reason if best.fits else placement.waiting or best.reason)
        if lent is not None:
            reason = f"{reason}; {lent_words(lent)}"
        reason = reason[:300]
    kind.model.objects.filter(Q(cluster__isnull=True), pk=workload.pk).update(
        cluster=cluster, placement_reason=reason, placed_at=now)
    placed = kind.model.objects.filter(pk=workload.pk).values_list("cluster_id", flat=True).first()
    workload.cluster_id = placed
    admission.placed(workload.ref, placed)  # its hold is quoted at that cluster's price until billing opens
    if lent is not None and placed == cluster.pk:
        _lend(workload.ref, lent)
    return fleet.placed_on(placed) if placed is not None else None


def _pin(kind, workload, window, now: datetime) -> Cluster | None:
    """Work admitted into its team's reserved window: on the window's cluster, whatever the others offer."""
    reason = (f"{window.cluster.name}: in the team's reservation ({window.units}\u00d7 {workload.flavor.name} "
              f"until {format_when(window.end)})")
    kind.model.objects.filter(Q(cluster__isnull=True), pk=workload.pk).update(
        cluster=window.cluster, placement_reason=reason[:300], placed_at=now)
    placed = kind.model.objects.filter(pk=workload.pk).values_list("cluster_id", flat=True).first()
    workload.cluster_id = placed
    admission.placed(workload.ref, placed)
    return fleet.placed_on(placed) if placed is not None else None


def _kept_for_windows(kind, workload, hold, now: datetime) -> dict[int, reserved.Withheld]:
    """What each cluster's windows keep from ``workload`` (:func:`billing.reserved.withheld` over its horizon)."""
    return reserved.withheld(workload.flavor_id, now,
                             reserved.horizon(now, hold.limit_minutes if hold is not None else None))


def _lendable(kind, kept: reserved.Withheld, now: datetime) -> bool:
    """Whether the kind's work may run on ``kept``'s units now as lent work (:func:`billing.reserved.lendable`):
    not an endpoint's replicas, which serve traffic and whose minimum is guaranteed (never preemptible)."""
    return reserved.lendable(kept, now, not isinstance(kind, Bursts))


def _without_kept(found: list[ClusterOffer], clusters: list[Cluster], flavor, keeps: dict) -> list[ClusterOffer]:
    ids = {c.name: c.pk for c in clusters}
    return [replace(o, nodes=tuple(withhold(list(o.nodes), flavor, keeps[ids[o.name]].units)))
            if ids.get(o.name) in keeps else o for o in found]


def _choose_around_windows(kind, workload, clusters: list[Cluster], keeps: dict,
                           now: datetime) -> tuple[Placement, reserved.Withheld | None]:
    """The placement of ``workload`` with the windows' units kept from it, and the window it is lent from (None:
    none): when no cluster has room without them and the work may be preempted, the clusters with them."""
    request = request_for(kind, workload)
    found = offers(clusters, [workload.flavor], now)
    if not keeps:
        return place(request, found), None
    placement = place(request, _without_kept(found, clusters, request.flavor, keeps))
    if placement.best is not None and placement.best.fits:
        return placement, None
    # No room beside the windows: on the units of those it may be lent now, if that makes room.
    lending = {pk: kept for pk, kept in keeps.items() if _lendable(kind, kept, now)}
    if not lending:
        return placement, None
    full = place(request, _without_kept(found, clusters, request.flavor,
                                        {pk: kept for pk, kept in keeps.items() if pk not in lending}))
    if full.best is None:
        return placement, None
    # Placed on their units, or waiting where they are (its pods may start on them when they are idle):
    # lent either way, so the window takes them back when it needs them.
    cluster_id = next(c.pk for c in clusters if c.name == full.best.cluster)
    return full, lending.get(cluster_id)


def _fits(kind, workload, cluster: Cluster, kept: reserved.Withheld, now: datetime) -> bool:
    """Whether ``workload`` fits on ``cluster`` now with ``kept`` units kept for its windows."""
    request = request_for(kind, workload)
    found = _without_kept(offers([cluster], [workload.flavor], now), [cluster], request.flavor, {cluster.pk: kept})
    best = place(request, found).best
    return best is not None and best.fits


def _lend(ref: str, kept: reserved.Withheld) -> None:
    """Mark ``ref``'s hold as lent the window's idle units: preemptible, taken back when the window needs them."""
    QuotaHold.objects.held().filter(ref=ref).update(window_id=kept.window_id, lent=True)


def lent_words(kept: reserved.Withheld) -> str:
    """How a placement on a window's units reads: "on units reserved from 09:00 (preemptible until they are needed)"."""
    return (f"on units reserved from {format_when(kept.start)} to {format_when(kept.end)} "
            "(preemptible: the reservation takes them back)")
