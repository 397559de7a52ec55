"""deploy/gateway.yaml: the gateway's Deployment, Service and HTTPRoute, and the endpoint pods' NetworkPolicy
that Slipway renders into every team namespace agree with each other and with the settings.

The built-in kinds are validated with kubernetes-validate by tests/deploy/test_manifests.py (every object
under deploy/); the HTTPRoute here, against the Gateway API's CRD schema (tests/cluster/schemas/httproute.json,
extracted by scripts/extract_crd_schemas.py), strict: a field the API server would prune fails.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from cluster.manifests import build_team
from cluster.manifests.team import ENDPOINT_POLICY_NAME, NETWORKPOLICY_NAME
from cluster.specs import ClusterConfig
from inference.manifests import build_endpoint
from jobs.manifests import build_training
from portal import settings as defaults
from tests.cluster import crd_schema, samples
from tests.golden import K8S_VERSIONS

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
GATEWAY = [doc for doc in yaml.safe_load_all((DEPLOY / "gateway.yaml").read_text()) if doc]
CONFIGMAP = yaml.safe_load((DEPLOY / "configmap.yaml").read_text())["data"]


def _one(kind: str) -> dict[str, Any]:
    [doc] = [doc for doc in GATEWAY if doc["kind"] == kind]
    return doc


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_the_http_route_is_valid_against_the_gateway_api_crd() -> None:
    route = _one("HTTPRoute")
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert crd_schema.errors("httproute", route) == []


def test_the_schema_check_catches_what_the_api_server_would_prune_or_refuse() -> None:
    route = copy.deepcopy(_one("HTTPRoute"))
    route["spec"]["rules"][0]["backendRefs"][0]["prot"] = 80  # a typo: pruned silently by the API server
    route["spec"]["rules"][0]["matches"][0]["path"]["type"] = "Prefix"  # not an enum value
    route["spec"]["parentRefs"][0]["name"] = ""
    assert len(crd_schema.errors("httproute", route)) == 3


def test_the_route_sends_the_public_host_to_the_gateways_service_untouched() -> None:
    route, service, deployment = _one("HTTPRoute"), _one("Service"), _one("Deployment")
    [rule] = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert "filters" not in rule  # no rewrite: /<team>/<endpoint>/<path> reaches the gateway as sent
    [backend] = rule["backendRefs"]
    assert (backend["kind"], backend["name"], backend["port"]) == ("Service", service["metadata"]["name"],
                                                                   service["spec"]["ports"][0]["port"])
    assert route["metadata"]["namespace"] == service["metadata"]["namespace"]  # a backend of its own namespace
    # The hostname is SLIPWAY_GATEWAY_URL's, the URL the portal shows.
    assert route["spec"]["hostnames"] == [urlsplit(CONFIGMAP["SLIPWAY_GATEWAY_URL"]).hostname]
    assert CONFIGMAP["SLIPWAY_GATEWAY_URL"].startswith("https://")
    [parent] = route["spec"]["parentRefs"]
    assert parent["kind"] == "Gateway" and parent["namespace"] and parent["sectionName"]
    # The service selects the Deployment's pods, on its named port.
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert _matches(service["spec"]["selector"], pod_labels)
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert service["spec"]["ports"][0]["targetPort"] in {p["name"] for p in container["ports"]}


def test_the_gateway_runs_manage_py_gateway_with_probes_on_healthz() -> None:
    deployment = _one("Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["python", "manage.py", "gateway", "--bind", "0.0.0.0:8080"]
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert pod["automountServiceAccountToken"] is False  # it needs no Kubernetes API
    assert _one("PodDisruptionBudget")["spec"]["selector"] == deployment["spec"]["selector"]


def test_endpoint_pods_accept_the_gateways_pods_only() -> None:
    """The team namespace's endpoint policy (rendered from the settings' defaults) names the namespace and
    the pod labels deploy/gateway.yaml runs the gateway with; the team's isolation policy leaves endpoint
    pods out, so the two policies never add up to more."""
    config = ClusterConfig(gateway_namespace=defaults.SLIPWAY_GATEWAY_NAMESPACE)
    objects = build_team(samples.team(), config)
    [policy] = [o for o in objects if o["metadata"]["name"] == ENDPOINT_POLICY_NAME]
    [isolation] = [o for o in objects if o["metadata"]["name"] == NETWORKPOLICY_NAME]
    deployment = _one("Deployment")
    gateway_pods = deployment["spec"]["template"]["metadata"]["labels"]
    [rule] = policy["spec"]["ingress"]
    [peer] = rule["from"]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": deployment["metadata"]["namespace"]}}
    assert CONFIGMAP["SLIPWAY_GATEWAY_NAMESPACE"] == deployment["metadata"]["namespace"]
    assert _matches(peer["podSelector"]["matchLabels"], gateway_pods)
    assert not _matches(peer["podSelector"]["matchLabels"], {**gateway_pods, "app.kubernetes.io/component": "web"})
    # An endpoint's pods: selected by the endpoint policy, left out by the isolation policy.
    endpoint_pods = build_endpoint(samples.endpoint(), samples.CONFIG)[0]["spec"]["template"]["metadata"]["labels"]
    assert _matches(policy["spec"]["podSelector"]["matchLabels"], endpoint_pods)
    [absent] = isolation["spec"]["podSelector"]["matchExpressions"]
    assert absent["operator"] == "DoesNotExist" and absent["key"] in endpoint_pods
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    # A training job's pods are not endpoint pods: the isolation policy still covers them.
    job_pods = build_training(samples.training(), samples.CONFIG)[0]["spec"]["template"]["metadata"]["labels"]
    assert not _matches(policy["spec"]["podSelector"]["matchLabels"], job_pods)
    assert absent["key"] not in job_pods


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("scraper", [None, "monitoring"])
def test_the_endpoint_policy_is_a_valid_network_policy(version: str, scraper: str | None) -> None:
    policy = build_team(samples.team(), ClusterConfig(metrics_namespace=scraper))[-1]
    assert policy["metadata"]["name"] == ENDPOINT_POLICY_NAME
    kubernetes_validate.validate(policy, version, strict=True)
    assert len(policy["spec"]["ingress"]) == (2 if scraper else 1)
