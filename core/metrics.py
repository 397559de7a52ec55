"""Slipway's Prometheus figures (docs/design.md "Sharing, preemption, clusters", "Operating Slipway") and who may read them.

Two sorts of figure:

* **events**, counted where they happen, in whichever process they happen in (a gunicorn
  worker, a Celery pool process): admissions by decision and their latency, reconcile cycle
  time, cluster API errors, whether the last reconcile reached its cluster. They are
  ``prometheus_client`` metrics in *multiprocess mode*: each process writes its values into
  memory-mapped files under ``PROMETHEUS_MULTIPROC_DIR`` and a scrape sums the files of every
  process (:func:`exposition`). ``portal/settings.py`` exports that directory into the
  environment, and it must be there before ``prometheus_client`` is first imported (the
  library picks its value class at import): every Django process loads the settings before any
  app module, so only this module and :mod:`quotas.metrics` import the library, after them.
  ``gunicorn.conf.py`` (``child_exit``) and ``portal/celery.py`` (``worker_process_shutdown``)
  call :func:`process_exited` for each process that ends (docs/operations.md, "Monitoring").
* **state**, computed from the database at scrape time by a collector (units in use, queue
  depth, budget burn: :mod:`quotas.metrics`), so every process and every restart agrees.

Per-cluster figures carry a ``cluster`` label: the cluster's name (``east`` and ``west`` in the
demo; ``default`` for a single-cluster install without one), as :func:`cluster_label` gives it.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterable

from django.conf import settings
from django.db import transaction
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from cluster.errors import ClusterError
from core.networks import address_in

#: The label of a backend built outside any cluster (a single-cluster install's cluster is named so too).
DEFAULT_CLUSTER = "default"

#: Media type of a scrape's body (Prometheus' text exposition format).
CONTENT_TYPE = CONTENT_TYPE_LATEST

ADMISSIONS = Counter(
    "slipway_admissions", "Admission decisions: admitted (within nominal quota), borrowed (with units "
    "lent by the cohort), queued, rejected.", ["decision"])
ADMISSION_LATENCY = Histogram(
    "slipway_admission_latency_seconds", "Time admit() took to decide and record one request, its locks included.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0))
RECONCILE_DURATION = Histogram(
    "slipway_reconcile_duration_seconds", "Time one reconcile cycle of a cluster took (observed or not).",
    ["cluster"], buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0))
RECONCILE_LAST_SUCCESS = Gauge(
    "slipway_reconcile_last_success_timestamp_seconds", "Unix time the last reconcile cycle that observed the "
    "cluster ended.", ["cluster"], multiprocess_mode="max")
CLUSTER_UP = Gauge(
    "slipway_cluster_up", "1 when the last reconcile cycle observed the cluster, 0 when it could not.",
    ["cluster"], multiprocess_mode="mostrecent")
CLUSTER_API_ERRORS = Counter(
    "slipway_cluster_api_errors", "Errors a cluster backend raised, by cluster and error class "
    "(Transient, Invalid, NotFound, Conflict, ClusterError).", ["cluster", "error"])


def cluster_label(name: str | None = None) -> str:
    """The ``cluster`` label of the cluster named ``name`` (``default`` for a backend built outside any cluster)."""
    return name or DEFAULT_CLUSTER


def count_admission(decision: str, seconds: float | None = None) -> None:
    """One admission ``decision`` (:attr:`quotas.decide.Decision.label`), with the time it took when timed.

    Counted when the transaction that recorded it commits (at once outside one): a decision rolled
    back with its request — the submission failed after admission — was never made.
    """

    def count() -> None:
        ADMISSIONS.labels(decision).inc()
        if seconds is not None:
            ADMISSION_LATENCY.observe(seconds)

    transaction.on_commit(count)


def count_cluster_error(cluster: str, error: ClusterError) -> None:
    """A cluster backend raised ``error`` (a backend's ``on_error`` hook, set by :mod:`core.backend`)."""
    CLUSTER_API_ERRORS.labels(cluster, type(error).__name__).inc()


def record_reconcile(cluster: str, seconds: float, observed: bool) -> None:
    """One reconcile cycle of ``cluster`` took ``seconds``; ``observed``: it reached the cluster
    (``slipway_cluster_up``: a cluster down for the lost threshold's cycles is ``lost`` in the portal)."""
    RECONCILE_DURATION.labels(cluster).observe(seconds)
    CLUSTER_UP.labels(cluster).set(1 if observed else 0)
    if observed:
        RECONCILE_LAST_SUCCESS.labels(cluster).set(time.time())


def process_exited(pid: int) -> None:
    """Forget the live-process gauges of a process that ended (its counters stay summed)."""
    mark_process_dead(pid, settings.PROMETHEUS_MULTIPROC_DIR)


# -- exposition -------------------------------------------------------------------------------


def exposition(collectors: Iterable[Collector] = ()) -> bytes:
    """A scrape's body: every process's event figures (summed from the multiprocess directory)
    and what ``collectors`` compute now.

    A fresh registry per scrape, as multiprocess mode requires: the process's own default
    registry would report only its own values.
    """
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=settings.PROMETHEUS_MULTIPROC_DIR)
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)


def scrape_allowed(remote_addr: str | None, authorization: str | None) -> bool:
    """May this client read the figures?

    With ``SLIPWAY_METRICS_TOKEN`` set, a request bearing it (``Authorization: Bearer …``) may,
    from anywhere. Without it, a client whose address is in ``SLIPWAY_METRICS_ALLOW`` may. The
    address is the socket's peer (``REMOTE_ADDR``), never X-Forwarded-For: Prometheus scrapes
    the pods directly, and a forwarded header is whatever the client wrote.
    """
    token = settings.SLIPWAY_METRICS_TOKEN
    if token and authorization:
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode()):
            return True
    return address_in(remote_addr, tuple(settings.SLIPWAY_METRICS_ALLOW))


def worker_endpoint(environ: dict, start_response) -> list[bytes]:
    """The Celery worker's own ``/metrics`` (a WSGI app; ``SLIPWAY_WORKER_METRICS_PORT``): the
    event figures of this worker pod's processes, behind the same :func:`scrape_allowed`.

    In Kubernetes the web and worker pods have their own multiprocess directories, so each
    serves its own; the database-computed figures come from the web's ``/metrics`` only, so no
    series is scraped twice.
    """
    if environ.get("PATH_INFO") != "/metrics":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]
    if not scrape_allowed(environ.get("REMOTE_ADDR"), environ.get("HTTP_AUTHORIZATION")):
        start_response("403 Forbidden", [("Content-Type", "text/plain")])
        return [b"forbidden\n"]
    start_response("200 OK", [("Content-Type", CONTENT_TYPE), ("Cache-Control", "no-store")])
    return [exposition()]

