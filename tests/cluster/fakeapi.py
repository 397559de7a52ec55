"""A small in-process fake of the Kubernetes API server, for the backend's tests and the benchmark.

It speaks real HTTP (``http.server`` on a thread), so :class:`cluster.backends.kubernetes.
KubernetesBackend` is tested through the ``kubernetes`` client's transport exactly as in
production. It implements the part of the API Slipway uses:

* objects stored per ``(apiVersion, kind, namespace, name)``;
* ``PATCH`` server-side apply (``application/apply-patch+yaml``, ``fieldManager`` required),
  creating or replacing the applied fields while keeping ``status`` and server metadata;
* ``GET`` of an object, LIST (cluster-wide or per namespace) with ``labelSelector``
  (``k=v``, ``k!=v``, ``k``) and a ``status.phase!=`` ``fieldSelector``; pod ``/log``;
* ``PATCH`` JSON merge patch (``application/merge-patch+json``, RFC 7386) of an existing object;
* ``DELETE`` (records the propagation policy);
* an atomic pool's ProvisioningRequests and PodTemplates, and Karpenter's NodePools (cluster-scoped);
* CRDs that can be "uninstalled" (their paths answer 404, as a real server does), and any
  custom resource a workload kind declares can be installed (:meth:`FakeKubeAPI.install`);
* API discovery of a group version (``GET /apis/<group>/<version>``: the ``APIResourceList`` of what it
  serves, 404 when it serves nothing), which tells a cluster's training API (:mod:`cluster.training`);
* fault injection: the next matching request(s) answer a status code, or stall past the
  client's timeout, or are held until the test sets an event (a server that hangs exactly as
  long as a race needs, without sleeping);
* a request log, to count calls;
* Secrets can be written and deleted but never read (GET and LIST answer 403), as
  deploy/rbac.yaml has it for Slipway's service account.

LIST items omit ``apiVersion``/``kind``, as the real server does for built-in kinds.
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from cluster.backends.base import ResourceKind

Obj = dict[str, Any]

#: plural -> (apiVersion, kind, namespaced, is_crd)
RESOURCES: dict[str, tuple[str, str, bool, bool]] = {
    "namespaces": ("v1", "Namespace", False, False),
    "nodes": ("v1", "Node", False, False),
    "pods": ("v1", "Pod", True, False),
    "services": ("v1", "Service", True, False),
    "events": ("v1", "Event", True, False),
    "secrets": ("v1", "Secret", True, False),
    "resourcequotas": ("v1", "ResourceQuota", True, False),
    "limitranges": ("v1", "LimitRange", True, False),
    "persistentvolumeclaims": ("v1", "PersistentVolumeClaim", True, False),
    "networkpolicies": ("networking.k8s.io/v1", "NetworkPolicy", True, False),
    "jobs": ("batch/v1", "Job", True, False),
    "deployments": ("apps/v1", "Deployment", True, False),
    "pytorchjobs": ("kubeflow.org/v1", "PyTorchJob", True, True),
    "scaledobjects": ("keda.sh/v1alpha1", "ScaledObject", True, True),
    "horizontalpodautoscalers": ("autoscaling/v2", "HorizontalPodAutoscaler", True, False),
    # An atomic pool's objects (cluster.manifests.provisioning) and Karpenter's node pools (cluster-scoped).
    "podtemplates": ("v1", "PodTemplate", True, False),
    "provisioningrequests": ("autoscaling.x-k8s.io/v1", "ProvisioningRequest", True, True),
    "nodepools": ("karpenter.sh/v1", "NodePool", False, True),
}

#: What Slipway's service account may not read (deploy/rbac.yaml): GET and LIST answer 403.
UNREADABLE = frozenset({"secrets"})


@dataclass
class Fault:
    """Answer the next ``times`` requests matching ``method``/``path_contains`` with ``status``,
    or stall for ``delay`` seconds first (a stall longer than the client timeout is a timeout).
    With ``hold``, the stall lasts until the event is set (``delay``, else 30 s, at most)."""

    status: int | None = None
    delay: float = 0.0
    hold: threading.Event | None = None
    times: int = 1
    method: str | None = None
    path_contains: str = ""
    message: str = "injected fault"
    #: Requests whose path contains this are left alone (a discovery fault that spares the observation's LISTs).
    path_excludes: str | None = None


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str] = field(default_factory=dict)


def _status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}
    ).encode()


def _matches_labels(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _matches_fields(obj: Obj, selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        negate = "!=" in term
        key, value = term.split("!=" if negate else "=", 1)
        current: Any = obj
        for part in key.split("."):
            current = (current or {}).get(part) if isinstance(current, dict) else None
        if (str(current) == value) == negate:
            return False
    return True


class FakeKubeAPI:
    """The fake's state and behaviour; ``url`` is what ``KubernetesBackend(host=...)`` takes."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str, str], Obj] = {}
        #: What this server serves (plural -> apiVersion, kind, namespaced, is_crd); install() adds CRDs.
        self.resources = dict(RESOURCES)
        self.logs: dict[tuple[str, str], list[str]] = {}
        #: (namespace, pod) -> the log of its container's run before the last restart (``previous=true``)
        self.previous_logs: dict[tuple[str, str], list[str]] = {}
        self.uninstalled: set[str] = set()  # plurals of CRDs that are "not installed"
        self.faults: list[Fault] = []
        self.requests: list[Recorded] = []
        self.deletions: list[tuple[str, str, str, str | None]] = []  # (kind, namespace, name, propagation)
        self._lock = threading.Lock()
        self._version = 0
        self._list_cache: dict[tuple[str, str, str, str], bytes] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, port: int = 0) -> FakeKubeAPI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and the
            # client's delayed ACK hold each answer ~40 ms, which a real API server does not.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                code, ctype, payload = fake.handle(self.command, self.path, dict(self.headers), body)
                if code < 0:
                    # A "reset": close without answering.
                    self.close_connection = True
                    return
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    self.wfile.write(payload)

            do_GET = do_PATCH = do_DELETE = do_POST = do_PUT = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- test helpers ---------------------------------------------------------------------

    def put(self, obj: Obj) -> Obj:
        """Store ``obj`` as-is (with status): how tests seed pods, nodes and observed state."""
        with self._lock:
            meta = obj.setdefault("metadata", {})
            self._version += 1
            meta.setdefault("uid", f"uid-{self._version}")
            meta["resourceVersion"] = str(self._version)
            key = (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])
            self.objects[key] = obj
            self._list_cache.clear()
        return obj

    def install(self, resource: ResourceKind) -> None:
        """Serve ``resource`` from now on, as installing its CRD does."""
        self.resources[resource.plural] = (resource.api_version, resource.kind, resource.namespaced, True)
        self._list_cache.clear()

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        return self.objects.get((api_version, kind, namespace, name))

    def of_kind(self, kind: str) -> list[Obj]:
        return [o for (_, k, _, _), o in self.objects.items() if k == kind]

    def fail(self, status: int | None = None, **kwargs: Any) -> Fault:
        fault = Fault(status=status, **kwargs)
        self.faults.append(fault)
        return fault

    def reset_requests(self) -> None:
        self.requests.clear()

    # -- request handling -----------------------------------------------------------------

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if ((fault.method in (None, method)) and fault.path_contains in path and fault.times > 0
                        and not (fault.path_excludes and fault.path_excludes in path)):
                    fault.times -= 1
                    if fault.times == 0:
                        self.faults.remove(fault)
                    return fault
        return None

    def handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> tuple[int, str, bytes]:
        parts = urlsplit(raw_path)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        self.requests.append(Recorded(method, path, query, headers))
        fault = self._take_fault(method, path)
        if fault is not None:
            if fault.hold is not None:
                fault.hold.wait(fault.delay or 30.0)
            elif fault.delay:
                time.sleep(fault.delay)
            if fault.status is not None:
                return fault.status, "application/json", _status_body(fault.status, "Injected", fault.message)
        if method == "GET" and (served := self._discovery(path)) is not None:
            return served
        route = self._route(path)
        if route is None:
            return 404, "application/json", _status_body(404, "NotFound", f"the server could not find {path}")
        plural, namespace, name, sub = route
        api_version, kind, _, is_crd = self.resources[plural]
        if is_crd and plural in self.uninstalled:
            return (
                404,
                "application/json",
                _status_body(404, "NotFound", "the server could not find the requested resource"),
            )
        if method == "GET" and plural in UNREADABLE:
            return 403, "application/json", _status_body(403, "Forbidden", f'cannot get resource "{plural}"')
        if method == "GET" and name is None:
            return self._list(plural, namespace, query)
        if method == "GET" and sub == "log":
            if (namespace or "", name or "") not in self.logs and ("v1", "Pod", namespace or "", name or "") not in self.objects:
                return 404, "application/json", _status_body(404, "NotFound", f'pods "{name}" not found')
            lines = self.logs.get((namespace or "", name or ""), [])
            if query.get("previous", ["false"])[0] == "true":
                if (namespace or "", name or "") not in self.previous_logs:  # never restarted: the API's 400
                    return 400, "application/json", _status_body(
                        400, "BadRequest", f'previous terminated container "main" in pod "{name}" not found')
                lines = self.previous_logs[(namespace or "", name or "")]
            tail = int(query.get("tailLines", ["0"])[0] or 0)
            text = "\n".join(lines[-tail:] if tail else lines)
            return 200, "text/plain", (text + "\n").encode() if lines else b""
        key = (api_version, kind, namespace or "", name or "")
        if method == "GET":
            obj = self.objects.get(key)
            if obj is None:
                return 404, "application/json", _status_body(404, "NotFound", f'{plural} "{name}" not found')
            return 200, "application/json", json.dumps(obj).encode()
        if method == "PATCH":
            return self._apply(key, plural, headers, query, body)
        if method == "DELETE":
            with self._lock:
                obj = self.objects.pop(key, None)
                self._list_cache.clear()
            if obj is None:
                return 404, "application/json", _status_body(404, "NotFound", f'{plural} "{name}" not found')
            options = json.loads(body) if body else {}
            self.deletions.append((kind, namespace or "", name or "", options.get("propagationPolicy")))
            return 200, "application/json", json.dumps(obj).encode()
        return 405, "application/json", _status_body(405, "MethodNotAllowed", method)

    def _discovery(self, path: str) -> tuple[int, str, bytes] | None:
        """``GET /apis/<group>/<version>``: the resources that group version serves now (installed CRDs only),
        404 when none; None for any other path."""
        segments = [s for s in path.split("/") if s]
        if len(segments) != 3 or segments[0] != "apis":
            return None
        group_version = f"{segments[1]}/{segments[2]}"
        served = [{"name": plural, "kind": kind, "namespaced": namespaced, "singularName": "",
                   "verbs": ["get", "list", "patch", "delete"]}
                  for plural, (api_version, kind, namespaced, is_crd) in sorted(self.resources.items())
                  if api_version == group_version and not (is_crd and plural in self.uninstalled)]
        if not served:
            return 404, "application/json", _status_body(404, "NotFound", "the server could not find the requested resource")
        body = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": served}
        return 200, "application/json", json.dumps(body).encode()

    def _route(self, path: str) -> tuple[str, str | None, str | None, str | None] | None:
        segments = [s for s in path.split("/") if s]
        if segments[:2] == ["api", "v1"]:
            rest = segments[2:]
        elif segments[:1] == ["apis"] and len(segments) >= 3:
            rest = segments[3:]
        else:
            return None
        namespace = None
        # /namespaces and /namespaces/<name> are the Namespace kind itself; deeper paths are scoped.
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or rest[0] not in self.resources:
            return None
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return plural, namespace, name, sub

    def _list(self, plural: str, namespace: str | None, query: dict[str, list[str]]) -> tuple[int, str, bytes]:
        api_version, kind, _, is_crd = self.resources[plural]
        labels = query.get("labelSelector", [""])[0]
        fields = query.get("fieldSelector", [""])[0]
        cache_key = (plural, namespace or "", labels, fields)
        with self._lock:
            cached = self._list_cache.get(cache_key)
            if cached is not None:
                return 200, "application/json", cached
            items = []
            for (av, k, ns, _), obj in self.objects.items():
                if av != api_version or k != kind or (namespace and ns != namespace):
                    continue
                if labels and not _matches_labels(obj.get("metadata", {}).get("labels") or {}, labels):
                    continue
                if fields and not _matches_fields(obj, fields):
                    continue
                item = obj if is_crd else {k2: v for k2, v in obj.items() if k2 not in ("apiVersion", "kind")}
                items.append(item)
            payload = json.dumps(
                {
                    "apiVersion": api_version,
                    "kind": f"{kind}List",
                    "metadata": {"resourceVersion": str(self._version)},
                    "items": items,
                }
            ).encode()
            # Cached until the next write: the benchmark measures the client, not the fake.
            self._list_cache[cache_key] = payload
        return 200, "application/json", payload

    def _apply(
        self,
        key: tuple[str, str, str, str],
        plural: str,
        headers: dict[str, str],
        query: dict[str, list[str]],
        body: bytes,
    ) -> tuple[int, str, bytes]:
        content_type = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
        if content_type == "application/merge-patch+json":
            return self._merge(key, plural, body)
        if content_type != "application/apply-patch+yaml":
            return 415, "application/json", _status_body(415, "UnsupportedMediaType", content_type)
        if not query.get("fieldManager"):
            return (
                400,
                "application/json",
                _status_body(400, "BadRequest", "fieldManager is required for apply requests"),
            )
        try:
            applied = json.loads(body)
        except ValueError:
            return 400, "application/json", _status_body(400, "BadRequest", "body is not JSON/YAML")
        api_version, kind, _, _ = self.resources[plural]
        meta = applied.get("metadata") or {}
        if applied.get("apiVersion") != api_version or applied.get("kind") != kind or meta.get("name") != key[3]:
            return (
                422,
                "application/json",
                _status_body(422, "Invalid", f'{kind}.{api_version} "{key[3]}" is invalid: does not match the URL'),
            )
        if key[2] and meta.get("namespace") not in (None, key[2]):
            return (
                400,
                "application/json",
                _status_body(400, "BadRequest", "the namespace of the object does not match the URL"),
            )
        with self._lock:
            self._version += 1
            current = self.objects.get(key)
            stored = copy.deepcopy(applied)
            stored_meta = stored.setdefault("metadata", {})
            if current is not None:
                old_meta = current.get("metadata", {})
                stored_meta["uid"] = old_meta.get("uid")
                stored_meta["creationTimestamp"] = old_meta.get("creationTimestamp")
                changed = {k: v for k, v in current.items() if k not in ("metadata", "status")} != {
                    k: v for k, v in applied.items() if k not in ("metadata", "status")
                }
                stored_meta["generation"] = old_meta.get("generation", 1) + (1 if changed else 0)
                if "status" in current:
                    stored["status"] = current["status"]
            else:
                stored_meta["uid"] = f"uid-{self._version}"
                stored_meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
                stored_meta["generation"] = 1
            if key[2]:
                stored_meta["namespace"] = key[2]
            stored_meta["resourceVersion"] = str(self._version)
            stored_meta["managedFields"] = [
                {"manager": query["fieldManager"][0], "operation": "Apply", "apiVersion": api_version}
            ]
            self.objects[key] = stored
            self._list_cache.clear()
        return (200 if current is not None else 201), "application/json", json.dumps(stored).encode()

    def _merge(self, key: tuple[str, str, str, str], plural: str, body: bytes) -> tuple[int, str, bytes]:
        """A JSON merge patch (RFC 7386) of a stored object: objects merge, null removes, the rest replaces."""
        try:
            patch = json.loads(body)
        except ValueError:
            return 400, "application/json", _status_body(400, "BadRequest", "body is not JSON")
        with self._lock:
            current = self.objects.get(key)
            if current is None:
                return 404, "application/json", _status_body(404, "NotFound", f'{plural} "{key[3]}" not found')
            self._version += 1
            merged = _merge_patch(current, patch)
            merged.setdefault("metadata", {})["resourceVersion"] = str(self._version)
            self.objects[key] = merged
            self._list_cache.clear()
        return 200, "application/json", json.dumps(merged).encode()


def _merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = _merge_patch(out.get(name), value)
    return out
