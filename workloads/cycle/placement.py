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

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

import fleet.services as fleet
from billing.models import flavor_price
from cluster.capacity import bind
from cluster.errors import ClusterError
from cluster.placement import ClusterOffer, Placement, PlacementRequest, place
from fleet.models import Cluster
from quotas import admission
from workloads.registry import kinds

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
    """Each cluster as :func:`place` reads it: state, labels, its nodes now (as last seen when it does
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
                nodes = live
        for request in pending.get(cluster.pk, []):
            nodes = bind(nodes, request.flavor, request.units_per_node, request.nodes_needed, request.spot)
        found.append(ClusterOffer(name=cluster.name, state=cluster.state, nodes=tuple(nodes), prices=prices,
                                  spot_prices=spot_prices, labels=dict(cluster.labels)))
    return found


def request_for(kind, workload, previous: str = "") -> PlacementRequest:
    """The workload's request in :mod:`cluster.placement`'s terms."""
    units, per_node = workload.placement_shape
    return PlacementRequest.shaped(workload.flavor.to_spec(), units, per_node, workload.spot,
                                   workload.cluster_selector, previous)


def choose(kind, workload, now: datetime, previous: str = "") -> Placement:
    """Rank the clusters for ``workload`` (nothing is written)."""
    return place(request_for(kind, workload, previous), offers(fleet.clusters(), [workload.flavor], now))


def place_workload(kind, workload, now: datetime) -> Cluster | None:
    """The cluster ``workload`` runs on: where it was placed, else the best candidate now (recorded
    with its reason). None when no cluster can take it at all (lost, degraded, draining, selector, flavor)."""
    if workload.cluster_id is not None:
        admission.placed(workload.ref, workload.cluster_id)  # an attempt that stays where the last one ran
        return fleet.placed_on(workload.cluster_id)
    clusters = fleet.clusters()
    if len(clusters) == 1:
        # One cluster: nothing to choose, and nothing to read (a single-cluster install applies as it
        # always did; the cluster's own scheduler says why work waits, in the run's reason).
        cluster = clusters[0]
        if not cluster.placeable:
            return None
        reason = ONLY_CLUSTER.format(cluster=cluster.name)
    else:
        placement = choose(kind, workload, now)
        best = placement.best
        if best is None:
            return None
        cluster = next(c for c in clusters if c.name == best.cluster)
        reason = (best.reason if best.fits else placement.waiting or best.reason)[:300]
    kind.model.objects.filter(Q(cluster__isnull=True), pk=workload.pk).update(
        cluster=cluster, placement_reason=reason, placed_at=now)
    placed = kind.model.objects.filter(pk=workload.pk).values_list("cluster_id", flat=True).first()
    workload.cluster_id = placed
    admission.placed(workload.ref, placed)  # its hold is quoted at that cluster's price until billing opens
    return fleet.placed_on(placed) if placed is not None else None
