"""deploy/prometheus/ and deploy/grafana/: the alert rules and the dashboard load, every PromQL
expression parses with Prometheus' grammar (``promql-parser``), and every metric they read is
one Slipway exports — the names come from a live scrape of ``/metrics`` after each figure was
produced by the code that produces it — or, for the GPU rules and the dashboard's GPU row, one of
the DCGM exporter's series or a series the GPU rules record. The GPU alerts' thresholds and
durations are the portal's alert defaults (``SLIPWAY_ALERT_*``). promtool's own checks and unit
tests of the rules: tests/deploy/test_promtool.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import promql_parser as pp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import core.backend
from cluster.errors import Invalid
from portal import settings as defaults
from quotas.admission import admit
from quotas.decide import ResourceRequest
from quotas.demo import seed_team_quotas
from tests.factories import make_team
from workloads.tasks import reconcile_cluster

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "slipway-rules.yaml"
GPU_RULES = DEPLOY / "prometheus" / "gpu-rules.yaml"
DASHBOARD = DEPLOY / "grafana" / "slipway-dashboard.json"
#: The DCGM exporter's series the GPU rules read (cluster/metrics.py names them too); not Slipway's.
DCGM_SERIES = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
               "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"}

# The PrometheusRule CRD's schema (prometheus-operator, monitoring.coreos.com/v1), the part
# these rules use, strict: an unknown field (a typo the API server would prune) fails.
DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
RULE = {
    "type": "object",
    "required": ["expr"],
    "additionalProperties": False,
    "properties": {
        "alert": {"type": "string", "minLength": 1},
        "record": {"type": "string", "minLength": 1},
        "expr": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "integer"}]},
        "for": {"type": "string", "pattern": DURATION},
        "keep_firing_for": {"type": "string", "pattern": DURATION, "minLength": 1},
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    },
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
}
PROMETHEUS_RULE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object", "required": ["name", "namespace"],
                     "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "labels": STRING_MAP}},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"groups": {"type": "array", "minItems": 1, "items": {
                "type": "object",
                "required": ["name", "rules"],
                "additionalProperties": False,
                "properties": {"name": {"type": "string", "minLength": 1},
                               "interval": {"type": "string", "pattern": DURATION},
                               "rules": {"type": "array", "minItems": 1, "items": RULE}},
            }}},
        },
    },
}

#: Grafana's variables, replaced by values of their kind before a query is parsed.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "6h", "$team": ".*", "$workload": ".*"}


def rule_documents(path: Path = RULES) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def rules(path: Path) -> list[dict[str, Any]]:
    return [rule for doc in rule_documents(path) for group in doc["spec"]["groups"] for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    """The alerting rules of both files."""
    return [rule for path in (RULES, GPU_RULES) for rule in rules(path) if "alert" in rule]


def recorded() -> set[str]:
    """The series the GPU rules record."""
    return {rule["record"] for rule in rules(GPU_RULES) if "record" in rule}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_queries() -> list[str]:
    queries = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            query = target["expr"]
            for variable, sample in GRAFANA_VARIABLES.items():
                query = query.replace(variable, sample)
            queries.append(query)
    return queries


def metric_names(query: str) -> set[str]:
    names: set[str] = set()

    def visit(node: pp.Expr) -> None:
        if isinstance(node, pp.VectorSelector):
            names.add(node.name)

    pp.walk(pp.parse(query), pre_visit=visit)
    return names


@pytest.fixture
def exported(client, flavors, staff, fake_backend, settings, django_capture_on_commit_callbacks) -> dict[str, set[str]]:
    """``{family name: its sample names}`` of a live scrape, once every figure has a value."""
    team = make_team("vision")
    seed_team_quotas(team, {"a100-80gb": 2}, monthly_budget=1000)
    with django_capture_on_commit_callbacks(execute=True):  # admissions count as their transactions commit
        admit(team, ResourceRequest("a100-80gb", 2, 1), "run:1")
        admit(team, ResourceRequest("a100-80gb", 1, 1), "run:2")  # queued
    assert reconcile_cluster("default").startswith("observed=")
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    with pytest.raises(Invalid):
        core.backend.backend_for(core.backend.BackendSpec("default")).apply([{"apiVersion": "v1", "metadata": {"name": "x"}}])
    response = client.get("/metrics")
    assert response.status_code == 200
    return {family.name: {sample.name for sample in family.samples}
            for family in text_string_to_metric_families(response.content.decode())
            if family.name.startswith("slipway_")}


# -- the rules -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [RULES, GPU_RULES], ids=lambda path: path.name)
def test_the_rules_are_a_valid_prometheus_rule(path):
    [doc] = rule_documents(path)
    jsonschema.validate(doc, PROMETHEUS_RULE)


def test_the_alerts_are_named_once_and_page_for_what_they_must():
    names = [rule["alert"] for rule in alerts()]
    assert len(names) == len(set(names))
    # The four situations the platform admins are paged for, at least, and the three GPU alerts.
    assert {"SlipwayQueueStuck", "SlipwayReconcileLagging", "SlipwayClusterLost", "SlipwayBudgetBurning",
            "SlipwayGPUIdle", "SlipwayGPUMemoryNearlyFull", "SlipwayGPUHot"} <= set(names)


def comparison(expr: str) -> tuple[str, float]:
    """``(operator, number)`` of an alert's top-level ``<figure> <op> <number>``."""
    node = pp.parse(expr)
    assert isinstance(node, pp.BinaryExpr) and isinstance(node.rhs, pp.NumberLiteral), expr
    return str(node.op), node.rhs.val


def test_the_gpu_alerts_have_the_portals_thresholds_and_durations():
    """One set of defaults: what the portal's alerts apply (SLIPWAY_ALERT_*, as shipped) is what Prometheus alerts on."""
    by_name = {rule["alert"]: rule for rule in rules(GPU_RULES) if "alert" in rule}
    expected = {
        "SlipwayGPUIdle": ("<", defaults.SLIPWAY_ALERT_IDLE_UTIL_PCT, defaults.SLIPWAY_ALERT_IDLE_MINUTES),
        "SlipwayGPUMemoryNearlyFull": (">", defaults.SLIPWAY_ALERT_MEMORY_PCT / 100, defaults.SLIPWAY_ALERT_MEMORY_MINUTES),
        "SlipwayGPUHot": (">", defaults.SLIPWAY_ALERT_TEMP_C, defaults.SLIPWAY_ALERT_TEMP_MINUTES),
    }
    for name, (op, threshold, minutes) in expected.items():
        rule = by_name[name]
        assert comparison(rule["expr"]) == (op, threshold), name
        assert (rule["for"], rule["keep_firing_for"]) == (f"{minutes}m", f"{defaults.SLIPWAY_ALERT_CLEAR_MINUTES}m")


def test_the_validator_refuses_a_misspelt_field():
    [doc] = rule_documents(RULES)
    doc["spec"]["groups"][0]["rules"][0]["fro"] = "5m"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, PROMETHEUS_RULE)


@pytest.mark.parametrize("rule", alerts(), ids=lambda rule: rule["alert"])
def test_each_alert_parses_says_what_happened_and_has_a_severity(rule):
    assert metric_names(rule["expr"])  # parses, and reads at least one metric
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    assert re.fullmatch(DURATION, rule["for"])


def test_the_parser_refuses_what_prometheus_would():
    with pytest.raises(ValueError):
        metric_names("max by (team) (slipway_queue_depth > ")


# -- the dashboard ------------------------------------------------------------------------------


def test_the_dashboard_is_an_importable_grafana_dashboard():
    board = dashboard()
    assert board["title"] == "Slipway" and board["uid"]
    variables = {variable["name"] for variable in board["templating"]["list"]}
    assert variables == {"datasource", "team", "workload"}
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["title"] and panel["description"] and panel["targets"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs))
        # Only the dashboard's own variables and Grafana's built-ins.
        for target in panel["targets"]:
            for used in re.findall(r"\$(\w+)", target["expr"]):
                assert f"${used}" in GRAFANA_VARIABLES or used in variables, used


@pytest.mark.parametrize("query", dashboard_queries())
def test_each_dashboard_query_parses(query):
    assert metric_names(query)


# -- against what /metrics really exports ----------------------------------------------------------


def test_the_gpu_rules_read_only_dcgm_series_and_the_dashboards_gpu_row_what_they_record():
    gpu_rules = rules(GPU_RULES)
    read = set().union(*(metric_names(rule["expr"]) for rule in gpu_rules))
    assert read <= DCGM_SERIES | recorded(), read - DCGM_SERIES - recorded()
    assert read >= DCGM_SERIES  # each of the exporter's five figures (and MIG's) is used
    shown = {name for query in dashboard_queries() for name in metric_names(query)}
    assert recorded() <= shown  # the GPU row draws every recorded figure


@pytest.mark.django_db
def test_the_rules_and_the_dashboard_read_only_figures_slipway_exports(exported):
    samples = set().union(*exported.values())
    used = set().union(*(metric_names(rule["expr"]) for rule in alerts()),
                       *(metric_names(query) for query in dashboard_queries()))
    used -= DCGM_SERIES | recorded()  # the DCGM exporter's, and what the GPU rules make of them
    assert used and used <= samples, used - samples
    # ... and the dashboard shows every figure.
    shown = {name for query in dashboard_queries() for name in metric_names(query)}
    assert not [family for family, names in exported.items() if not names & shown]
