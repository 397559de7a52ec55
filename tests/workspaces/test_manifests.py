"""The workspace's pure builders: golden files, strict validation, and the rules they must keep.

Golden files live in ``tests/workspaces/golden/``. After an intended change, regenerate them with

    SLIPWAY_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/workspaces/test_manifests.py

and review the diff like code.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest

from cluster.manifests.team import build_networkpolicy as team_networkpolicy
from cluster.specs import ClusterConfig, VolumeSpec
from tests.cluster import samples
from tests.golden import K8S_VERSIONS, all_objects, assert_golden_manifests
from workloads.registry import kind_for
from workspaces import manifests
from workspaces.manifests import AccessConfig, WorkspaceSpec, build_workspace

GOLDEN = Path(__file__).parent / "golden"
ACCESS = AccessConfig()


def spec(**overrides: Any) -> WorkspaceSpec:
    values: dict[str, Any] = {
        "object_name": "ws-7", "pk": 7, "team": "vision", "namespace": "team-vision", "name": "explore",
        "image": "quay.io/jupyter/pytorch-notebook:cuda12-python-3.11", "flavor": samples.MIG_1G, "gpus": 1,
        "cpu": None, "memory_gb": None, "home_gb": 20, "home_path": "/home/jovyan", "port": 8888,
        "env": (("SLIPWAY_SIM_GPU_UTIL", "0"),),
    }
    values.update(overrides)
    return WorkspaceSpec(**values)


VARIANTS: dict[str, Any] = {
    "workspace_mig": lambda: build_workspace(spec(), samples.CONFIG, ACCESS),
    "workspace_full_gpu_volumes_spot": lambda: build_workspace(
        spec(flavor=samples.A100, gpus=2, cpu=8, memory_gb=48.5, home_gb=200, spot=True,
             env=(("HF_HOME", "/data/hf"), ("SLIPWAY_SIM_GPU_UTIL", "0")),
             volumes=(VolumeSpec("datasets", "/data", read_only=True),), secret_env_digest="5e2b" * 16),
        samples.CONFIG, replace(ACCESS, host="notebooks.example.com", storage_class="fast-rwo")),
    "workspace_time_sliced": lambda: build_workspace(spec(flavor=samples.T4_TS4), ClusterConfig(), ACCESS),
}


def _all_objects() -> list[tuple[str, dict[str, Any]]]:
    return all_objects(VARIANTS)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_it_matches_the_golden_file(variant: str) -> None:
    assert_golden_manifests(GOLDEN, variant, VARIANTS[variant]())


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(("label", "obj"), _all_objects())
def test_it_renders_objects_valid_in_strict_mode(label: str, obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


def test_it_rejects_what_the_api_server_would_not_take() -> None:
    ingress = build_workspace(spec(), samples.CONFIG, ACCESS)[-1]
    # networking.k8s.io/v1beta1's spelling, which v1 no longer knows (strict: an unknown field is an error).
    ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["serviceName"] = "ws-7"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ingress, K8S_VERSIONS[0], strict=True)


@pytest.mark.parametrize(("label", "obj"), _all_objects())
def test_it_labels_every_object_for_slipway(label: str, obj: dict[str, Any]) -> None:
    labels = obj["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/managed-by": "slipway", "slipway.dev/team": "vision",
                      "slipway.dev/workload": "ws-7"}


def test_the_pod_is_hardened_and_mounts_its_home_volume() -> None:
    claim, _policy, deployment, _service, _ingress = build_workspace(spec(), samples.CONFIG, ACCESS)
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["fsGroup"] == 100
    [container] = pod["containers"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    assert {"name": "home", "mountPath": "/home/jovyan"} in container["volumeMounts"]
    assert {"name": "home", "persistentVolumeClaim": {"claimName": "ws-7-home"}} in pod["volumes"]
    assert claim["metadata"]["name"] == "ws-7-home"
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert not any("hostPath" in volume for volume in pod["volumes"])
    # The token reaches the pod from the Secret, never as a value in a manifest people read.
    assert {"name": "JUPYTER_TOKEN", "valueFrom": {"secretKeyRef": {"name": "ws-7-env", "key": "JUPYTER_TOKEN"}}} \
        in container["env"]
    assert "--ServerApp.base_url=/notebooks/ws-7/" in container["args"]


def test_the_ingress_asks_slipway_about_every_request() -> None:
    ingress = build_workspace(spec(), samples.CONFIG, ACCESS)[-1]
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/auth-url"] == (
        "http://slipway-web.slipway-system.svc/workspaces/auth/?workspace=7")
    # Without the workspace's cookie: to the portal's Open, which sends the browser back with a one-use ticket.
    assert annotations["nginx.ingress.kubernetes.io/auth-signin"] == "https://slipway.example.com/workspaces/7/open/"
    assert annotations["nginx.ingress.kubernetes.io/auth-response-headers"] == "Authorization"
    [rule] = ingress["spec"]["rules"]
    assert rule["http"]["paths"][0]["path"] == "/notebooks/ws-7/"
    assert rule["http"]["paths"][0]["backend"]["service"] == {"name": "ws-7", "port": {"number": 80}}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_ingress_serves_the_notebook_on_its_own_host_never_the_portals(variant: str) -> None:
    """Issue 46 B1: served on the portal's host, the owner's container received a visiting admin's portal cookies
    (sessionid, csrftoken) and its JavaScript ran on the portal's origin."""
    ingress = next(o for o in VARIANTS[variant]() if o["kind"] == "Ingress")
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == f"ws-7.{ACCESS.host}" or rule["host"] == "ws-7.notebooks.example.com"
    assert rule["host"] != urlsplit(ACCESS.portal_url).hostname
    annotations = ingress["metadata"]["annotations"]
    # The auth-url's answer hands the upstream the Jupyter token only: no cookie, no session of the portal's.
    assert annotations["nginx.ingress.kubernetes.io/auth-response-headers"] == "Authorization"
    # No snippet (ingress-nginx refuses them by default) and nothing that would forward a portal cookie.
    assert not any("snippet" in key or "cookie" in key for key in annotations)


def test_a_rotated_token_changes_the_pod_template() -> None:
    """A Secret's change alone restarts no pod: the template names the token's digest, so the Deployment replaces
    the pod, which reads the new token."""
    before = build_workspace(spec(secret_env_digest="a" * 64), samples.CONFIG, ACCESS)[2]
    after = build_workspace(spec(secret_env_digest="b" * 64), samples.CONFIG, ACCESS)[2]
    assert before["spec"]["template"]["metadata"]["annotations"]["slipway.dev/secret-env-digest"] == "a" * 64
    assert after["spec"]["template"] != before["spec"]["template"]


def test_only_the_ingress_controller_and_slipway_reach_the_pod() -> None:
    _claim, policy, deployment, _service, _ingress = build_workspace(spec(), samples.CONFIG, ACCESS)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "slipway-system"}}}]
    assert rule["ports"] == [{"port": 8888, "protocol": "TCP"}]
    # The team's own policy, which admits every pod of the namespace, leaves this pod out: policies add up.
    team_policy = team_networkpolicy(samples.team())
    [expression] = team_policy["spec"]["podSelector"]["matchExpressions"]
    assert (expression["key"], expression["operator"]) == ("slipway.dev/isolated", "DoesNotExist")
    assert pod_labels[expression["key"]] == "true"


def test_a_pause_keeps_the_home_claim_and_a_delete_removes_it() -> None:
    kind = kind_for("ws")
    claim = next(r for r in kind.resources if r.kind == "PersistentVolumeClaim")
    assert claim.kept_across_attempts and claim.deleted and claim.observed
    kept = [r.kind for r in kind.attempt_resources if not r.deleted]
    assert kept == ["PersistentVolumeClaim"]
    # The Ingress goes first (nothing routes to a pod about to go), the claim last.
    order = [r.kind for r in kind.resources]
    assert (order[0], order[-1]) == ("Ingress", claim.kind)


def test_the_builders_are_pure() -> None:
    """No Django, no clock, no randomness: the same spec renders the same objects."""
    tree = ast.parse(Path(manifests.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert {name.split(".")[0] for name in imported} <= {"__future__", "dataclasses", "cluster"}
    assert build_workspace(spec(), samples.CONFIG, ACCESS) == build_workspace(spec(), samples.CONFIG, ACCESS)


def test_a_workspace_is_never_evicted_by_an_autoscalers_scale_down() -> None:
    """A notebook's kernels keep their state in memory: its pod carries the do-not-disrupt annotations."""
    deployment = build_workspace(spec(), samples.CONFIG, ACCESS)[2]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"karpenter.sh/do-not-disrupt": "true", "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
