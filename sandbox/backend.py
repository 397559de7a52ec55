"""``SandboxBackend``: the simulated GPU cluster behind Slipway's cluster-backend interface.

The "API server" half (``apply``/``delete``/``observe``/``logs``/``events``/``capacity``)
stores and reads Kubernetes-shaped objects in the database; the "cluster" half is
:meth:`SandboxBackend.tick`, which advances everything to ``now`` (see :mod:`sandbox.tick`).
Observed objects look exactly like the API server's (``metadata``/``spec``/``status``, RFC 3339
timestamps), so the kinds' status mappings (on :mod:`cluster.status`) read both backends the same way.

Several clusters: an instance works on one cluster of the inventory (``SandboxBackend("west")``;
no name: the first one listed, :func:`sandbox.inventory.cluster`), and every query it makes
is filtered on that cluster's rows, so two clusters never see each other's namespaces, pods,
events or nodes.

Concurrency: ``apply``/``delete`` each run in one transaction; ``tick`` locks its cluster's
clock row (``select_for_update``; SQLite serialises writers anyway), so concurrent ticks of one
cluster from web, worker and beat run one after the other while two clusters tick side by
side, and a tick for a ``now`` not after the last one is a no-op — ticking twice with the same
``now`` changes nothing.

Faults (a reclaimed spot node, a silenced cluster) are injected by :mod:`sandbox.faults`; the
backend reads them: a silenced cluster's every call of the cluster-backend interface raises
``Transient`` (:meth:`SandboxBackend._answering`), a reclaimed node is missing from ``capacity``.
What a pod looks like — its manifest, status and log — is rendered by :mod:`sandbox.pods`.

Every public method takes an optional keyword ``now`` so tests control time; the default is
``django.utils.timezone.now()``.
"""

from __future__ import annotations

import copy
import functools
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import ParamSpec, TypeVar

from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from cluster.backends.base import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    NOTICE_ANNOTATION,
    STARTUP_EVENT_REASONS,
    TEAM_LABEL,
    WORKLOAD_LABEL,
    ClusterAddress,
    ClusterBackend,
    ClusterEvent,
    Manifest,
    NodeCapacity,
    NodePoolLimit,
    ObservedWorkload,
    ResourceKind,
    ServiceRef,
    WorkloadTelemetry,
    env_secret_name,
)
from cluster.errors import ClusterError, Invalid, NotFound, Transient
from cluster.metrics import METRIC_SERIES, per_workload, running_pods
from cluster.perf import gc_paused
from cluster.startup import any_starting
from cluster.training import LABELS, NONE, PYTORCHJOB, PYTORCHJOB_API, TRAINJOB, TRAINJOB_API, TrainingOffer, discovered
from core.rawsql import sql_datetime
from sandbox import engines, exporter, inventory
from sandbox import pools as elastic
from sandbox.bulk import Record
from sandbox.bulk import load as load_records
from sandbox.controllers.scaledobject import endpoint_load
from sandbox.models import (
    SimClock,
    SimEngine,
    SimEvent,
    SimLoad,
    SimNode,
    SimNodeHeat,
    SimNodeOutage,
    SimObject,
    SimPod,
    SimPool,
    SimSilence,
)
from sandbox.names import new_uid
from sandbox.pods import (
    GPU_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPU_UTILIZATION_ANNOTATION,
    busy_per_gpu,
    deletion,
    pod_log,
    pod_manifest,
    trainer_status,
)
from sandbox.quantity import parse_quantity
from sandbox.simulation import stable_int
from sandbox.tick import run_tick
from sandbox.timestamps import rfc3339
from sandbox.trainer import installed_runtimes, runtime_refusal
from sandbox.training_metrics import lines_since
from sandbox.validation import admit, compile_plan, kind_label, served
from sandbox.world import PLANS as PLAN_CACHE
from sandbox.world import STAGE_READY

P = ParamSpec("P")
T = TypeVar("T")

#: ScaledObject annotation with the endpoint's current synthetic load (trigger metric units).
LOAD_ANNOTATION = "sandbox.slipway.dev/load"
#: Kubernetes keeps events for an hour (kube-apiserver --event-ttl); so does the sandbox.
EVENT_TTL = timedelta(hours=1)
#: Decoded (manifest, plan) per (uid, resourceVersion): observe() re-reads only status columns.
_MANIFESTS: dict[tuple[str, int], tuple[dict, dict]] = {}
MANIFEST_CACHE_MAX = 200_000
OBSERVE_COLUMNS = ("id", "resource_kind", "api_version", "namespace", "name", "workload", "team", "uid", "resource_version",
                   "generation", "status", "memo", "replicas", "created_at", "delete_at", "delete_grace")
#: The kinds whose pods a graceful delete lets run until the grace period ends.
POD_OWNERS = ("Job", "PyTorchJob", "TrainJob", "Deployment")
#: Those kinds as :meth:`SandboxBackend.observe` lists them: what the sandbox's own views of its pods
#: (``manage.py sandbox status``) observe, without the workload kinds' registry.
POD_OWNER_KINDS = (ResourceKind("batch", "v1", "Job", "jobs", observed=True),
                   ResourceKind("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", observed=True),
                   ResourceKind("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs", observed=True),
                   ResourceKind("apps", "v1", "Deployment", "deployments", observed=True))
#: The training kinds a cluster serves only with their API: (apiVersion, kind) → (the API, its kind).
CRDS = {(PYTORCHJOB_API[0], "PyTorchJob"): (PYTORCHJOB, "PyTorchJob"), (TRAINJOB_API[0], "TrainJob"): (TRAINJOB, "TrainJob")}
#: Namespaces that exist without being applied.
BUILTIN_NAMESPACES = ("default", "kube-system")


def storage_errors(method: Callable[P, T]) -> Callable[P, T]:
    """Database faults (e.g. SQLite's "database is locked" past the busy timeout) surface as
    ``Transient``, like a 5xx from an API server: the interface raises only cluster errors.
    Every cluster error leaving the method is reported (:meth:`ClusterBackend.raised`), as a
    real backend reports what its API server answered. Also wraps the fault levers of
    :mod:`sandbox.faults`, which take the backend as their first argument."""

    @functools.wraps(method)
    def wrapper(self: SandboxBackend, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(self, *args, **kwargs)
        except ClusterError as exc:
            self.raised(exc)
            raise
        except DatabaseError as exc:
            raise self.raised(Transient(f"sandbox storage error: {exc}")) from exc

    return wrapper


@dataclass(frozen=True)
class GpuDevice:
    """One physical GPU of a shared node, as the simulated DCGM exporter reports it."""

    node: str
    gpu: int  # its index on the node
    sharing: str  # time-slicing | mps
    replicas: int
    pods: tuple[str, ...]  # namespace/name of the running pods on it
    utilization: int  # percent: the sum of its pods' (DCGM_FI_DEV_GPU_UTIL)
    memory_used_mib: int  # what its pods hold (DCGM_FI_DEV_FB_USED)
    memory_mib: int


def _scaled(metric: str, value: float) -> tuple[str, float]:
    series, scale = METRIC_SERIES[metric]
    return series, value * scale


class SandboxBackend(ClusterBackend):
    """One embedded simulated cluster (``SLIPWAY_CLUSTER_BACKEND=sandbox``).

    ``cluster``: a cluster of the inventory, None for the first one; a name it does not list
    raises :class:`sandbox.inventory.UnknownCluster`, which names the ones it does.
    """

    name = "sandbox"

    #: The clusters a fresh install gets with this backend: the inventory's (``core.backend.offered_clusters``).
    offered_clusters = staticmethod(inventory.clusters)

    def __init__(self, cluster: str | None = None) -> None:
        #: The name of the cluster this instance sees and changes.
        self.cluster = inventory.cluster(cluster).name

    def _rows(self, model: type[T]) -> QuerySet[T]:
        """``model``'s rows of this cluster: every query of the backend starts here."""
        return model.objects.filter(cluster=self.cluster)

    def _state(self) -> tuple[datetime | None, datetime | None]:
        """The cluster's last tick and since when it is silent (None: it answers), in one query."""
        tick_sql, tick_params = self._rows(SimClock).values("last_tick").query.sql_with_params()
        silence_sql, silence_params = self._rows(SimSilence).values("since").query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT ({tick_sql}), ({silence_sql})", (*tick_params, *silence_params))
            last_tick, silent_since = cursor.fetchone()
        return sql_datetime(last_tick), sql_datetime(silent_since)

    def _answering(self) -> datetime | None:
        """The cluster's last tick, once sure it answers: ``Transient`` while it is silenced.

        The first step of every call of the cluster-backend interface (but ``tick``, which is
        the cluster running, not Slipway talking to it).
        """
        last_tick, silent_since = self._state()
        if silent_since is not None:
            raise Transient(f"cluster {self.cluster} does not answer (silent since {rfc3339(silent_since)})")
        return last_tick

    # -- writes ------------------------------------------------------------------------------

    @storage_errors
    def apply(self, objects: list[Manifest], resources: Sequence[ResourceKind] = (), *,
              now: datetime | None = None) -> list[Manifest]:
        self._answering()
        now = now or timezone.now()
        self._refuse_training_without_api(objects)
        admitted = [admit(obj, resources) for obj in objects]  # 1. validate all first: nothing is written on Invalid
        runtimes = installed_runtimes(inventory.cluster(self.cluster).training)
        for obj in admitted:
            self._refuse_without_runtime(obj, runtimes, resources)
        with transaction.atomic():
            return copy.deepcopy([self._to_manifest(row) for row in self._store(admitted, now, resources, runtimes)])

    def _refuse_without_runtime(self, obj: Manifest, runtimes: dict[str, Manifest],
                                resources: Sequence[ResourceKind]) -> None:
        """Trainer's validating webhook: a TrainJob whose ClusterTrainingRuntime the cluster lacks is a 422
        (:func:`sandbox.trainer.runtime_refusal`); nothing of the batch is written."""
        if obj["kind"] != "TrainJob":
            return
        why = runtime_refusal(obj, runtimes)
        if why:
            kind = served(obj["apiVersion"], "TrainJob", resources)
            raise self.raised(Invalid(f'admission webhook "validate.trainjob.trainer.kubeflow.org" denied the request: '
                                      f'{kind_label(kind)} "{obj["metadata"]["name"]}" is invalid: {why}', status=422))

    def _store(self, admitted: list[Manifest], now: datetime, resources: Sequence[ResourceKind],
               runtimes: dict[str, Manifest]) -> list[SimObject]:
        # 2. namespaces must exist (or be created by this batch), as on a real API server
        wanted = {o["metadata"]["namespace"] for o in admitted if "namespace" in o["metadata"]}
        created = {o["metadata"]["name"] for o in admitted if o["kind"] == "Namespace"}
        missing = wanted - created - set(BUILTIN_NAMESPACES)
        if missing:
            present = set(self._rows(SimObject).filter(resource_kind="Namespace", name__in=missing).values_list(
                "name", flat=True))
            if missing - present:
                raise NotFound(f'namespaces "{sorted(missing - present)[0]}" not found', status=404)
        # 3. create or update each object (same kind/namespace/name: update, never a second object)
        stored = []
        for obj in admitted:
            meta = obj["metadata"]
            namespace = meta.get("namespace") or meta["name"]
            labels = meta.get("labels") or {}
            row = self._rows(SimObject).select_for_update().filter(resource_kind=obj["kind"], namespace=namespace,
                                                                   name=meta["name"]).first()
            manifest = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
            manifest["metadata"] = {k: v for k, v in meta.items()
                                    if k not in ("uid", "resourceVersion", "creationTimestamp", "generation",
                                                 "managedFields")}
            plan = compile_plan(obj, runtimes)
            if row is None:
                row = SimObject(cluster=self.cluster, resource_kind=obj["kind"], api_version=obj["apiVersion"],
                                namespace=namespace, name=meta["name"],
                                workload=labels.get(WORKLOAD_LABEL, ""), team=labels.get(TEAM_LABEL, ""),
                                uid=new_uid(), manifest=manifest, plan=plan, created_at=now,
                                status=_initial_status(obj))
                row.save()
            else:
                if obj["kind"] == "Job" and row.manifest.get("spec", {}).get("template") != obj["spec"].get("template"):
                    job = served(obj["apiVersion"], "Job", resources)
                    raise Invalid(f'{kind_label(job)} "{meta["name"]}" is invalid: spec.template: Invalid value: '
                                  '"...": field is immutable', status=422)
                if obj["kind"] == "PersistentVolumeClaim":
                    _check_claim_update(meta["name"], row.manifest.get("spec") or {}, obj.get("spec") or {})
                if row.manifest != manifest:
                    if row.manifest.get("spec") != manifest.get("spec"):
                        row.generation += 1
                    row.manifest, row.plan = manifest, plan
                    row.workload, row.team = labels.get(WORKLOAD_LABEL, ""), labels.get(TEAM_LABEL, "")
                    row.api_version = obj["apiVersion"]
                    row.resource_version += 1
                    row.save()
            stored.append(row)
        return stored

    def apply_secret(self, secret: Manifest, *, now: datetime | None = None) -> None:
        """Record the Secret with its keys but not their values: a simulated cluster needs no secret,
        and the sandbox's tables are readable by more than the cluster's etcd would be."""
        recorded = {**secret, "data": dict.fromkeys(secret.get("data") or {}, "")}
        self.apply([recorded], now=now)

    @storage_errors
    def delete(self, address: ClusterAddress, resources: Sequence[ResourceKind], *, now: datetime | None = None,
               grace_seconds: int | None = None) -> int:
        """The workload's objects of the deleted kinds and its env Secret; pods go with their owners (CASCADE).

        ``grace_seconds`` > 0: an owner with live pods stays, terminating (``deletionTimestamp``
        on it and its pods, which keep running and holding their quota), until its pods have
        exited or the grace period ends; the tick then removes it (:func:`sandbox.tick.finish_deletions`).
        A second delete may shorten the grace, never lengthen it, as on an API server. None or 0:
        everything goes at once. The other objects (Service, ScaledObject, Secret) go at once.
        """
        self._answering()
        now = now or timezone.now()
        doomed = Q()
        for resource in resources:
            if resource.deleted:
                doomed |= Q(resource_kind=resource.kind, api_version=resource.api_version, workload=address.object_name)
        doomed |= Q(resource_kind="Secret", name=env_secret_name(address.object_name))
        with transaction.atomic():
            rows = self._rows(SimObject).filter(doomed, namespace=address.namespace)
            count = rows.count()
            kept = self._terminate(rows, now, grace_seconds) if grace_seconds and grace_seconds > 0 else []
            rows.exclude(pk__in=kept).delete()
            if not kept:
                self._rows(SimLoad).filter(namespace=address.namespace, workload=address.object_name).delete()
            return count

    @storage_errors
    def delete_objects(self, namespace: str, objects: Sequence[tuple[ResourceKind, str]]) -> int:
        """The named objects at once; their pods go with them (CASCADE), their engines with the pods."""
        self._answering()
        named = Q(pk__in=[])
        for kind, name in objects:
            named |= Q(resource_kind=kind.kind, api_version=kind.api_version, name=name)
        rows = self._rows(SimObject).filter(named, namespace=namespace)
        count = rows.count()
        rows.delete()
        return count

    @staticmethod
    def _terminate(rows, now: datetime, grace: int) -> list[int]:
        """Start a graceful delete of the pod owners among ``rows`` that have live pods on a node; their ids.

        Pods not bound to a node have nothing to stop: an API server deletes them at once.
        """
        live = SimPod.objects.filter(owner=OuterRef("pk"), active=True).exclude(node="")
        deadline = now + timedelta(seconds=grace)
        kept = []
        for owner in rows.filter(resource_kind__in=POD_OWNERS).filter(Exists(live)).select_for_update():
            kept.append(owner.pk)
            if owner.delete_at is not None and owner.delete_at <= deadline:
                continue  # already terminating, at least as soon
            first = owner.delete_at is None
            owner.delete_at, owner.delete_grace = deadline, grace
            owner.save(update_fields=["delete_at", "delete_grace"])
            if not first:
                continue
            plan = owner.plan["pods"]
            SimEvent.objects.bulk_create(
                SimEvent(cluster=pod.cluster, namespace=pod.namespace, workload=pod.workload, object=f"Pod/{pod.name}",
                         type="Normal",
                         reason="Killing", message=f"Stopping container {plan[pod.role]['ctr']}", time=now)
                for pod in owner.pods.filter(active=True, phase="Running"))
        return kept

    @storage_errors
    def annotate_pods(self, address: ClusterAddress, annotations: dict[str, str | None], *,
                      now: datetime | None = None) -> int:
        """Merge ``annotations`` onto the workload's live pods (None removes a key); how many pods.

        The preemption notice (``slipway.dev/notice``) reaches a pod's downward-API file at
        ``now``: a pod that honours it (``SLIPWAY_SIM_HONOUR_NOTICE``) checkpoints and exits
        on the next tick. Columns of their own, which the tick never writes back.
        """
        self._answering()
        now = now or timezone.now()
        with transaction.atomic():
            pods = list(self._rows(SimPod).select_for_update().filter(
                namespace=address.namespace, workload=address.object_name, active=True))
            for pod in pods:
                merged = {**(pod.annotations or {}), **annotations}
                pod.annotations = {k: str(v) for k, v in merged.items() if v is not None}
                if pod.notice_at is None and pod.annotations.get(NOTICE_ANNOTATION):
                    pod.notice_at = now
                pod.save(update_fields=["annotations", "notice_at"])
            return len(pods)

    # -- the simulation's state and own levers ----------------------------------------------------

    def nodes_down(self) -> dict[str, datetime]:
        """The cluster's reclaimed nodes (:func:`sandbox.faults.reclaim_node`) and since when."""
        return dict(self._rows(SimNodeOutage).values_list("node", "since"))

    def silent_since(self) -> datetime | None:
        """Since when the cluster does not answer (:func:`sandbox.faults.silence`; None: it answers)."""
        return self._state()[1]

    def set_load(self, address: ClusterAddress, value: float | None) -> None:
        """Pin an endpoint's synthetic load (trigger metric units); None returns it to the demo curve."""
        if value is None:
            self._rows(SimLoad).filter(namespace=address.namespace, workload=address.object_name).delete()
            return
        SimLoad.objects.update_or_create(cluster=self.cluster, namespace=address.namespace,
                                         workload=address.object_name, defaults={"value": max(float(value), 0.0)})

    def reset(self) -> None:
        """Forget the cluster's objects, pods, events, loads, clock, reclaimed and overheated nodes, its elastic
        pools' nodes and live changes (each starts again from the inventory, at its ``min``), and stop its
        engines: an empty cluster (a silence stays: it is the network's, not the cluster's). Other clusters keep
        theirs."""
        with transaction.atomic():
            engines.stop_all(self.cluster)
            for model in (SimPod, SimObject, SimEvent, SimLoad, SimClock, SimNodeOutage, SimNodeHeat, SimNode,
                          SimPool):
                self._rows(model).delete()

    # -- the clock -------------------------------------------------------------------------------

    @storage_errors
    def tick(self, now: datetime | None = None) -> dict[str, int] | None:
        """Advance the cluster to ``now``. Returns what changed, or None when ``now`` was already reached.

        Only this cluster: its clock row is the lock, so another cluster's tick runs alongside.
        A silenced cluster ticks too (it runs on; only Slipway cannot reach it).
        """
        now = now or timezone.now()
        for attempt in range(2):
            try:
                with transaction.atomic():
                    clock = self._rows(SimClock).select_for_update().first()
                    if clock is None:
                        clock = SimClock.objects.create(cluster=self.cluster)
                    if clock.last_tick is not None and now <= clock.last_tick:
                        return None
                    with gc_paused():
                        summary = run_tick(now, self.cluster, self.demand)
                    self._rows(SimEvent).filter(time__lt=now - EVENT_TTL).delete()
                    clock.last_tick = now
                    clock.save(update_fields=["last_tick"])
                    return summary
            except IntegrityError:
                if attempt:  # two processes created the cluster's clock row at once: the retry sees it
                    raise
        return None

    def clock(self) -> datetime:
        """The simulated time of the cluster's last tick (now, if it never ticked)."""
        return self._state()[0] or timezone.now()

    # -- reads -------------------------------------------------------------------------------------

    @storage_errors
    def observe(self, resources: Sequence[ResourceKind], *, now: datetime | None = None) -> list[ObservedWorkload]:
        """At most five queries whatever the size: clock (and silence), loads, objects, manifests not
        cached yet, pods; one more while the sandbox runs real engines, their loads (:mod:`sandbox.engines`),
        and one while some pod is starting, its ``Pulled`` events (:meth:`_startup_events`).

        The returned objects share their ``spec`` with a per-process cache of decoded
        manifests (keyed by uid and resourceVersion, so an apply invalidates it): treat
        them as read-only, as one would a Kubernetes informer's cache.
        """
        last_tick = self._answering()
        at = now or last_tick or timezone.now()
        kinds = {(r.api_version, r.kind) for r in resources if r.observed}
        with gc_paused():
            return self._observe(at, kinds)

    def _observe(self, at: datetime, kinds: set[tuple[str, str]]) -> list[ObservedWorkload]:
        loads = {(ns, wl): v for ns, wl, v in self._rows(SimLoad).values_list("namespace", "workload", "value")}
        rows = load_records(self._rows(SimObject).order_by("pk"), OBSERVE_COLUMNS, lazy=("status", "memo"))
        missing = [row.pk for row in rows if (row.uid, row.resource_version) not in _MANIFESTS]
        fetched: dict[int, tuple[dict, dict]] = {}
        if missing:
            if len(_MANIFESTS) > MANIFEST_CACHE_MAX:
                _MANIFESTS.clear()
            source = self._rows(SimObject) if len(missing) > 500 else SimObject.objects.filter(pk__in=missing)
            for pk, uid, version, manifest, plan in source.values_list(
                    "pk", "uid", "resource_version", "manifest", "plan"):
                _MANIFESTS[(uid, version)] = fetched[pk] = (manifest, plan)
        # The two reads are separate statements: an apply between them moves an object to a newer
        # version (take the manifest and plan read second: they belong together, and the next
        # cycle sees the rest) and a delete removes it (not observed this cycle).
        kept = []
        for row in rows:
            pair = _MANIFESTS.get((row.uid, row.resource_version)) or fetched.get(row.pk)
            if pair is not None:
                row.manifest, row.plan = pair
                kept.append(row)
        rows = kept
        by_pk = {row.pk: row for row in rows}
        scaled = {(row.namespace, row.plan.get("target")): row for row in rows if row.resource_kind == "ScaledObject"}
        for row in rows:  # current load of each autoscaled endpoint, for annotations and GPU utilisation
            target = scaled.get((row.namespace, row.name)) if row.resource_kind == "Deployment" else None
            if target is not None:
                row.load = endpoint_load(loads, row.namespace, row.workload, target.plan, at)
                target.load = row.load
        grouped: dict[tuple[str, str], ObservedWorkload] = {}
        for row in rows:
            labels = row.manifest.get("metadata", {}).get("labels") or {}
            # Only the observed kinds (never Secrets: a real cluster's Slipway may not list them).
            if (labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE or not row.workload
                    or (row.api_version, row.resource_kind) not in kinds):
                continue
            key = (row.namespace, row.workload)
            if key not in grouped:
                grouped[key] = ObservedWorkload(namespace=row.namespace, object_name=row.workload, team=row.team)
            grouped[key].objects.append(self._to_manifest(row))
            if row.resource_kind == "ScaledObject":
                grouped[key].objects.append(_autoscaler_manifest(row))
        pods = load_records(self._rows(SimPod).order_by("created_at", "pk"))
        served = engines.utilization_shares(self.cluster)  # endpoint replicas' real engines (none: no query)
        busy = busy_per_gpu(((pod, by_pk[pod.owner_id].plan["pods"][pod.role]) for pod in pods
                             if pod.gpu is not None and pod.owner_id in by_pk), at)
        for pod in pods:
            owner = by_pk.get(pod.owner_id)
            group = grouped.get((pod.namespace, pod.workload))
            if owner is None or group is None:
                continue
            group.pods.append(pod_manifest(pod, owner, at, busy, served))
            if owner.resource_kind == "TrainJob":
                _report_progress(group, pod, owner, at, busy)
        self._startup_events(grouped, at)
        return list(grouped.values())

    def _startup_events(self, grouped: dict[tuple[str, str], ObservedWorkload], at: datetime) -> None:
        """The ``Pulled`` events of the workloads whose pods are starting, as the real backend lists them
        (``ObservedWorkload.pod_events``): one query, none while no pod starts."""
        starting = {key: group for key, group in grouped.items() if any_starting(group.pods, at)}
        if not starting:
            return
        rows = self._rows(SimEvent).filter(
            reason__in=STARTUP_EVENT_REASONS, object__startswith="Pod/",
            namespace__in={namespace for namespace, _ in starting},
            workload__in={workload for _, workload in starting}).order_by("time", "pk")
        for event in rows:
            group = starting.get((event.namespace, event.workload))
            if group is not None:
                group.pod_events.append(ClusterEvent(type=event.type, reason=event.reason, message=event.message,
                                                     object=event.object, time=rfc3339(event.time) or "",
                                                     count=event.count))

    def gpu_telemetry(self, observed: list[ObservedWorkload]) -> dict[ClusterAddress, WorkloadTelemetry]:
        """What the simulated DCGM exporter says (:mod:`sandbox.exporter`), per workload and GPU.

        :meth:`observe` computed each running pod's figures already (``SLIPWAY_SIM_GPU_UTIL`` pins its
        utilization, a server follows its share of the endpoint's load): one query, whether the
        cluster answers.
        """
        self._answering()
        pods = [found for workload in observed for pod in workload.pods
                if (found := exporter.pod_gpus(pod, GPU_UTILIZATION_ANNOTATION, GPU_MEMORY_ANNOTATION,
                                               GPU_ANNOTATION)) is not None]
        nodes = {node.name: node for node in inventory.nodes(self.cluster)}
        heat = dict(self._rows(SimNodeHeat).values_list("node", "degrees")) if pods else {}  # overheated nodes
        # Each metric to its series as the query's rule does (a MIG slice's engine-active ratio × 100).
        found = [(key, gpu, *_scaled(metric, value)) for key, gpu, metric, value in exporter.samples(pods, nodes, heat)]
        return per_workload(found, running_pods(observed))

    def gpu_devices(self, observed: list[ObservedWorkload]) -> list[GpuDevice]:
        """What the simulated DCGM exporter says per physical GPU of the shared nodes: the pods on
        it, its utilisation (the sum of theirs, at most 100) and the memory they hold. From the
        pods' annotations (:mod:`sandbox.pods`), so a GPU's figures are its pods' figures added up."""
        self._answering()
        found: dict[tuple[str, int], list[tuple[str, int, int]]] = defaultdict(list)
        for workload in observed:
            for pod in workload.pods:
                annotations = (pod.get("metadata") or {}).get("annotations") or {}
                if GPU_ANNOTATION in annotations and (pod.get("status") or {}).get("phase") == "Running":
                    key = ((pod.get("spec") or {}).get("nodeName", ""), int(annotations[GPU_ANNOTATION]))
                    found[key].append((f"{workload.namespace}/{pod['metadata']['name']}",
                                       int(annotations.get(GPU_UTILIZATION_ANNOTATION, 0)),
                                       int(annotations.get(GPU_MEMORY_ANNOTATION, 0))))
        down = self.nodes_down()
        return [
            GpuDevice(node=node.name, gpu=index, sharing=node.sharing.strategy, replicas=node.sharing.replicas,
                      pods=tuple(name for name, _, _ in found[(node.name, index)]),
                      utilization=min(sum(util for _, util, _ in found[(node.name, index)]), 100),
                      memory_used_mib=sum(memory for _, _, memory in found[(node.name, index)]),
                      memory_mib=node.sharing.memory_mib)
            for node in inventory.nodes(self.cluster) if node.sharing is not None and node.name not in down
            for index in range(node.sharing.gpus)
        ]

    @storage_errors
    def pods(self, address: ClusterAddress, *, now: datetime | None = None) -> list[Manifest]:
        last_tick = self._answering()
        at = now or last_tick or timezone.now()
        rows = list(self._rows(SimPod).filter(namespace=address.namespace, workload=address.object_name)
                    .select_related("owner").order_by("created_at", "pk"))
        busy = None
        shared = {(pod.node, pod.gpu) for pod in rows if pod.gpu is not None}
        if shared:  # its utilisation on a time-sliced GPU depends on who else is busy there
            where = Q()
            for node, gpu in shared:
                where |= Q(node=node, gpu=gpu)
            tenants = self._rows(SimPod).filter(where, active=True).select_related("owner")
            busy = busy_per_gpu(((pod, pod.owner.plan["pods"][pod.role]) for pod in tenants), at)
        loads = engines.utilization_shares(self.cluster) if any(pod.owner.resource_kind == "Deployment" for pod in rows) else {}
        return [pod_manifest(pod, pod.owner, at, busy, loads) for pod in rows]

    @storage_errors
    def serving_upstreams(self, services: Sequence[ServiceRef]) -> dict[ServiceRef, tuple[str, ...]]:
        """The engines of the ready pods each Service selects (its ``spec.selector`` against the pod template's
        labels of their Deployment), as kube-proxy would balance over them: three queries whatever the number.

        The data plane does not go through the API server, so a silenced cluster still answers here (its
        engines keep serving). A pod not ready (loading, its engine died) is no upstream; nor is any while
        engines are off (``SLIPWAY_SANDBOX_ENGINES``): nothing would answer.
        """
        found: dict[ServiceRef, tuple[str, ...]] = dict.fromkeys(services, ())
        if not services:
            return found
        namespaces = {ref.namespace for ref in services}
        selectors = {(namespace, name): (manifest.get("spec") or {}).get("selector") or {}
                     for namespace, name, manifest in self._rows(SimObject).filter(
                         resource_kind="Service", namespace__in=namespaces, name__in={ref.name for ref in services},
                         delete_at__isnull=True).values_list("namespace", "name", "manifest")}
        pods = list(self._rows(SimPod).filter(namespace__in=namespaces, active=True, phase="Running",
                                              stage=STAGE_READY, owner__resource_kind="Deployment")
                    .values_list("namespace", "name", "owner__manifest").order_by("created_at", "pk"))
        addresses = {(row.namespace, row.pod): row.address for row in self._rows(SimEngine).filter(
            namespace__in=namespaces)} if pods else {}
        for ref in services:
            selector = selectors.get((ref.namespace, ref.name))
            if not selector:
                continue
            found[ref] = tuple(
                addresses[(namespace, pod)] for namespace, pod, owner in pods
                if namespace == ref.namespace and (namespace, pod) in addresses
                and selector.items() <= (((owner.get("spec") or {}).get("template") or {}).get("metadata")
                                         or {}).get("labels", {}).items())
        return found

    @storage_errors
    def logs(self, address: ClusterAddress, pod: str, tail: int | None = 200, previous: bool = False,
             since: datetime | None = None, *, now: datetime | None = None) -> list[str]:
        """``since``: a simulated line begins with its time already (as ``timestamps=true`` makes a real one
        begin), so it is kept when that time is at or after ``since`` (to the second, as ``sinceTime``)."""
        last_tick = self._answering()
        at = now or last_tick or timezone.now()
        row = self._rows(SimPod).filter(namespace=address.namespace, workload=address.object_name,
                                        name=pod).select_related("owner").first()
        if row is None:
            raise NotFound(f'pods "{pod}" not found', status=404)
        busy = None
        if row.gpu is not None and row.active:  # a run taking turns on a time-sliced GPU logs at the shared speed
            tenants = self._rows(SimPod).filter(node=row.node, gpu=row.gpu, active=True).select_related("owner")
            busy = busy_per_gpu(((p, p.owner.plan["pods"][p.role]) for p in tenants), at)
        if since is None:
            return pod_log(row, at, tail, previous, busy)
        lines = lines_since(pod_log(row, at, None, previous, busy), since)
        return lines[max(len(lines) - tail, 0):] if tail is not None else lines

    @storage_errors
    def events(self, address: ClusterAddress) -> list[ClusterEvent]:
        self._answering()
        return [
            ClusterEvent(type=e.type, reason=e.reason, message=e.message, object=e.object, time=rfc3339(e.time) or "",
                         count=e.count)
            for e in self._rows(SimEvent).filter(namespace=address.namespace,
                                                 workload=address.object_name).order_by("time", "pk")
        ]

    def training(self) -> TrainingOffer:
        """What the inventory declares of this cluster (``training:``): the sandbox's API discovery, with a
        Trainer v2 cluster's runtimes (:func:`sandbox.trainer.installed_runtimes`)."""
        self._answering()
        api = inventory.cluster(self.cluster).training
        return discovered(api == TRAINJOB, api == PYTORCHJOB, installed_runtimes(api).values())

    def _refuse_training_without_api(self, objects: list[Manifest]) -> None:
        """A cluster serves the training kind of its API only (``training:``): a PyTorchJob applied to a Trainer v2
        cluster or one without a training API, a TrainJob to a v1 cluster or one without, answers 404, as an API
        server without the CRD does (nothing of the batch is written)."""
        api = inventory.cluster(self.cluster).training
        for obj in objects:
            kind = (obj.get("apiVersion"), obj.get("kind")) if isinstance(obj, dict) else None
            crd = CRDS.get(kind)
            if crd is not None and crd[0] != api:
                has = "no training API" if api == NONE else f"{LABELS[api]}"
                raise self.raised(NotFound(f"the server could not find the requested resource: cluster "
                                           f"{self.cluster} has {has} (no {crd[1]} CRD)", status=404))

    @storage_errors
    def capacity(self) -> list[NodeCapacity]:
        """Allocatable GPU units per node and resource; in use = requests of pods bound there and not finished."""
        self._answering()
        return self.node_usage()

    @storage_errors
    def node_usage(self) -> list[NodeCapacity]:
        """What :meth:`capacity` reports, seen from inside the cluster: answers while it is
        silenced too (``manage.py sandbox status``)."""
        in_use: dict[tuple[str, str], int] = defaultdict(int)
        # Pods counted per (node, owner, role) in SQL; each owner's plan is decoded once (or cached).
        groups = list(self._rows(SimPod).filter(active=True).exclude(node="")
                      .values_list("node", "role", "owner__uid", "owner__resource_version").annotate(n=Count("id")))
        missing = {uid for _, _, uid, version, _ in groups if (uid, version) not in PLAN_CACHE}
        if missing:
            for uid, version, plan in self._rows(SimObject).filter(uid__in=missing).values_list(
                    "uid", "resource_version", "plan"):
                PLAN_CACHE[(uid, version)] = plan
        for node, role, uid, version, count in groups:
            plan = PLAN_CACHE.get((uid, version))
            for resource, units in (plan["pods"][role]["req"].items() if plan else ()):
                in_use[(node, resource)] += units * count
        down = self.nodes_down()  # a reclaimed node is no longer in the node list
        # An elastic pool's nodes that exist: ready, or provisioning (up, not Ready: nothing runs there yet).
        nodes = [(node, False) for node in inventory.fixed_nodes(self.cluster) if node.name not in down]
        if inventory.cluster(self.cluster).elastic:  # a pool met for the first time starts at the cluster's clock
            nodes += [(node, row.state == SimNode.PROVISIONING)
                      for node, row in elastic.existing(self.cluster, self.clock()) if node.name not in down]
        return [
            NodeCapacity(node=node.name, resource_name=resource, allocatable=node.allocatable[resource],
                         in_use=in_use[(node.name, resource)], labels=dict(node.labels), provisioning=provisioning)
            for node, provisioning in nodes
            for resource in node.gpu_resources
            if node.allocatable[resource] > 0 or in_use[(node.name, resource)]
        ]

    @storage_errors
    def node_pools(self) -> list[NodePoolLimit]:
        """Each elastic pool's ``limit_units`` (:mod:`sandbox.pools`), as a Karpenter NodePool's ``spec.limits``
        would say it: labelled like its nodes (their hostname left out)."""
        self._answering()
        return [NodePoolLimit(name=pool.prefix, resource_name=pool.pool.resource, limit=pool.settings.limit_units,
                              labels={k: v for k, v in pool.pool.template.labels.items()
                                      if k != "kubernetes.io/hostname"})
                for pool in elastic.pools(self.cluster, self.clock()).values()
                if pool.settings.limit_units is not None]

    # -- shapes ------------------------------------------------------------------------------------

    @staticmethod
    def _to_manifest(row: SimObject | Record) -> Manifest:
        out: Manifest = {"apiVersion": row.api_version, "kind": row.resource_kind}
        # Rows are decoded fresh from the database on every read, so nothing is shared: no copy needed.
        manifest = dict(row.manifest)
        meta = dict(manifest.pop("metadata", {}))
        meta.update({"uid": row.uid, "resourceVersion": str(row.resource_version), "generation": row.generation,
                     "creationTimestamp": rfc3339(row.created_at)})
        meta.update(deletion(row))
        out["metadata"] = meta
        out.update(manifest)
        if row.resource_kind == "Deployment":
            out.setdefault("spec", {})["replicas"] = row.replicas
        if row.resource_kind == "Service":
            spec = out.setdefault("spec", {})
            spec.setdefault("clusterIP", f"10.96.{stable_int(row.uid) % 250}.{stable_int(row.name) % 250 + 2}")
        if row.resource_kind == "ScaledObject" and getattr(row, "load", None) is not None:
            meta["annotations"] = {**(meta.get("annotations") or {}), LOAD_ANNOTATION: str(row.load)}
        out["status"] = row.status
        return out


def _report_progress(group: ObservedWorkload, pod: Record, owner: Record, at: datetime, busy) -> None:
    """A TrainJob's ``trainerStatus``: what its rank 0 pod (when ``pod`` is it) last reported by ``at``."""
    report = trainer_status(pod, owner, at, busy)
    if report is None:
        return
    for obj in group.objects:
        if obj["kind"] == "TrainJob" and obj["metadata"]["name"] == owner.name:
            obj["status"] = {**obj["status"], "trainerStatus": report}


def _claim_storage(spec: Manifest) -> Decimal:
    return parse_quantity(((spec.get("resources") or {}).get("requests") or {}).get("storage", 0))


def _check_claim_update(name: str, old: Manifest, new: Manifest) -> None:
    """What an API server refuses of a claim applied again: any change to its spec but its storage
    request, and a smaller storage request (a volume does not shrink; growing one is an expansion)."""
    def rest(spec: Manifest) -> Manifest:
        return {**spec, "resources": {**(spec.get("resources") or {}), "requests": {
            k: v for k, v in ((spec.get("resources") or {}).get("requests") or {}).items() if k != "storage"}}}

    label = f'PersistentVolumeClaim "{name}" is invalid'
    if rest(old) != rest(new):
        raise Invalid(f"{label}: spec: Forbidden: spec is immutable after creation except resources.requests "
                      "and volumeAttributesClassName for bound claims", status=422)
    if _claim_storage(new) < _claim_storage(old):
        raise Invalid(f"{label}: spec.resources.requests.storage: Forbidden: field can not be less than "
                      "previous value", status=422)


def _autoscaler_manifest(scaled) -> Manifest:
    """KEDA's HPA of a ScaledObject, as the API server would show it (its status from the last tick)."""
    hpa = scaled.memo.get("hpa") or {}
    meta = scaled.manifest.get("metadata") or {}
    status: Manifest = {"desiredReplicas": hpa.get("desired", 0), "conditions": [
        {"type": "ScalingLimited", "status": "True" if hpa.get("limited") else "False",
         "reason": "TooManyReplicas" if hpa.get("limited") else "DesiredWithinRange",
         "message": "the desired replica count is more than the maximum replica count" if hpa.get("limited")
         else "the desired count is within the acceptable range"}]}
    if "value" in hpa:
        metric = scaled.plan.get("metric", "s0")
        status["currentMetrics"] = [{"type": "External", "external": {
            "metric": {"name": f"s0-{metric}"}, "current": {"averageValue": str(hpa["value"])}}}]
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": f"keda-hpa-{scaled.name}", "namespace": scaled.namespace,
                         "labels": dict(meta.get("labels") or {})},
            "spec": {"minReplicas": max(scaled.plan.get("min", 1), 1), "maxReplicas": scaled.plan.get("max", 1)},
            "status": status}


def _initial_status(obj: Manifest) -> dict:
    if obj["kind"] == "Namespace":
        return {"phase": "Active"}
    if obj["kind"] == "Service":
        return {"loadBalancer": {}}
    return {}
