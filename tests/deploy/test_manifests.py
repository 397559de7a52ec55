"""deploy/: every manifest is a valid Kubernetes object and the RBAC stays least-privilege."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cluster.backends.base import ResourceKind
from cluster.manifests.team import PROMETHEUS_TENANT_HEADER
from cluster.rbac import kind_rules, render
from tests.golden import K8S_VERSIONS
from tests.test_kind_boundaries import project_kinds
from workloads.registry import resource_declarations

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
FORBIDDEN_VERBS = {"escalate", "bind", "impersonate", "*"}


#: API groups of custom resources under deploy/ (the Prometheus Operator's PrometheusRule, the Gateway
#: API's HTTPRoute, Kubeflow Trainer's ClusterTrainingRuntime): kubernetes-validate knows only built-in kinds;
#: tests/deploy/test_monitoring.py, tests/deploy/test_gateway.py and tests/deploy/test_training_runtimes.py check them.
CUSTOM_GROUPS = ("monitoring.coreos.com/", "gateway.networking.k8s.io/", "trainer.kubeflow.org/")


def _documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")]):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None and not doc["apiVersion"].startswith(CUSTOM_GROUPS):
                docs.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return docs


DOCUMENTS = _documents()


def _of_kind(*kinds: str) -> list[dict[str, Any]]:
    return [doc for _, doc in DOCUMENTS if doc["kind"] in kinds]


def _rules() -> list[dict[str, Any]]:
    return [rule for role in _of_kind("ClusterRole", "Role") for rule in role["rules"]]


def test_it_finds_the_manifests() -> None:
    kinds = {doc["kind"] for _, doc in DOCUMENTS}
    assert {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
    } <= kinds
    names = {doc["metadata"]["name"] for doc in _of_kind("Deployment")}
    assert names == {"slipway-web", "slipway-worker", "slipway-notify-worker", "slipway-beat", "slipway-prometheus-proxy",
                     "slipway-gateway"}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(("label", "doc"), DOCUMENTS, ids=[label for label, _ in DOCUMENTS])
def test_it_validates_every_object_in_strict_mode(label: str, doc: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


#: Components that run Slipway itself (the label proxy runs prom-label-proxy, with no settings).
SLIPWAY_COMPONENTS = {"web", "worker", "notify-worker", "beat", "migrate", "gateway"}


def _component(doc: dict[str, Any]) -> str:
    return doc["metadata"]["labels"].get("app.kubernetes.io/component", "")


def test_it_ships_no_secret_values() -> None:
    assert _of_kind("Secret") == []
    for deployment in _of_kind("Deployment", "Job"):
        if _component(deployment) not in SLIPWAY_COMPONENTS:
            continue
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert {"secretRef": {"name": "slipway-secrets"}} in container["envFrom"]
            assert "env" not in container  # values come from the ConfigMap / Secret only


def test_the_readme_creates_every_secret_value_the_settings_require_in_production() -> None:
    # Without SLIPWAY_SECRET_KEYS a production start refuses (system check slipway.E001): the
    # Secret the README has you create must hold it, next to SECRET_KEY.
    readme = (DEPLOY / "README.md").read_text()
    command = readme[readme.index("create secret generic slipway-secrets"):readme.index("# 3. Migrate")]
    for name in ("SECRET_KEY", "SLIPWAY_SECRET_KEYS", "DATABASE_URL", "REDIS_URL"):
        assert f"--from-literal={name}=" in command, name


def test_it_uses_no_wildcards_in_rbac() -> None:
    for rule in _rules():
        for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert "*" not in rule.get(key, []), rule
        assert all("*" not in resource for resource in rule["resources"])


#: Verbs that would hand Secret values (or their changes) to Slipway.
SECRET_READ_VERBS = {"get", "list", "watch"}


def test_it_writes_secrets_but_never_reads_any() -> None:
    secret_verbs = {verb for rule in _rules() if "secrets" in rule["resources"] for verb in rule["verbs"]}
    # A workload's secret env is written to its Secret and deleted with it...
    assert secret_verbs == {"create", "update", "patch", "delete"}
    # ...but no rule of any role lets Slipway read a Secret, by name or by listing or watching.
    for rule in _rules():
        if "secrets" in rule["resources"]:
            assert rule["apiGroups"] == [""] and not SECRET_READ_VERBS & set(rule["verbs"]), rule
            assert "resourceNames" not in rule, rule
        assert "serviceaccounts/token" not in rule["resources"], rule


def test_it_confines_secret_writes_to_slipways_own_secrets() -> None:
    [policy] = _of_kind("ValidatingAdmissionPolicy")
    resources = {r for rule in policy["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]}
    assert "secrets" in resources
    [secret_check] = [v for v in policy["spec"]["validations"] if 'request.resource.resource != "secrets"' in v["expression"]]
    assert "oldObject" in secret_check["expression"] and "managed-by" in secret_check["expression"]


def test_it_grants_no_escalation_verbs() -> None:
    for rule in _rules():
        assert not FORBIDDEN_VERBS & set(rule["verbs"]), rule
        # Creating or exec-ing into pods directly would bypass the workload controllers.
        assert not (
            {"pods", "pods/exec", "pods/attach", "pods/portforward"} & set(rule["resources"])
            and {"create", "patch", "update"} & set(rule["verbs"])
        ), rule
        assert "rbac.authorization.k8s.io" not in rule["apiGroups"], rule


def test_it_grants_what_the_backend_needs() -> None:
    granted = {
        (group, resource, verb)
        for rule in _rules()
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    needed = {("batch", "jobs", v) for v in ("list", "create", "patch", "delete")}
    needed |= {("kubeflow.org", "pytorchjobs", v) for v in ("list", "create", "patch", "delete")}
    needed |= {("trainer.kubeflow.org", "trainjobs", v) for v in ("get", "list", "create", "patch", "delete")}
    needed |= {("keda.sh", "scaledobjects", v) for v in ("list", "create", "patch", "delete")}
    needed |= {("autoscaling", "horizontalpodautoscalers", "list")}  # KEDA's HPAs, read only
    needed |= {("apps", "deployments", "patch"), ("", "services", "delete"), ("", "namespaces", "patch")}
    # delete() finds a workload's objects by its label: a LIST of every deleted kind, observed or not.
    needed |= {("", "services", "list"), ("networking.k8s.io", "ingresses", "list"), ("", "podtemplates", "list")}
    # An atomic pool's request, observed and deleted with its run; Karpenter's NodePools read for their limits.
    needed |= {("autoscaling.x-k8s.io", "provisioningrequests", v) for v in ("list", "create", "patch", "delete")}
    needed |= {("karpenter.sh", "nodepools", "list")}
    needed |= {("", "pods", "list"), ("", "pods/log", "get"), ("", "events", "list"), ("", "nodes", "list")}
    needed |= {("", "secrets", v) for v in ("create", "patch", "delete")}  # apply_secret, delete by name
    needed |= {("trainer.kubeflow.org", "clustertrainingruntimes", "list")}  # training API discovery
    # The team's Prometheus tenant, applied with the team's objects when a label proxy is configured.
    needed |= {("keda.sh", "triggerauthentications", v) for v in ("create", "patch")}
    needed |= {("", "configmaps", v) for v in ("create", "patch")}
    needed |= {
        ("", "resourcequotas", "patch"),
        ("", "limitranges", "patch"),
        ("networking.k8s.io", "networkpolicies", "patch"),
    }
    assert needed <= granted
    assert ("", "namespaces", "delete") not in granted


def test_it_only_lists_the_training_runtimes() -> None:
    """Discovery reads a cluster's ClusterTrainingRuntimes (docs/training.md); Slipway never writes them."""
    verbs = {verb for rule in _rules() if "clustertrainingruntimes" in rule["resources"] for verb in rule["verbs"]}
    assert verbs == {"list"}


def test_it_only_reads_kedas_autoscalers() -> None:
    verbs = {verb for rule in _rules() if "horizontalpodautoscalers" in rule["resources"] for verb in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}


def test_it_binds_the_role_to_slipways_service_account_only() -> None:
    [binding] = _of_kind("ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "slipway"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slipway", "namespace": "slipway-system"}]


def test_it_hardens_every_pod() -> None:
    for workload in _of_kind("Deployment", "Job"):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert not any("hostPath" in v for v in pod.get("volumes", []))
        for container in pod["containers"]:
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False and ctx["privileged"] is False
            assert ctx["capabilities"] == {"drop": ["ALL"]} and ctx["readOnlyRootFilesystem"] is True
            assert container["resources"]["limits"] and container["resources"]["requests"]


def test_it_runs_a_single_beat_that_never_overlaps() -> None:
    [beat] = [d for d in _of_kind("Deployment") if d["metadata"]["name"] == "slipway-beat"]
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"] == {"type": "Recreate"}
    assert beat["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_only_the_web_and_the_cycles_workers_hold_a_kubernetes_token() -> None:
    """What talks to the clusters mounts the service account's token; the notification workers send e-mails and
    webhooks and never need one."""
    mounted = {_component(d) for d in _of_kind("Deployment") if d["spec"]["template"]["spec"]["automountServiceAccountToken"]}
    assert mounted == {"web", "worker"}


def test_it_justifies_every_rbac_rule_in_a_comment() -> None:
    lines = (DEPLOY / "rbac.yaml").read_text().splitlines()
    rule_starts = [i for i, line in enumerate(lines) if line.strip().startswith("- apiGroups:")]
    assert len(rule_starts) == len(_rules())
    for index in rule_starts:
        assert lines[index - 1].strip().startswith("#"), f"rule at line {index + 1} has no justification"


def test_the_label_proxy_pins_the_namespace_slipways_tenants_send_and_only_keda_reaches_it() -> None:
    """deploy/prometheus-label-proxy.yaml agrees with what cluster/manifests/team.py renders."""
    [proxy] = [d for d in _of_kind("Deployment") if _component(d) == "prometheus-proxy"]
    pod = proxy["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"].startswith("quay.io/prometheuscommunity/prom-label-proxy:v")
    args = container["args"]
    assert "--label=namespace" in args and "--error-on-replace" in args
    assert f"--header-name={PROMETHEUS_TENANT_HEADER}" in args
    assert "env" not in container and "envFrom" not in container  # it needs no settings, no secrets
    assert pod["automountServiceAccountToken"] is False
    [service] = [s for s in _of_kind("Service") if _component(s) == "prometheus-proxy"]
    example = "http://slipway-prometheus-proxy.slipway-system.svc:8080"
    assert f"http://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:" \
           f"{service['spec']['ports'][0]['port']}" == example
    assert example in (DEPLOY.parent / ".env.example").read_text()
    [policy] = [p for p in _of_kind("NetworkPolicy") if _component(p) == "prometheus-proxy"]
    assert policy["spec"]["podSelector"]["matchLabels"] == proxy["spec"]["selector"]["matchLabels"]
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}}]


def missing_grants(resources, rules: list[dict[str, Any]]) -> list[str]:
    """What the ClusterRole lacks for Slipway to apply (create, patch), observe (get, list) and delete
    each of ``resources`` (``workloads.registry.ResourceKind``) as its declaration says."""
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    missing = []
    for resource in resources:
        needed = {"create", "patch"} | ({"get", "list"} if resource.observed else set()) \
            | ({"list", "delete"} if resource.deleted else set())
        lacking = needed - granted.get((resource.group, resource.plural), set())
        if lacking:
            missing.append(f"{resource.group or 'core'}/{resource.plural}: {', '.join(sorted(lacking))}")
    return missing


def test_deploy_rbac_is_what_the_kinds_declare_rendered() -> None:
    """deploy/rbac.yaml is generated (``make rbac``): a kind's new resource, or a changed platform rule, fails
    here until the file is written again — so adding a kind touches nothing under deploy/ by hand."""
    assert (DEPLOY / "rbac.yaml").read_text() == render(resource_declarations(project_kinds())), \
        "deploy/rbac.yaml is out of date: run `make rbac`"


def test_a_kinds_resources_become_rules_with_the_verbs_its_declaration_needs() -> None:
    widget = ResourceKind("example.dev", "v1", "Widget", "widgets", observed=True, deleted=True)
    gadget = ResourceKind("example.dev", "v1", "Widget", "widgets")  # another kind applies it only
    [rule] = kind_rules([("widget jobs", widget), ("gadgets", gadget)])
    assert (rule.group, rule.resources, rule.verbs) == ("example.dev", ("widgets",),
                                                        ("get", "list", "create", "patch", "delete"))
    assert "widget jobs: get, list, create, patch, delete; gadgets: create, patch" in rule.why
    rendered = yaml.safe_load_all(render([("gadgets", gadget)]))
    role = next(doc for doc in rendered if doc["kind"] == "ClusterRole")
    assert role["rules"][-1] == {"apiGroups": ["example.dev"], "resources": ["widgets"], "verbs": ["create", "patch"]}
    assert all(len(line) <= 110 for line in render([("gadgets", gadget)]).splitlines())


def test_the_cluster_role_grants_what_every_kind_declares() -> None:
    """A kind's resource kinds (its only declaration, ``WorkloadKind.resources``) are what the portal's
    ClusterRole must allow: a new kind's resources missing from deploy/rbac.yaml fail here."""
    resources = {resource for kind in project_kinds() for resource in kind.resources}
    assert {"jobs", "deployments", "ingresses"} <= {resource.plural for resource in resources}
    assert missing_grants(resources, _rules()) == []
    widget = ResourceKind("example.dev", "v1", "Widget", "widgets", observed=True, deleted=True)
    assert missing_grants([widget], _rules()) == ["example.dev/widgets: create, delete, get, list, patch"]
