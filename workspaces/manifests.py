"""Pure builders of a workspace's Kubernetes objects (no Django, no clock, no randomness).

In the kind's own package, as every kind's builders are (``cluster/manifests/`` keeps the pieces they
share), because a kind's package is the only place that knows the kind (docs/workspaces.md "Extension
point"); like the shared builders they take frozen specs and
return plain dicts, named from portal ids so that re-applying is idempotent, and are checked
against golden files and validated (tests/workspaces/test_manifests.py). A workspace is:

* a ``PersistentVolumeClaim`` ``<object name>-home`` of ``home_gb``, mounted at the home directory.
  It outlives pauses (the kind declares it ``kept_across_attempts``: a pause deletes everything
  else) and is deleted with the workspace;
* an ``apps/v1 Deployment`` of one replica, strategy ``Recreate``, running the Jupyter server. A
  Deployment rather than a bare pod: its controller brings the pod back when a node drains or the
  pod is evicted (a bare pod is gone for good), its status says ready or not the way an
  endpoint's does (one status mapping: :func:`cluster.deployments.deployment_status`), and the
  sandbox simulates it. ``Recreate`` because the home volume is ReadWriteOnce: a rolling update's
  second pod could never mount it. Pausing deletes the Deployment (not a scale to zero, which would
  leave an object holding nothing);
* a ``Service`` and an ``Ingress`` for the workspace's own host, ``<object name>.<workspace host>``
  (never the portal's: its owner's JavaScript must not run on the portal's origin, nor receive
  the portal's cookies), at ``/notebooks/<object name>/``, whose ``auth-url`` is Slipway's
  ``/workspaces/auth/``: the ingress controller asks Slipway about every request, by the
  workspace's own cookie (:mod:`workspaces.access`), and Slipway answers with the Jupyter token in
  a header the controller passes on (``auth-response-headers``), so a browser never holds it and
  Slipway never proxies notebook traffic. Without a valid cookie the browser is sent to the
  portal's Open (``auth-signin``), which sends it back with a one-use ticket;
* a ``NetworkPolicy`` letting only the ingress controller's namespace (and Slipway's, whose worker
  asks the Jupyter server whether it is idle) reach the pod. The pod carries
  :data:`cluster.manifests.team.ISOLATED_LABEL`, which the team's own isolation policy leaves out,
  so this policy is the only one that admits traffic to it (policies add up: one allowing the
  whole namespace would let every teammate's pod in).
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.manifests.common import (
    SERVICE_PORT,
    Manifest,
    cluster_ip_service,
    container_security,
    env_list,
    labels,
    memory_quantity,
    metadata,
    pod_labels,
    pod_spec,
    resources,
    volume_entries,
)
from cluster.manifests.secrets import SECRET_ENV_DIGEST_ANNOTATION, secret_env_refs
from cluster.manifests.team import ISOLATED_LABEL
from cluster.pools import disruption_annotations
from cluster.specs import ClusterConfig, FlavorSpec, VolumeSpec

#: The Jupyter token's key in the workspace's env Secret (jupyter-server reads ``JUPYTER_TOKEN``).
TOKEN_ENV = "JUPYTER_TOKEN"
#: docker-stacks images run as ``jovyan`` in group ``users`` (100): the home volume is theirs to write.
USERS_GID = 100
PROBE_PERIOD_SECONDS = 10
#: Kernels hold websockets open for hours: the controller must not cut them after its default minute.
PROXY_TIMEOUT_SECONDS = "3600"
#: Where every workspace is served under the notebooks host: ``/notebooks/<object name>/``.
PATH_PREFIX = "/notebooks"
AUTH_URL = "nginx.ingress.kubernetes.io/auth-url"
AUTH_SIGNIN = "nginx.ingress.kubernetes.io/auth-signin"
AUTH_RESPONSE_HEADERS = "nginx.ingress.kubernetes.io/auth-response-headers"


@dataclass(frozen=True)
class AccessConfig:
    """How people reach workspaces on a real cluster (settings ``SLIPWAY_WORKSPACE_*``, docs/workspaces.md)."""

    #: The domain under which each workspace gets a host of its own (``ws-7.<host>``): never the portal's host.
    host: str = "notebooks.slipway.example.com"
    ingress_class: str = "nginx"
    #: Slipway's ``/workspaces/auth/`` as the ingress controller reaches it (in-cluster).
    auth_url: str = "http://slipway-web.slipway-system.svc/workspaces/auth/"
    #: The portal as people reach it: a browser without the workspace's cookie is sent to its Open.
    portal_url: str = "https://slipway.example.com"
    ingress_namespace: str = "ingress-nginx"
    #: Slipway's own namespace: its worker reads the Jupyter server's activity (``/api/status``).
    portal_namespace: str = "slipway-system"
    storage_class: str | None = None


@dataclass(frozen=True)
class WorkspaceSpec:
    """The cluster layer's description of one workspace (pure data for the builders)."""

    object_name: str  #: "ws-7"
    pk: int
    team: str
    namespace: str
    name: str
    image: str
    flavor: FlavorSpec
    gpus: int
    cpu: float | None
    memory_gb: float | None
    home_gb: int
    home_path: str
    port: int
    env: tuple[tuple[str, str], ...] = ()
    volumes: tuple[VolumeSpec, ...] = ()
    spot: bool = False
    #: The keyed digest of its secret env (its Jupyter token): a rotated token changes the pod template.
    secret_env_digest: str = ""

    @property
    def base_url(self) -> str:
        return base_url(self.object_name)

    @property
    def claim(self) -> str:
        return home_claim(self.object_name)


def base_url(object_name: str) -> str:
    """The path a workspace's Jupyter server serves under (its ``base_url``, with a trailing slash):
    the Ingress's path on a real cluster, the local server's on the sandbox."""
    return f"{PATH_PREFIX}/{object_name}/"


def workspace_host(object_name: str, domain: str) -> str:
    """The workspace's own host name: ``ws-7.<domain>`` (one origin per workspace: one notebook's page cannot
    read another's, nor set the cookie another's gate reads)."""
    return f"{object_name}.{domain}"


def home_claim(object_name: str) -> str:
    """The name of a workspace's home volume claim: ``ws-7-home``."""
    return f"{object_name}-home"


def build_home_claim(spec: WorkspaceSpec, access: AccessConfig) -> Manifest:
    claim: Manifest = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(spec.claim, spec.namespace, spec.team, spec.object_name, spec.name),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": memory_quantity(spec.home_gb)}},
        },
    }
    if access.storage_class:
        claim["spec"]["storageClassName"] = access.storage_class
    return claim


def build_deployment(spec: WorkspaceSpec, config: ClusterConfig) -> Manifest:
    container: Manifest = {
        "name": "notebook",
        "image": spec.image,
        # docker-stacks' start script, told where it is served and that it listens on every interface
        # of its pod (only what the NetworkPolicy admits reaches it); the token comes from the Secret.
        "args": ["start-notebook.py", f"--ServerApp.base_url={spec.base_url}", "--ServerApp.ip=0.0.0.0",
                 f"--ServerApp.port={spec.port}"],
        "ports": [{"name": "jupyter", "containerPort": spec.port, "protocol": "TCP"}],
        "env": env_list(spec.env) + secret_env_refs(spec.object_name, (TOKEN_ENV,)),
        "resources": resources(spec.flavor, spec.gpus, spec.cpu, spec.memory_gb),
        "readinessProbe": {"tcpSocket": {"port": "jupyter"}, "periodSeconds": PROBE_PERIOD_SECONDS},
        "securityContext": container_security(config),
    }
    user_volumes, user_mounts = volume_entries(spec.volumes)
    container["volumeMounts"] = [{"name": "home", "mountPath": spec.home_path}, *user_mounts]
    volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": spec.claim}}, *user_volumes]
    pod = pod_spec(container=container, flavor=spec.flavor, config=config, restart_policy="Always",
                   volumes=volumes, team=spec.team, spot=spec.spot)
    pod["securityContext"] = {**pod["securityContext"], "fsGroup": USERS_GID}
    template_meta: Manifest = {"labels": {**pod_labels(spec.flavor, spec.team, spec.object_name), ISOLATED_LABEL: "true"}}
    if spec.secret_env_digest:  # a rotated token changes it: the Deployment replaces the pod, which reads the new one
        template_meta["annotations"] = {SECRET_ENV_DIGEST_ANNOTATION: spec.secret_env_digest}
    # A notebook's kernels hold their state in memory: an autoscaler's scale-down must not evict it (docs/pools.md).
    template_meta["annotations"] = {**template_meta.get("annotations", {}), **disruption_annotations(preemptible=False)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(spec.object_name, spec.namespace, spec.team, spec.object_name, spec.name),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels(spec.team, spec.object_name)},
            "strategy": {"type": "Recreate"},
            "template": {"metadata": template_meta, "spec": pod},
        },
    }


def build_service(spec: WorkspaceSpec) -> Manifest:
    return cluster_ip_service(spec.object_name, spec.namespace, spec.team, spec.name, "jupyter")


def auth_url(spec: WorkspaceSpec, access: AccessConfig) -> str:
    """The ``auth-url`` of the workspace's Ingress: Slipway's ``/workspaces/auth/``, naming the workspace."""
    return f"{access.auth_url}?workspace={spec.pk}"


def build_ingress(spec: WorkspaceSpec, access: AccessConfig) -> Manifest:
    meta = metadata(spec.object_name, spec.namespace, spec.team, spec.object_name, spec.name)
    meta["annotations"] = {
        **meta.get("annotations", {}),
        # Every request is put to Slipway first, with the workspace's cookie (the portal's never reach this
        # host): 200 lets it through, 401 sends the browser to the portal's Open (which sends it back with a
        # one-use ticket the next auth-url call exchanges for the cookie, passed on with Set-Cookie), 403 refuses.
        AUTH_URL: auth_url(spec, access),
        AUTH_SIGNIN: f"{access.portal_url}/workspaces/{spec.pk}/open/",
        # Slipway's 200 carries "Authorization: token …", handed to the Jupyter server with the request.
        AUTH_RESPONSE_HEADERS: "Authorization",
        "nginx.ingress.kubernetes.io/proxy-read-timeout": PROXY_TIMEOUT_SECONDS,
        "nginx.ingress.kubernetes.io/proxy-send-timeout": PROXY_TIMEOUT_SECONDS,
        "nginx.ingress.kubernetes.io/proxy-body-size": "0",  # notebooks upload files
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": meta,
        "spec": {
            "ingressClassName": access.ingress_class,
            "rules": [{"host": workspace_host(spec.object_name, access.host), "http": {"paths": [{
                "path": spec.base_url, "pathType": "Prefix",
                "backend": {"service": {"name": spec.object_name, "port": {"number": SERVICE_PORT}}},
            }]}}],
        },
    }


def _namespace(name: str) -> Manifest:
    """A peer that is the namespace ``name`` (the label the API server sets on every namespace)."""
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def build_networkpolicy(spec: WorkspaceSpec, access: AccessConfig) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(spec.object_name, spec.namespace, spec.team, spec.object_name, spec.name),
        "spec": {
            "podSelector": {"matchLabels": labels(spec.team, spec.object_name)},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [_namespace(access.ingress_namespace), _namespace(access.portal_namespace)],
                "ports": [{"port": spec.port, "protocol": "TCP"}],
            }],
        },
    }


def build_workspace(spec: WorkspaceSpec, config: ClusterConfig, access: AccessConfig) -> list[Manifest]:
    """Home claim and NetworkPolicy first (the pod mounts the one and is never reachable without the other),
    then the Deployment, its Service and Ingress."""
    return [build_home_claim(spec, access), build_networkpolicy(spec, access), build_deployment(spec, config),
            build_service(spec), build_ingress(spec, access)]
