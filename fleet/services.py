"""One function per thing done to a cluster: list them, reach one, record what an observation
found, find out its training API, drain it.

Health moves by conditional updates, so two reconcile tasks of one cluster (a lock that
expired mid-cycle) cannot move it backwards: an observation only raises ``last_seen``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

import core.backend
from cluster.backends.base import ClusterBackend, NodeCapacity
from cluster.errors import ClusterError
from cluster.placement import ClusterOffer
from cluster.training import PYTORCH, distributed_refusal
from fleet import pools
from fleet.constants import Health
from fleet.models import Cluster
from teams.models import AuditEvent
from teams.services import audit

logger = logging.getLogger(__name__)


def clusters() -> list[Cluster]:
    """Every cluster, by name. A fresh install gets the clusters its backend offers on first use
    (one ``default`` cluster; the sandbox: its inventory's), so a single cluster needs no setup.

    They are created all at once, each with what its registration found (:func:`_registration`), in one
    transaction: another process (the web beside the worker, two workers) reading meanwhile sees none of
    them — and creates them itself, or waits for this one's — never some without the rest, or one whose
    training API is not known yet (a distributed run's submission would be refused, or a price seeded for
    only one cluster). The backends are asked before the transaction: no lock waits on a cluster's answer."""
    found = list(Cluster.objects.prefetch_related("pools__flavor"))
    if found:
        return found
    now = timezone.now()
    made = []
    for offered in core.backend.offered_clusters():
        cluster = Cluster(name=offered.name, region=offered.region, labels=offered.labels)
        _set(cluster, _registration(cluster, now))
        made.append(cluster)
    try:
        with transaction.atomic():
            for cluster in made:
                cluster.save(force_insert=True)
    except IntegrityError:  # another process created them at the same moment: all of them, once it committed
        pass
    return list(Cluster.objects.prefetch_related("pools__flavor"))


def registered(cluster: Cluster) -> None:
    """What a cluster's registration does once its row exists (one added in the admin console): find
    out its training API now, rather than at its first heartbeat (:func:`_registration`)."""
    values = _registration(cluster, timezone.now())
    if values:
        Cluster.objects.filter(pk=cluster.pk).update(**values)
        _set(cluster, values)


def _registration(cluster: Cluster, now: datetime) -> dict:
    """The fields a new cluster's registration sets: what discovery of its training API found ({} when its
    backend cannot tell). A backend that cannot be built (a dotted path that imports nothing) is the
    heartbeat's to report, as it always was."""
    try:
        reach = backend(cluster)
    except ImproperlyConfigured as exc:
        logger.warning("cluster %s: no backend to discover its training API with: %s", cluster.name, exc)
        return {}
    return _training_found(cluster, reach, now) or {}


def _set(cluster: Cluster, values: dict) -> None:
    for name, value in values.items():
        setattr(cluster, name, value)


def get(name: str) -> Cluster | None:
    """The cluster called ``name`` (creating the offered ones first on a fresh install)."""
    return next((c for c in clusters() if c.name == name), None)


def default_cluster() -> Cluster:
    """The cluster work goes to when there is only one to choose from (and the team namespaces' first home)."""
    return clusters()[0]


def spec(cluster: Cluster) -> core.backend.BackendSpec:
    return core.backend.BackendSpec(cluster.name, cluster.backend, cluster.kubeconfig, cluster.context)


def backend(cluster: Cluster) -> ClusterBackend:
    """The backend that talks to ``cluster`` (one per cluster and process)."""
    return core.backend.backend_for(spec(cluster))


def placed_on(cluster_id: int | None) -> Cluster:
    """The cluster a workload placed on ``cluster_id`` lives on; not placed yet: the default one."""
    if cluster_id is None:
        return default_cluster()
    return next(c for c in clusters() if c.pk == cluster_id)


def backend_at(cluster_id: int | None) -> ClusterBackend:
    """The backend of the cluster a workload with ``cluster_id`` is placed on (see :func:`placed_on`)."""
    return backend(placed_on(cluster_id))


def answered(cluster: Cluster, now: datetime) -> None:
    """An observation of ``cluster`` at ``now`` succeeded: it is ready again."""
    Cluster.objects.filter(pk=cluster.pk).filter(Q(last_seen__isnull=True) | Q(last_seen__lt=now)).update(
        last_seen=now, health=Health.READY, silent_cycles=0, silent_since=None, last_error="")


def unanswered(cluster: Cluster, error: str, now: datetime) -> str:
    """An observation of ``cluster`` failed: degraded, and ``lost`` after
    ``SLIPWAY_CLUSTER_LOST_AFTER_CYCLES`` failures in a row. Returns its health now."""
    Cluster.objects.filter(pk=cluster.pk).update(
        silent_cycles=F("silent_cycles") + 1, last_error=error[:500])
    Cluster.objects.filter(pk=cluster.pk, silent_since__isnull=True).update(silent_since=now)
    Cluster.objects.filter(pk=cluster.pk, silent_cycles__gte=settings.SLIPWAY_CLUSTER_LOST_AFTER_CYCLES).update(
        health=Health.LOST)
    Cluster.objects.filter(pk=cluster.pk, health=Health.READY).update(health=Health.DEGRADED)
    cluster.refresh_from_db()
    return cluster.health


def record_nodes(cluster: Cluster, nodes: list[NodeCapacity], now: datetime) -> None:
    """Keep what ``cluster``'s nodes offered at ``now``, for pages that must not wait on a cluster."""
    rows = [{"node": n.node, "resource_name": n.resource_name, "allocatable": n.allocatable,
             "in_use": n.in_use, "labels": dict(n.labels), **({"provisioning": True} if n.provisioning else {})}
            for n in nodes if not pools.is_headroom(n)]
    Cluster.objects.filter(pk=cluster.pk).update(nodes=rows, nodes_read_at=now)
    cluster.nodes, cluster.nodes_read_at = rows, now


def recorded_nodes(cluster: Cluster) -> list[NodeCapacity]:
    """The nodes as :func:`record_nodes` kept them, with the nodes its elastic pools may still add
    (:func:`fleet.pools.with_headroom`: what the cluster can hold is what its pools' ``max`` allow)."""
    return pools.with_headroom(cluster, [
        NodeCapacity(r["node"], r["resource_name"], r["allocatable"], r["in_use"], r.get("labels") or {},
                     bool(r.get("provisioning"))) for r in cluster.nodes or []])


def recorded_offers() -> list[ClusterOffer]:
    """Every cluster as last recorded (state, labels, :func:`recorded_nodes`), unpriced: what admission
    reads to tell whether any cluster may take new work of a flavor (:func:`cluster.placement.no_usable_cluster`).
    One query; no cluster is called, so a slow or lost one never slows a submission. A fresh install
    whose clusters are not created yet (:func:`clusters`) has none that takes no new work: none."""
    return [ClusterOffer(name=c.name, state=c.state, nodes=tuple(recorded_nodes(c)), labels=dict(c.labels),
                         training_api=c.effective_training_api, frameworks=c.frameworks)
            for c in Cluster.objects.prefetch_related("pools__flavor")]


def training_due(cluster: Cluster, now: datetime) -> bool:
    """Whether the heartbeat asks ``cluster`` its training API again: never asked, or last asked
    ``SLIPWAY_TRAINING_DISCOVERY_SECONDS`` ago (what it has changes when staff install or remove a
    training operator, rarely: a few GETs every few minutes, not every cycle)."""
    checked = cluster.training_checked_at
    return checked is None or checked <= now - timedelta(seconds=settings.SLIPWAY_TRAINING_DISCOVERY_SECONDS)


def discover_training(cluster: Cluster, backend: ClusterBackend, now: datetime) -> bool:
    """Ask ``cluster``'s backend which training API it has and which runtimes it offers, and keep the answer
    (:func:`_training_found`). Returns whether an answer was recorded."""
    values = _training_found(cluster, backend, now)
    if values is None:
        return False
    Cluster.objects.filter(pk=cluster.pk).update(**values)
    _set(cluster, values)
    return "training_api" in values


def _training_found(cluster: Cluster, backend: ClusterBackend, now: datetime) -> dict | None:
    """What asking ``cluster``'s backend (:meth:`~cluster.backends.base.ClusterBackend.training`) found, as the
    cluster's fields. Never raises: a cluster that does not answer keeps what it was known to have, and the
    failure is kept with the time it was asked (``training_error``), so it is asked again after the period,
    not every cycle. None: a backend that cannot tell, which changes nothing."""
    try:
        offer = backend.training()
    except ClusterError as exc:
        logger.warning("training API discovery of %s failed (keeping %s): %s", cluster.name,
                       cluster.training_api or "what it had", exc)
        return {"training_checked_at": now, "training_error": str(exc)[:500]}
    if offer is None:
        return None
    return {"training_api": offer.api, "training_runtimes": [asdict(r) for r in offer.runtimes],
            "training_checked_at": now, "training_error": ""}


def set_training_override(cluster: Cluster, override: str, actor) -> Cluster:
    """Take ``cluster`` to have the training API ``override`` whatever discovery finds ("": discovery's again).
    Audited as any change of a cluster, with the new value (an API's name is no secret)."""
    with transaction.atomic():
        changed = Cluster.objects.filter(pk=cluster.pk).exclude(training_api_override=override).update(
            training_api_override=override)
        if changed:
            audit(AuditEvent.Action.CLUSTER_CHANGED, actor=actor, target=f"cluster:{cluster.name}",
                  training_api_override=override)
    cluster.refresh_from_db()
    return cluster


def distributed_training_refusal(selector: dict | None = None, framework: str = PYTORCH) -> str:
    """Why distributed training of ``framework`` whose cluster selector is ``selector`` could go to no cluster, as
    the clusters are taken to be now (:func:`cluster.training.distributed_refusal`: it names those that take it);
    "" when one may. A submission's field error: such work could never be placed."""
    every = clusters()
    wanted = (selector or {}).items()
    return distributed_refusal({c.name: c.training for c in every if wanted <= c.labels.items()},
                               {c.name: c.training for c in every}, framework)


#: A cluster's fields that decide what code the portal runs to reach it: the backend's dotted path is
#: imported, and a kubeconfig's ``exec`` section runs a command on the portal's host. Only
#: superusers change them (fleet.admin), and every change of a cluster is audited.
CODE_FIELDS = ("backend", "kubeconfig", "context")


def record_cluster_change(actor, cluster: Cluster, fields: list[str], created: bool = False) -> None:
    """Audit an edit of ``cluster`` in the admin console: who, which fields (never their values: a
    kubeconfig holds credentials)."""
    if fields or created:
        audit(AuditEvent.Action.CLUSTER_CHANGED, actor=actor, target=f"cluster:{cluster.name}",
              change="created" if created else "edited", fields=sorted(fields))


def set_draining(cluster: Cluster, draining: bool, actor) -> Cluster:
    """Drain ``cluster`` (no new placements; running work finishes) or make it placeable again. Audited."""
    with transaction.atomic():
        changed = Cluster.objects.filter(pk=cluster.pk).exclude(draining=draining).update(draining=draining)
        if changed:
            audit(AuditEvent.Action.CLUSTER_CHANGED, actor=actor, target=f"cluster:{cluster.name}",
                  draining=draining)
    cluster.refresh_from_db()
    return cluster


