"""The gateway's own ``/metrics``: a Prometheus registry of its own (not the portal's multiprocess one).

Every series carries ``namespace`` (the team's namespace: the tenant label proxy, deploy/prometheus-label-proxy.yaml,
pins every query to it, so a team reads only its own — scrape the gateway with ``honor_labels: true``), ``team``
(its slug) and ``endpoint`` (the endpoint's name on the cluster, ``ep-7``: what its ScaledObject's gateway
triggers select). Only a scraper may read it (:func:`core.metrics.scrape_allowed`, as the portal's /metrics):
the gateway's public route must not show one team's traffic to another. Requests refused before a route is known (an unknown team or endpoint) are
counted in no team's series: they belong to nobody, and a count of them would hint at what exists.

The requests the gateway ends itself, never forwarded to a revision (no or a bad key, a rate limit, no replica
ready in time, a body not sent in time, a client that left while held or sending its body), are counted apart, in
``slipway_gateway_refused_total`` by reason, and in none of the revision's series: ``slipway_gateway_requests_total``
is what an endpoint's autoscaler sums (inference.manifests), and anyone who knows an endpoint's URL can send requests
without a key.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

#: Seconds; as the portal's request histogram, finer at the low end (the gateway adds milliseconds).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class GatewayMetrics:
    def __init__(self) -> None:
        registry = self.registry = CollectorRegistry()
        labels = ["namespace", "team", "endpoint", "revision"]
        self.requests = Counter("slipway_gateway_requests", "Requests answered, by status class.",
                                [*labels, "status_class"], registry=registry)
        self.latency = Histogram("slipway_gateway_request_duration_seconds",
                                 "Seconds from a request's arrival to the end of its answer.", labels,
                                 buckets=LATENCY_BUCKETS, registry=registry)
        self.ttfb = Histogram("slipway_gateway_time_to_first_byte_seconds",
                              "Seconds from a streamed request's arrival to its first byte (time to first token).",
                              labels, buckets=LATENCY_BUCKETS, registry=registry)
        self.tokens = Counter("slipway_gateway_tokens", "Tokens of the answers, input (prompt) and output.",
                              [*labels, "kind"], registry=registry)
        self.refused = Counter("slipway_gateway_refused",
                               "Requests the gateway ended itself, never forwarded to a revision, by reason.",
                               ["namespace", "team", "endpoint", "reason"], registry=registry)
        self.in_flight = Gauge("slipway_gateway_requests_in_flight", "Requests being answered now.",
                               ["namespace", "team", "endpoint"], registry=registry)
        self.held = Gauge("slipway_gateway_requests_held",
                          "Requests waiting for a ready replica (scale from zero).", ["namespace", "team", "endpoint"],
                          registry=registry)

        #: Each (team, endpoint, revision, status class)'s children, looked up once (``labels()`` costs a lock
        #: and a tuple's hashing a call: on the request path, a dict lookup instead).
        self.children: dict[tuple[str, str, str, int, str], tuple] = {}

    def series(self, namespace: str, team: str, endpoint: str, revision: int, status_class: str) -> tuple:
        """(requests, latency, ttfb, input tokens, output tokens) children of one request's labels."""
        key = (namespace, team, endpoint, revision, status_class)
        found = self.children.get(key)
        if found is None:
            labels = (namespace, team, endpoint, str(revision))
            found = self.children[key] = (
                self.requests.labels(*labels, status_class), self.latency.labels(*labels),
                self.ttfb.labels(*labels), self.tokens.labels(*labels, "input"), self.tokens.labels(*labels, "output"))
        return found

    def render(self) -> bytes:
        return generate_latest(self.registry)
