"""Per-team objects: Namespace, ResourceQuota, LimitRange, the NetworkPolicies, and the Prometheus tenant.

Two NetworkPolicies: the team's isolation (its own pods, the ingress controller and Prometheus reach
its pods) and the endpoints' (an endpoint's pods answer the gateway only, :func:`build_endpoint_policy`):
an endpoint is called through the gateway, which checks the caller's key, so no pod of the cluster,
the team's own included, reaches a replica around it.

With a label-enforcing Prometheus proxy configured (``ClusterConfig.prometheus_proxy_url``,
docs/security.md), each team namespace also gets a ConfigMap naming the namespace and a KEDA
``TriggerAuthentication`` that turns it into the header the proxy pins every selector with. A
ScaledObject can only reference a TriggerAuthentication of its own namespace, so the tenant a
trigger queries as is the namespace it lives in — never a value an endpoint's spec could carry.
"""

from __future__ import annotations

from cluster.manifests.common import Manifest, cpu_quantity, memory_quantity, metadata
from cluster.specs import ClusterConfig, TeamSpec

QUOTA_NAME = "slipway-gpu-quota"
LIMITRANGE_NAME = "slipway-defaults"
NETWORKPOLICY_NAME = "slipway-isolation"
#: The NetworkPolicy of the team's endpoint pods: requests from the gateway only.
ENDPOINT_POLICY_NAME = "slipway-endpoints"
#: The team's Prometheus tenant: a ConfigMap and a TriggerAuthentication of this name.
PROMETHEUS_TENANT_NAME = "slipway-prometheus-tenant"
#: The header prom-label-proxy reads the namespace from (its ``-header-name`` in the deploy file).
PROMETHEUS_TENANT_HEADER = "X-Slipway-Namespace"
#: Namespaces with this label (ingress controller, Prometheus) may reach team pods.
INGRESS_ALLOWED_LABEL = "slipway.dev/allow-ingress"
#: Pods with this label bring a NetworkPolicy of their own (a workspace's: only the ingress controller
#: reaches it) and are left out of the team's: policies add up, so one admitting the whole namespace
#: would let every teammate's pod in whatever the pod's own policy says.
ISOLATED_LABEL = "slipway.dev/isolated"
#: Pods with this label ("true") serve an endpoint (the endpoint kind's builders put it on them, with
#: :data:`ISOLATED_LABEL`): :func:`build_endpoint_policy` selects them.
SERVING_LABEL = "slipway.dev/serving"
#: The label every namespace carries with its name (Kubernetes sets it): how a policy names one namespace.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def team_workload(slug: str) -> str:
    """The ``slipway.dev/workload`` value of a team's own objects."""
    return f"team-{slug}"


def build_namespace(spec: TeamSpec, config: ClusterConfig) -> Manifest:
    # "restricted" rejects any pod that is not non-root; with run_as_non_root off the
    # cluster admin accepted root containers, so "baseline" (still no privileged/hostPath).
    level = "restricted" if config.run_as_non_root else "baseline"
    meta = metadata(spec.namespace, None, spec.slug, team_workload(spec.slug))
    for mode in ("enforce", "audit", "warn"):
        meta["labels"][f"pod-security.kubernetes.io/{mode}"] = level
        meta["labels"][f"pod-security.kubernetes.io/{mode}-version"] = "latest"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def build_resourcequota(spec: TeamSpec) -> Manifest:
    """GPU quota mirroring the portal's, as a backstop: the portal admits first, the API server
    enforces even if something bypasses the portal. Extended resources only allow ``requests.``."""
    hard = {f"requests.{resource}": str(int(units)) for resource, units in spec.quotas}
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": metadata(QUOTA_NAME, spec.namespace, spec.slug, team_workload(spec.slug)),
        "spec": {"hard": dict(sorted(hard.items()))},
    }


def build_limitrange(spec: TeamSpec) -> Manifest:
    """Defaults for containers that state no resources (Slipway's own always do)."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": metadata(LIMITRANGE_NAME, spec.namespace, spec.slug, team_workload(spec.slug)),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "defaultRequest": {"cpu": cpu_quantity(0.5), "memory": memory_quantity(1)},
                    "default": {"cpu": cpu_quantity(2), "memory": memory_quantity(4)},
                }
            ]
        },
    }


def build_networkpolicy(spec: TeamSpec) -> Manifest:
    """Only the team's own pods (and the ingress controller / Prometheus) may connect in — to every pod but
    those with a policy of their own (:data:`ISOLATED_LABEL`).

    Egress stays open: training pulls images, datasets and packages from outside the cluster.
    """
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(NETWORKPOLICY_NAME, spec.namespace, spec.slug, team_workload(spec.slug)),
        "spec": {
            "podSelector": {"matchExpressions": [{"key": ISOLATED_LABEL, "operator": "DoesNotExist"}]},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {"podSelector": {}},
                        {"namespaceSelector": {"matchLabels": {INGRESS_ALLOWED_LABEL: "true"}}},
                    ]
                }
            ],
        },
    }


def build_endpoint_policy(spec: TeamSpec, config: ClusterConfig) -> Manifest:
    """Endpoint pods accept connections from the gateway's pods only (and the metrics scraper, if named).

    The gateway is where keys, rate limits and the traffic figures are enforced and counted; a pod that
    reached a replica directly would skip all three. The rule pairs a ``namespaceSelector`` with a
    ``podSelector`` in one peer: the gateway's pods *in* the gateway's namespace, not every pod with those
    labels anywhere (a team could label its own pods so). Only the serving port (``http``) is open; the
    kubelet's probes come from the node and are not subject to the policy.
    """
    port = [{"port": "http", "protocol": "TCP"}]
    peers = [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: config.gateway_namespace}},
              "podSelector": {"matchLabels": dict(config.gateway_pod_labels)}}]
    rules = [{"from": peers, "ports": port}]
    if config.metrics_namespace:
        # The engine's /metrics (vLLM's queue gauge a queue-length trigger reads) is on the same port.
        rules.append({"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: config.metrics_namespace}}}],
                      "ports": port})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(ENDPOINT_POLICY_NAME, spec.namespace, spec.slug, team_workload(spec.slug)),
        "spec": {"podSelector": {"matchLabels": {SERVING_LABEL: "true"}}, "policyTypes": ["Ingress"],
                 "ingress": rules},
    }


def build_prometheus_tenant(spec: TeamSpec) -> list[Manifest]:
    """The header KEDA sends the Prometheus proxy for this namespace's triggers (``authModes: custom``)."""
    meta = metadata(PROMETHEUS_TENANT_NAME, spec.namespace, spec.slug, team_workload(spec.slug))
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                  "data": {"header": PROMETHEUS_TENANT_HEADER, "namespace": spec.namespace}}
    refs = [{"parameter": "customAuthHeader", "name": PROMETHEUS_TENANT_NAME, "key": "header"},
            {"parameter": "customAuthValue", "name": PROMETHEUS_TENANT_NAME, "key": "namespace"}]
    trigger_auth = {"apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication",
                    "metadata": metadata(PROMETHEUS_TENANT_NAME, spec.namespace, spec.slug, team_workload(spec.slug)),
                    "spec": {"configMapTargetRef": refs}}
    return [config_map, trigger_auth]


def build_team(spec: TeamSpec, config: ClusterConfig) -> list[Manifest]:
    """Namespace, ResourceQuota, LimitRange and the two NetworkPolicies of one team (Namespace first),
    and its Prometheus tenant when a proxy is configured."""
    objects = [build_namespace(spec, config), build_resourcequota(spec), build_limitrange(spec),
               build_networkpolicy(spec), build_endpoint_policy(spec, config)]
    if config.prometheus_proxy_url:
        objects += build_prometheus_tenant(spec)
    return objects
