"""The shared pure manifest builders (a team's namespace objects, a workload's env Secret, names): golden
files, schema validation, and the rules they must keep. Each kind's builders are tested in its own test
package (tests/jobs, tests/inference, tests/workspaces), on the rules of ``manifest_rules.py``.

Golden files live in ``tests/cluster/golden/``. After an intended change, regenerate them with

    SLIPWAY_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/cluster/test_manifests.py

and review the diff like code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from cluster.manifests import build_env_secret, build_team, dns_name
from cluster.specs import ClusterConfig
from tests.cluster import crd_schema, samples
from tests.cluster.manifest_rules import CUSTOM_KINDS, check_labels
from tests.golden import K8S_VERSIONS, all_objects, assert_golden_manifests

GOLDEN = Path(__file__).parent / "golden"
PROXY = ClusterConfig(prometheus_proxy_url="http://slipway-prometheus-proxy.slipway-system.svc:8080")


VARIANTS: dict[str, Any] = {
    "team_prometheus_proxy": lambda: build_team(samples.team(), PROXY),
    "env_secret": lambda: [build_env_secret("team-vision", "vision", "run-42",
                                            (("HF_TOKEN", "hf_not-a-real-token"), ("WANDB_API_KEY", "wandb ü 1")))],
    "team": lambda: build_team(samples.team(), samples.CONFIG),
    "team_root_allowed": lambda: build_team(samples.team(quotas=()), ClusterConfig(run_as_non_root=False)),
    # The gateway in a namespace of its own, and Prometheus let in to scrape the engines.
    "team_gateway_scraper": lambda: build_team(samples.team(), ClusterConfig(gateway_namespace="serving",
                                                                             metrics_namespace="monitoring")),
}


def _all_objects() -> list[tuple[str, dict[str, Any]]]:
    return all_objects(VARIANTS)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_it_matches_the_golden_file(variant: str) -> None:
    assert_golden_manifests(GOLDEN, variant, VARIANTS[variant]())


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(
    ("label", "obj"), [o for o in _all_objects() if o[1]["kind"] not in CUSTOM_KINDS]
)
def test_it_renders_core_objects_valid_in_strict_mode(label: str, obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize(
    ("label", "obj"), [o for o in _all_objects() if o[1]["kind"] in CUSTOM_KINDS]
)
def test_it_renders_custom_resources_valid_against_their_crd(label: str, obj: dict[str, Any]) -> None:
    name = obj["kind"].lower()
    assert crd_schema.errors(name, obj) == []


@pytest.mark.parametrize(("label", "obj"), _all_objects())
def test_it_labels_every_object_for_slipway(label: str, obj: dict[str, Any]) -> None:
    check_labels(label, obj)


def test_it_can_allow_root_containers_when_configured() -> None:
    namespace = build_team(samples.team(), ClusterConfig(run_as_non_root=False))[0]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"


def test_it_mirrors_the_team_quota() -> None:
    namespace, quota, limits, policy, endpoint_policy = build_team(samples.team(), samples.CONFIG)
    assert namespace["metadata"]["name"] == "team-vision"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "8", "requests.nvidia.com/mig-1g.10gb": "7"}
    assert limits["kind"] == "LimitRange"
    # Every pod but those with a policy of their own (a workspace's): policies add up.
    assert policy["spec"]["podSelector"] == {"matchExpressions": [{"key": "slipway.dev/isolated",
                                                                   "operator": "DoesNotExist"}]}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    # Endpoint pods (left out above) answer the gateway's pods in the gateway's namespace only.
    assert endpoint_policy["spec"]["podSelector"] == {"matchLabels": {"slipway.dev/serving": "true"}}
    [rule] = endpoint_policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "slipway-system"}},
                             "podSelector": {"matchLabels": {"app.kubernetes.io/name": "slipway",
                                                             "app.kubernetes.io/component": "gateway"}}}]


def test_it_derives_dns_names_within_63_characters() -> None:
    assert dns_name("run-42") == "run-42"
    assert dns_name("Team_ML", "run.1") == "team-ml-run-1"
    long_a, long_b = dns_name("x" * 80, "a"), dns_name("x" * 80, "b")
    assert len(long_a) <= 63 and long_a != long_b and long_a == dns_name("x" * 80, "a")
