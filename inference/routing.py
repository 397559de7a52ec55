"""Where the gateway sends an endpoint's requests: the route table (docs/serving.md "The gateway").

:func:`routes` reads, in a few queries, every endpoint that holds quota (its team, name, state and
live revision) and asks each cluster's backend once for the upstreams of all its endpoints' Services
(:meth:`cluster.backends.base.ClusterBackend.serving_upstreams`: the sandbox's ready engines, a real
cluster's Service address). The gateway calls it every second in a thread and keeps the last table
that succeeded. The choice of an upstream for one request is pure (:func:`choose_target`,
:class:`Picker`), so its split is property-tested.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cluster.backends.base import ServiceRef
from cluster.errors import ClusterError
from cluster.manifests.common import SERVICE_PORT
from fleet import services as fleet
from inference import revisions
from inference.constants import HOLDING_STATES, EndpointState
from inference.models import InferenceEndpoint


@dataclass(frozen=True)
class Target:
    """One revision's share of an endpoint's requests, and its replicas' base URLs (empty: none ready)."""

    revision: int
    weight: int
    upstreams: tuple[str, ...]


@dataclass(frozen=True)
class Route:
    """An endpoint the gateway serves, keyed by (team slug, endpoint name) in :func:`routes`."""

    endpoint_id: int
    team_id: int
    team: str
    name: str
    state: str
    targets: tuple[Target, ...]
    #: Its name on the cluster (``ep-7``) and its team's namespace: the labels of the gateway's series, which the
    #: ScaledObject's triggers select (inference.manifests) and the tenant label proxy pins.
    object_name: str = ""
    namespace: str = ""

    @property
    def ready(self) -> bool:
        """Whether some target with a weight has an upstream: a request can be forwarded now."""
        return any(t.upstreams and t.weight > 0 for t in self.targets)


def live_targets(endpoints: Sequence[InferenceEndpoint]) -> dict[int, list[tuple[int, int, str]]]:
    """Each endpoint's targets as ``(revision, weight %, Service name)`` (:func:`inference.revisions.targets_of`,
    the one rule), read in one query; an endpoint with no live revision row (made before revisions existed, or
    whose first revision is not written yet) serves revision 1 from its own Service."""
    rows = revisions.live_rows([e.pk for e in endpoints])
    return {e.pk: revisions.targets_of(e.object_name, rows.get(e.pk, [])) or [(1, 100, e.object_name)]
            for e in endpoints}


def upstreams_for(endpoint: InferenceEndpoint, service_name: str,
                  found: Mapping[ServiceRef, tuple[str, ...]]) -> tuple[str, ...]:
    """The upstreams of ``endpoint``'s Service ``service_name`` (its ``object_name``, or a canary's
    ``<object_name>-canary``) among what the backends answered (``found``, from :func:`ask_backends`).

    An endpoint scaled to zero has none whatever the backend says: a real cluster's Service address exists
    with no pod behind it, and the gateway must hold the request rather than send it there.
    """
    if endpoint.state == EndpointState.SCALED_TO_ZERO:
        return ()
    return found.get(service_ref(endpoint, service_name), ())


def service_ref(endpoint: InferenceEndpoint, service_name: str) -> ServiceRef:
    return ServiceRef(endpoint.team.namespace, service_name, SERVICE_PORT)


def ask_backends(wanted: Mapping[int | None, set[ServiceRef]]) -> tuple[dict[ServiceRef, tuple[str, ...]], set]:
    """One ``serving_upstreams`` call per cluster for ``wanted`` ({cluster id: Services}); the answers, and the
    cluster ids whose backend failed (their endpoints keep their previous upstreams)."""
    found: dict[ServiceRef, tuple[str, ...]] = {}
    failed: set = set()
    for cluster_id, refs in wanted.items():
        try:
            found.update(fleet.backend_at(cluster_id).serving_upstreams(sorted(refs, key=lambda r: (r.namespace,
                                                                                                  r.name))))
        except ClusterError:
            failed.add(cluster_id)
    return found, failed


def routes(previous: Mapping[tuple[str, str], Route] | None = None) -> dict[tuple[str, str], Route]:
    """The route table: every endpoint in a holding state, keyed (team slug, endpoint name), with its
    targets: its stable (or rolling) revision and, while a canary is admitted, the canary at its weight.

    ``previous``: the last table; an endpoint whose cluster's backend failed keeps its targets from it (a
    cluster's control plane that does not answer does not stop its replicas from serving).
    """
    endpoints = list(InferenceEndpoint.objects.filter(state__in=HOLDING_STATES).select_related("team")
                     .only("pk", "name", "state", "cluster_id", "team__slug", "team__namespace", "team_id"))
    live = live_targets(endpoints)
    wanted: dict[int | None, set[ServiceRef]] = defaultdict(set)
    for endpoint in endpoints:
        wanted[endpoint.cluster_id].update(service_ref(endpoint, service) for _r, _w, service in live[endpoint.pk])
    found, failed = ask_backends(wanted)
    table: dict[tuple[str, str], Route] = {}
    for endpoint in endpoints:
        key = (endpoint.team.slug, endpoint.name)
        if endpoint.cluster_id in failed and previous and key in previous:
            targets = previous[key].targets
        else:
            targets = tuple(Target(revision, weight, upstreams_for(endpoint, service, found))
                            for revision, weight, service in live[endpoint.pk])
        table[key] = Route(endpoint.pk, endpoint.team_id, endpoint.team.slug, endpoint.name, endpoint.state, targets,
                           endpoint.object_name, endpoint.team.namespace)
    return table


# -- the choice of one request's upstream: pure ---------------------------------------------------------------


def choose_target(targets: Sequence[Target], draw: float) -> Target | None:
    """The target a request goes to, by weight among those with upstreams: ``draw`` is uniform in [0, 1).

    A target with no upstream takes no request (its weight goes to the others, so a canary with no ready
    replica yet does not hold stable's traffic); None when no target has an upstream.
    """
    usable = [t for t in targets if t.upstreams and t.weight > 0]
    total = sum(t.weight for t in usable)
    if not total:
        return None
    point = draw * total
    for target in usable:
        point -= target.weight
        if point < 0:
            return target
    return usable[-1]


class Picker:
    """Least-in-flight among a target's upstreams, ties broken round-robin: one per gateway process.

    ``acquire`` counts a request in flight on the upstream it returns, ``release`` when it is answered; an
    upstream that refused is ``avoid``-ed on the retry.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self.in_flight: dict[str, int] = defaultdict(int)
        self.turn = 0
        self.rng = rng or random.Random()

    def target(self, route: Route) -> Target | None:
        return choose_target(route.targets, self.rng.random())

    def acquire(self, upstreams: Sequence[str], avoid: str | None = None) -> str | None:
        candidates = [u for u in upstreams if u != avoid] or ([] if avoid else list(upstreams))
        if not candidates:
            return None
        self.turn += 1
        least = min(self.in_flight[u] for u in candidates)
        tied = [u for u in candidates if self.in_flight[u] == least]
        chosen = tied[self.turn % len(tied)]
        self.in_flight[chosen] += 1
        return chosen

    def release(self, upstream: str) -> None:
        self.in_flight[upstream] -= 1
        if self.in_flight[upstream] <= 0:
            del self.in_flight[upstream]
