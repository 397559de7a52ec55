"""The real-cluster backend: talks to a Kubernetes API server over REST.

This is the only module that imports the ``kubernetes`` package, and it uses little of it:
configuration loading (kubeconfig, in-cluster service account, exec/token refresh) and the
authenticated HTTP transport. Requests go to plain REST paths and responses are decoded with
``json.loads``: the client's model classes are very slow to build for large LISTs, and the
portal wants plain dicts anyway (they are what :mod:`cluster.status` reads).

Rules this module keeps:

* Writes are server-side apply (``PATCH`` with ``application/apply-patch+yaml``,
  ``fieldManager=slipway``, ``force=true``): re-applying the same manifest is a no-op and
  Slipway owns exactly the fields it sets (an HPA keeps ``spec.replicas``).
* The workload kinds' objects are known only from the resource kinds the caller hands over
  (each kind declares them in its registration); this module keeps the kinds it needs itself.
* ``observe()`` makes one LIST per observed kind across all namespaces (and, while a pod of
  Slipway's is starting, one of the pods' ``Pulled`` events), selected by the
  ``app.kubernetes.io/managed-by=slipway`` label, without pagination, so the number of calls
  does not grow with the number of workloads. ``resourceVersion=0`` lets the API server
  answer from its watch cache instead of a quorum read of etcd; a reconcile loop tolerates a
  view that is a few milliseconds old.
* A missing CRD (404 when listing a custom resource such as PyTorchJobs) reads as "none of that kind".
* Which training API a cluster has is read from API discovery (``GET /apis/<group>/<version>``, which
  every authenticated caller may read) and, on Trainer v2, one LIST of ClusterTrainingRuntimes
  (:meth:`KubernetesBackend.training`).
* Every call goes through a token bucket (the Python client has no QPS/burst limit, unlike
  client-go) and carries a timeout; urllib3's own retries are off, because retrying is the
  Celery task's job (one place, with backoff).
* Every failure leaves this module as a :mod:`cluster.errors` class, translated by
  :func:`map_error` alone.
* Secrets (a workload's secret env) are written and deleted by name and never read: the
  service account may not get, list or watch them, and the stored Secret an apply answers
  with is dropped here.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException, OpenApiException
from kubernetes.config.config_exception import ConfigException

from cluster.backends.base import (
    MANAGED_SELECTOR,
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
    resource_kind,
)
from cluster.errors import ClusterError, Conflict, Invalid, NotFound, Transient
from cluster.metrics import Prometheus
from cluster.nvidia import GPU_RESOURCE_PREFIX
from cluster.perf import gc_paused
from cluster.pods import REPLICA_TYPE_LABELS
from cluster.startup import any_starting, startup_event
from cluster.training import PYTORCHJOB_API, RUNTIMES_API, TRAINJOB_API, TrainingOffer, discovered, serves

FIELD_MANAGER = "slipway"
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
#: A JSON merge patch (RFC 7386): what annotating a pod needs, without owning its annotations.
MERGE_CONTENT_TYPE = "application/merge-patch+json"


def collection_path(kind: ResourceKind, namespace: str | None = None) -> str:
    """Where ``kind``'s objects live in the REST API (all namespaces unless ``namespace``)."""
    prefix = f"/apis/{kind.api_version}" if kind.group else f"/api/{kind.version}"
    if kind.namespaced and namespace:
        return f"{prefix}/namespaces/{quote(namespace, safe='')}/{kind.plural}"
    return f"{prefix}/{kind.plural}"


def object_path(kind: ResourceKind, name: str, namespace: str | None = None) -> str:
    return f"{collection_path(kind, namespace)}/{quote(name, safe='')}"


#: The kinds this backend reads or writes for itself: a team's namespace objects (with its
#: Prometheus tenant, cluster.manifests.team), pods, events, nodes and KEDA's autoscalers.
#: The workload kinds' objects are declared by each kind (``resources`` of apply/observe/delete).
KINDS: dict[tuple[str, str], ResourceKind] = {
    (k.api_version, k.kind): k
    for k in (
        ResourceKind("", "v1", "Namespace", "namespaces", namespaced=False),
        ResourceKind("", "v1", "ResourceQuota", "resourcequotas"),
        ResourceKind("", "v1", "LimitRange", "limitranges"),
        ResourceKind("", "v1", "ConfigMap", "configmaps"),
        ResourceKind("", "v1", "Pod", "pods"),
        ResourceKind("", "v1", "Event", "events"),
        ResourceKind("", "v1", "Node", "nodes", namespaced=False),
        ResourceKind("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies"),
        ResourceKind("keda.sh", "v1alpha1", "TriggerAuthentication", "triggerauthentications"),
        ResourceKind("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"),
    )
}


def _kind(api_version: str, kind: str) -> ResourceKind:
    return KINDS[(api_version, kind)]


POD = _kind("v1", "Pod")
#: KEDA's HPAs: it names them keda-hpa-<ScaledObject> and copies the ScaledObject's labels onto
#: them, possibly with its own managed-by: they are selected by the workload label alone.
HPA = _kind("autoscaling/v2", "HorizontalPodAutoscaler")
NODE = _kind("v1", "Node")
EVENT = _kind("v1", "Event")
#: Karpenter's node pools (cluster-scoped, listed only): their GPU limits cap an elastic pool's ``max``.
NODEPOOL = ResourceKind("karpenter.sh", "v1", "NodePool", "nodepools", namespaced=False)
#: Written (apply_secret) and deleted by name, never read: deploy/rbac.yaml grants no get/list/watch
#: on Secrets. Not in KINDS, so apply() refuses a Secret: values take the one-way path only.
SECRET = ResourceKind("", "v1", "Secret", "secrets")
#: Pod labels that mark a PyTorchJob's master (training-operator v1.9, and older releases).
#: A whole log read for a download stops here (the kubelet rotates container logs at 10 MiB by default).
LOG_BYTES_MAX = 10 * 1024 * 1024


class TokenBucket:
    """A thread-safe token bucket: ``qps`` tokens per second, at most ``burst`` saved up.

    ``acquire()`` blocks until a token is free. ``clock``/``sleep`` are injectable so tests
    can check the arithmetic without waiting.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self.qps = float(qps)
        self.burst = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one token, waiting if needed. Returns the seconds waited."""
        with self._lock:
            # Reserve under the lock (tokens may go negative = a queue of waiters), then sleep
            # outside it so concurrent callers are spaced 1/qps apart, not serialised on a lock.
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait


def _message(status: int, body: bytes | str | None, fallback: str) -> str:
    """The API server's ``Status.message`` when the body is a Status, else the fallback."""
    if body:
        try:
            decoded = json.loads(body)
        except (ValueError, TypeError):
            decoded = None
        if isinstance(decoded, dict) and decoded.get("message"):
            return str(decoded["message"])
    return f"HTTP {status}: {fallback}" if status else fallback


def error_for_status(status: int, message: str) -> ClusterError:
    """The :mod:`cluster.errors` class of an HTTP status."""
    if status == 404:
        return NotFound(message, status=status)
    if status == 409:
        return Conflict(message, status=status)
    if status in (400, 422):
        return Invalid(message, status=status)
    if status == 429 or status >= 500 or status in (0, 408):
        return Transient(message, status=status)
    # 401/403 and anything else: permanent, retrying with the same credentials won't help.
    return ClusterError(message, status=status)


def map_error(exc: BaseException) -> ClusterError:
    """THE translation of client/transport exceptions into :mod:`cluster.errors` classes."""
    if isinstance(exc, ClusterError):
        return exc
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        return error_for_status(status, _message(status, exc.body, str(exc.reason or exc)))
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return Transient(f"cannot reach the API server: {exc.reason}")
    if isinstance(exc, urllib3.exceptions.TimeoutError | TimeoutError):
        return Transient(f"timed out talking to the API server: {exc}")
    if isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | OSError):
        return Transient(f"cannot reach the API server: {exc}")
    if isinstance(exc, ConfigException):
        return ClusterError(f"cluster configuration: {exc}")
    if isinstance(exc, OpenApiException | ValueError):
        return ClusterError(f"Kubernetes client error: {exc}")
    return ClusterError(f"unexpected error talking to the API server: {type(exc).__name__}: {exc}")


class KubernetesBackend(ClusterBackend):
    """A real cluster. The constructor never contacts the server (configuration is lazy)."""

    name = "kubernetes"

    def __init__(
        self,
        kubeconfig: str | None = None,
        qps: float = 20,
        burst: int = 40,
        timeout: float = 10,
        host: str | None = None,
        metrics: Prometheus | None = None,
        context: str | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        #: The kubeconfig context (one file may hold several clusters); None: its current one.
        self.context = context
        #: Where GPU utilization comes from (None: not measured, nothing is idle).
        self.metrics = metrics
        self.timeout = timeout
        self.host = host
        self.limiter = TokenBucket(qps, burst)
        self._api: k8s_client.ApiClient | None = None
        self._api_lock = threading.Lock()
        #: Requests sent so far (the benchmark and tests read it).
        self.request_count = 0

    # -- transport ---------------------------------------------------------------------

    def _client(self) -> k8s_client.ApiClient:
        with self._api_lock:
            if self._api is None:
                cfg = k8s_client.Configuration()
                try:
                    if self.host:
                        # An explicit server (tests, a local proxy such as `kubectl proxy`).
                        cfg.host = self.host
                    elif self.kubeconfig:
                        k8s_config.load_kube_config(config_file=self.kubeconfig, context=self.context,
                                                    client_configuration=cfg)
                    else:
                        try:
                            k8s_config.load_incluster_config(client_configuration=cfg)
                        except ConfigException:
                            k8s_config.load_kube_config(client_configuration=cfg)
                except Exception as exc:
                    raise self.raised(map_error(exc)) from exc
                # No urllib3 retries: the Celery task retries Transient errors with backoff.
                cfg.retries = False
                self._api = k8s_client.ApiClient(cfg)
            return self._api

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        body: Any = None,
        content_type: str | None = None,
        raw: bool = False,
    ) -> Any:
        """One HTTP call: rate-limited, with a timeout, errors mapped. Returns decoded JSON (or bytes)."""
        api = self._client()
        self.limiter.acquire()
        self.request_count += 1
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
            if content_type and not content_type.endswith("json"):
                # Serialised here (JSON is valid YAML, so it serves apply-patch+yaml): a str body
                # is sent as-is, whereas the client would re-encode a dict through its slow sanitiser.
                # A JSON type (merge-patch+json) stays a dict: the client encodes every JSON body itself.
                body = json.dumps(body)
        try:
            serialized = api.param_serialize(
                method,
                path,
                query_params=list(query) or None,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = api.call_api(*serialized, _request_timeout=self.timeout)
            data = response.read()
        except Exception as exc:
            raise self.raised(map_error(exc)) from exc
        if not 200 <= response.status <= 299:
            raise self.raised(error_for_status(response.status, _message(response.status, data, str(response.reason))))
        if raw:
            return data
        try:
            return json.loads(data) if data else None
        except ValueError as exc:
            raise self.raised(Transient(f"undecodable response from the API server: {exc}")) from exc

    def list(
        self, kind: ResourceKind, *, namespace: str | None = None, label_selector: str = "", **params: str
    ) -> list[Manifest]:
        """All objects of ``kind`` (all namespaces unless ``namespace``), with apiVersion/kind filled in.

        LIST responses omit ``apiVersion``/``kind`` on items; callers get them back so
        observed objects look exactly like what was applied.
        """
        query = [(k.replace("_", ""), v) for k, v in params.items()]
        if label_selector:
            query.insert(0, ("labelSelector", label_selector))
        try:
            payload = self.request("GET", collection_path(kind, namespace), query=query)
        except NotFound:
            if kind.custom:
                return []  # the CRD is not installed: nothing of that kind exists
            raise
        items = (payload or {}).get("items") or []
        for item in items:
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.kind)
        return items

    # -- ClusterBackend ----------------------------------------------------------------

    def apply(self, objects: list[Manifest], resources: Sequence[ResourceKind] = ()) -> list[Manifest]:
        """Server-side apply, in order (a Namespace before what lives in it); stops at the first error.

        Every object's kind is resolved before the first request: an object of a kind nobody
        declared (so of no known path) sends nothing.
        """
        paths: list[str] = []
        for obj in objects:
            try:
                api_version, kind_name, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
                name = meta["name"]
            except (KeyError, TypeError) as exc:
                raise self.raised(Invalid(f"cannot apply an object without apiVersion, kind and metadata.name: {exc}")) from exc
            kind = KINDS.get((api_version, kind_name)) or resource_kind(resources, api_version, kind_name)
            if kind is None:
                raise self.raised(Invalid(f'no matches for kind "{kind_name}" in version "{api_version}"'))
            namespace = meta.get("namespace") if kind.namespaced else None
            if kind.namespaced and not namespace:
                raise self.raised(Invalid(f"{kind_name}/{name} needs metadata.namespace"))
            paths.append(object_path(kind, name, namespace))
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        return [self.request("PATCH", path, query=query, body=obj, content_type=APPLY_CONTENT_TYPE)
                for path, obj in zip(paths, objects, strict=True)]

    def apply_secret(self, secret: Manifest) -> None:
        """Server-side apply of one Secret; the answer (the stored Secret, values included) is not kept."""
        meta = secret["metadata"]
        self.request(
            "PATCH",
            object_path(SECRET, meta["name"], meta["namespace"]),
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            body=secret,
            content_type=APPLY_CONTENT_TYPE,
        )

    def delete(self, address: ClusterAddress, resources: Sequence[ResourceKind], *,
               grace_seconds: int | None = None) -> int:
        """One label-selected LIST per deleted kind, then a DELETE per object found, in the kinds' order."""
        deleted = 0
        selector = f"{MANAGED_SELECTOR},{WORKLOAD_LABEL}={address.object_name}"
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        for kind in (r for r in resources if r.deleted):
            for obj in self.list(kind, namespace=address.namespace, label_selector=selector):
                try:
                    self.request("DELETE", object_path(kind, obj["metadata"]["name"], address.namespace), body=options)
                except NotFound:
                    continue  # deleted by someone else meanwhile: the goal is reached
                deleted += 1
        # The env Secret goes by its name: Slipway may not list Secrets. Most workloads have none (404).
        try:
            self.request("DELETE", object_path(SECRET, env_secret_name(address.object_name), address.namespace), body=options)
        except NotFound:
            return deleted
        return deleted + 1

    def delete_objects(self, namespace: str, objects: Sequence[tuple[ResourceKind, str]]) -> int:
        """One DELETE per object, by its name (background propagation: its pods follow)."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        deleted = 0
        for kind, name in objects:
            try:
                self.request("DELETE", object_path(kind, name, namespace), body=options)
            except NotFound:
                continue  # already gone: the goal is reached
            deleted += 1
        return deleted

    def annotate_pods(self, address: ClusterAddress, annotations: dict[str, str | None]) -> int:
        """One label-selected LIST of the workload's pods, then a merge PATCH per pod still running.

        A merge patch rather than server-side apply: the annotation is one field Slipway sets
        now and then, and applying would make Slipway the owner of the whole pod's fields.
        """
        selector = f"{MANAGED_SELECTOR},{WORKLOAD_LABEL}={address.object_name}"
        body = {"metadata": {"annotations": dict(annotations)}}
        patched = 0
        for pod in self.list(POD, namespace=address.namespace, label_selector=selector):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue  # finished: nothing left to tell
            try:
                self.request("PATCH", object_path(POD, pod["metadata"]["name"], address.namespace), body=body,
                             content_type=MERGE_CONTENT_TYPE)
            except NotFound:
                continue  # deleted meanwhile
            patched += 1
        return patched

    def observe(self, resources: Sequence[ResourceKind]) -> list[ObservedWorkload]:
        """One LIST per observed kind, one of KEDA's HPAs and one of pods for the whole cluster, grouped by workload."""
        groups: dict[tuple[str, str], ObservedWorkload] = {}

        def group(obj: Manifest) -> ObservedWorkload | None:
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            workload = labels.get(WORKLOAD_LABEL)
            namespace = meta.get("namespace")
            if not workload or not namespace:
                return None
            key = (namespace, workload)
            found = groups.get(key)
            if found is None:
                found = groups[key] = ObservedWorkload(namespace, workload, labels.get(TEAM_LABEL, ""))
            return found

        with gc_paused():
            for kind in (r for r in resources if r.observed):
                for obj in self.list(kind, label_selector=MANAGED_SELECTOR, resourceVersion="0"):
                    target = group(obj)
                    if target is not None:
                        target.objects.append(obj)
            for hpa in self.list(HPA, label_selector=WORKLOAD_LABEL, resourceVersion="0"):
                meta = hpa.get("metadata") or {}
                target = groups.get((meta.get("namespace"), (meta.get("labels") or {}).get(WORKLOAD_LABEL)))
                if target is not None:  # only the autoscalers of workloads Slipway manages
                    target.objects.append(hpa)
            pods = self.list(POD, label_selector=MANAGED_SELECTOR, resourceVersion="0")
            for pod in pods:
                target = group(pod)
                if target is not None:
                    target.pods.append(pod)
            self._startup_events(groups, pods)
            for observed in groups.values():
                observed.pods.sort(key=_pod_order)
            return sorted(groups.values(), key=lambda o: (o.namespace, o.object_name))

    def serving_upstreams(self, services: Sequence[ServiceRef]) -> dict[ServiceRef, tuple[str, ...]]:
        """Each Service's in-cluster address: kube-proxy balances over its ready pods, so no API call is made
        (the gateway runs in the cluster; the NetworkPolicy lets it reach the endpoints' pods)."""
        return {ref: (f"http://{ref.name}.{ref.namespace}.svc.cluster.local:{ref.port}",) for ref in services}

    def _startup_events(self, groups: dict[tuple[str, str], ObservedWorkload], pods: list[Manifest]) -> None:
        """The ``Pulled`` events of Slipway's pods onto their workloads (``ObservedWorkload.pod_events``).

        One LIST across all namespaces, selected by the event's reason and its object's kind (the API
        server indexes both fields), from its watch cache — and only while some pod is starting
        (:func:`cluster.startup.any_starting`): events carry no labels, so the list holds every
        pod's pulls of the last hour, which a cluster whose replicas run steadily need not read.
        """
        if not any_starting(pods, datetime.now(UTC)):
            return
        by_pod: dict[tuple[str, str], ObservedWorkload] = {}
        for observed in groups.values():
            for pod in observed.pods:
                by_pod[(observed.namespace, (pod.get("metadata") or {}).get("name", ""))] = observed
        for reason in STARTUP_EVENT_REASONS:
            for event in self.list(EVENT, fieldSelector=f"involvedObject.kind=Pod,reason={reason}",
                                   resourceVersion="0"):
                involved = event.get("involvedObject") or {}
                namespace = (event.get("metadata") or {}).get("namespace") or involved.get("namespace") or ""
                target = by_pod.get((namespace, involved.get("name", "")))
                flat = startup_event(event) if target is not None else None
                if flat is not None:
                    target.pod_events.append(flat)

    def gpu_telemetry(self, observed: list[ObservedWorkload]) -> dict[ClusterAddress, WorkloadTelemetry]:
        """From Prometheus' DCGM series, one query per call (:mod:`cluster.metrics`); {} when not configured."""
        return self.metrics.gpu_telemetry(observed) if self.metrics is not None else {}

    def pods(self, address: ClusterAddress) -> list[Manifest]:
        """One label-selected LIST: a Job's failed attempts are still there (the controller keeps them)."""
        selector = f"{MANAGED_SELECTOR},{WORKLOAD_LABEL}={address.object_name}"
        return self.list(POD, namespace=address.namespace, label_selector=selector)

    def logs(self, address: ClusterAddress, pod: str, tail: int | None = 200, previous: bool = False,
             since: datetime | None = None) -> list[str]:
        """The pod's log; Slipway's pods have one container, so none is named. A whole log
        (``tail=None``) is capped at :data:`LOG_BYTES_MAX` so one download cannot exhaust the web process.
        ``previous``: its container's run before the last restart (a PyTorchJob replica's earlier attempt).
        ``since``: ``sinceTime`` and ``timestamps=true`` (the base class), capped at :data:`LOG_BYTES_MAX` too."""
        query = [("tailLines", str(int(tail)))] if tail is not None else [("limitBytes", str(LOG_BYTES_MAX))]
        if previous:
            query.append(("previous", "true"))
        if since is not None:
            query += [("sinceTime", since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")), ("timestamps", "true")]
            if tail is not None:
                query.append(("limitBytes", str(LOG_BYTES_MAX)))
        try:
            data = self.request("GET", object_path(POD, pod, address.namespace) + "/log", query=query, raw=True)
        except Invalid:
            # 400: the container has not started yet (or, with previous, has never restarted): nothing to read
            return []
        return data.decode("utf-8", errors="replace").splitlines()

    def events(self, address: ClusterAddress) -> list[ClusterEvent]:
        """Events of the namespace whose object is the workload or one of its children.

        Children are named ``<workload>-…`` (pods, ReplicaSets, PyTorchJob replicas), so one
        namespace LIST filtered here beats one call per object.
        """
        prefix = f"{address.object_name}-"
        out: list[tuple[str, ClusterEvent]] = []
        for event in self.list(EVENT, namespace=address.namespace):
            involved = event.get("involvedObject") or {}
            name = involved.get("name", "")
            if name != address.object_name and not name.startswith(prefix):
                continue
            when = event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or ""
            out.append(
                (
                    when,
                    ClusterEvent(
                        type=event.get("type", "Normal"),
                        reason=event.get("reason", ""),
                        message=event.get("message", ""),
                        object=f"{involved.get('kind', '')}/{name}",
                        time=when,
                        count=int(event.get("count") or 1),
                    ),
                )
            )
        out.sort(key=lambda pair: pair[0])
        return [event for _, event in out]

    def training(self) -> TrainingOffer:
        """API discovery: the Trainer v2 group version serving ``trainjobs``, else the v1 one serving
        ``pytorchjobs`` (:func:`cluster.training.discovered` decides), and on Trainer v2 its
        ClusterTrainingRuntimes (one LIST, cluster-scoped). Two or three GETs; a group version the
        server does not serve answers 404, which is "not installed" here."""
        trainjob = self._serves(*TRAINJOB_API)
        runtimes: list[Manifest] = []
        if trainjob:
            group_version, plural = RUNTIMES_API
            try:
                payload = self.request("GET", f"/apis/{group_version}/{plural}")
            except NotFound:
                payload = None  # the runtimes' CRD is missing: a Trainer v2 cluster that offers no runtime
            runtimes = [item for item in (payload or {}).get("items") or [] if isinstance(item, dict)]
        return discovered(trainjob, not trainjob and self._serves(*PYTORCHJOB_API), runtimes)

    def _serves(self, group_version: str, plural: str) -> bool:
        """Whether the API server serves ``plural`` in ``group_version`` (its discovery document lists it)."""
        try:
            return serves(self.request("GET", f"/apis/{group_version}"), plural)
        except NotFound:
            return False

    def capacity(self) -> list[NodeCapacity]:
        """Allocatable GPU units per node and resource, minus what non-finished pods bound there request.

        All pods count, not only Slipway's: anything else on the node holds GPUs just the same.
        """
        nodes = self.list(NODE)
        pods = self.list(POD, fieldSelector="status.phase!=Succeeded,status.phase!=Failed")
        in_use: dict[tuple[str, str], int] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node:
                continue
            for resource, units in _pod_gpu_requests(pod).items():
                in_use[(node, resource)] = in_use.get((node, resource), 0) + units
        out: list[NodeCapacity] = []
        for node in nodes:
            meta = node.get("metadata") or {}
            name = meta.get("name", "")
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            for resource in sorted(allocatable):
                if not resource.startswith(GPU_RESOURCE_PREFIX):
                    continue
                units = _units(allocatable[resource])
                if units <= 0:
                    continue
                out.append(NodeCapacity(name, resource, units, in_use.get((name, resource), 0),
                                        dict(meta.get("labels") or {}), provisioning=not _ready(node)))
        return out

    def node_pools(self) -> list[NodePoolLimit]:
        """Karpenter's NodePools (one LIST, cluster-scoped; none when its CRD is not installed), one limit per GPU
        resource in a pool's ``spec.limits``, with the labels its nodes get: ``spec.template.metadata.labels``,
        and each requirement of ``spec.template.spec.requirements`` that pins a key to one value (operator ``In``,
        one value), which is how a NodePool says "only this instance type" or "only this GPU"."""
        out: list[NodePoolLimit] = []
        for pool in self.list(NODEPOOL):
            spec = pool.get("spec") or {}
            template = spec.get("template") or {}
            labels = {str(k): str(v) for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()}
            for requirement in (template.get("spec") or {}).get("requirements") or []:
                values = requirement.get("values") or []
                if requirement.get("operator") == "In" and len(values) == 1 and requirement.get("key"):
                    labels[str(requirement["key"])] = str(values[0])
            name = (pool.get("metadata") or {}).get("name", "")
            for resource, quantity in sorted((spec.get("limits") or {}).items()):
                if resource.startswith(GPU_RESOURCE_PREFIX):
                    out.append(NodePoolLimit(name, resource, _units(quantity), labels))
        return out


def _ready(node: Manifest) -> bool:
    """Whether a node's ``Ready`` condition is True: a node an autoscaler has just added (or one that lost its
    kubelet) exists before it can run pods, and its GPUs are provisioning until then."""
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions if isinstance(c, dict))


def _units(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _pod_gpu_requests(pod: Manifest) -> dict[str, int]:
    """GPU units a pod requests per resource (extended resources: requests equal limits).

    Init containers run before the app containers, so a pod needs the max of the two, as
    the scheduler computes it.
    """
    spec = pod.get("spec") or {}

    def totals(containers: list[Manifest], combine: Callable[[int, int], int]) -> dict[str, int]:
        acc: dict[str, int] = {}
        for container in containers or []:
            res = container.get("resources") or {}
            amounts = res.get("requests") or res.get("limits") or {}
            for resource, value in amounts.items():
                if resource.startswith(GPU_RESOURCE_PREFIX):
                    acc[resource] = combine(acc.get(resource, 0), _units(value))
        return acc

    app = totals(spec.get("containers") or [], lambda a, b: a + b)
    init = totals(spec.get("initContainers") or [], max)
    return {r: max(app.get(r, 0), init.get(r, 0)) for r in set(app) | set(init)}


def _pod_order(pod: Manifest) -> tuple[int, str, str]:
    """Master pods first, then by creation time and name (the first pod is the one to read logs of)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    is_master = any(labels.get(key, "").lower() == "master" for key in REPLICA_TYPE_LABELS)
    return (0 if is_master else 1, meta.get("creationTimestamp") or "", meta.get("name") or "")
