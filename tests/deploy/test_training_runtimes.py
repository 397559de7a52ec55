"""deploy/training-runtimes/: the ClusterTrainingRuntimes Slipway's TrainJobs refer to, generated (``make runtimes``)
and valid against Kubeflow Trainer v2.3's CRD, their pod templates against Kubernetes' own schema."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from django.core.management import call_command

from cluster.training import FRAMEWORKS, ML_POLICIES
from tests.cluster import crd_schema
from tests.golden import K8S_VERSIONS

RUNTIMES = Path(__file__).resolve().parents[2] / "deploy" / "training-runtimes"
#: The file of each gang scheduler word the command takes, and the podGroupPolicy its runtimes hold.
FILES = {"scheduler-plugins": ("coscheduling.yaml", "coscheduling"), "volcano": ("volcano.yaml", "volcano"),
         "none": ("none.yaml", None)}


def _printed(gang_scheduler: str) -> str:
    out = StringIO()
    call_command("training_runtimes", gang_scheduler=gang_scheduler, stdout=out)
    return out.getvalue()


def _documents() -> list[tuple[str, dict[str, Any]]]:
    return [(f"{path.name}:{doc['metadata']['name']}", doc) for path in sorted(RUNTIMES.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text())]


DOCUMENTS = _documents()


@pytest.mark.parametrize("gang_scheduler", sorted(FILES))
def test_each_file_is_what_the_command_prints(gang_scheduler: str) -> None:
    filename, _policy = FILES[gang_scheduler]
    assert (RUNTIMES / filename).read_text() == _printed(gang_scheduler), \
        f"deploy/training-runtimes/{filename} is out of date: run `make runtimes`"


def test_there_is_a_file_per_gang_scheduler_and_nothing_else() -> None:
    assert sorted(p.name for p in RUNTIMES.iterdir()) == sorted(name for name, _ in FILES.values())


@pytest.mark.parametrize("gang_scheduler", sorted(FILES))
def test_each_file_has_slipways_runtime_of_every_framework_with_its_gang_policy(gang_scheduler: str) -> None:
    filename, policy = FILES[gang_scheduler]
    runtimes = list(yaml.safe_load_all((RUNTIMES / filename).read_text()))
    assert [r["metadata"]["name"] for r in runtimes] == [f"slipway-{f}" for f in FRAMEWORKS]
    assert {tuple(r["spec"].get("podGroupPolicy", {})) for r in runtimes} == {(policy,) if policy else ()}


@pytest.mark.parametrize(("label", "doc"), DOCUMENTS, ids=[label for label, _ in DOCUMENTS])
def test_every_runtime_is_valid_against_the_crd(label: str, doc: dict[str, Any]) -> None:
    assert (doc["apiVersion"], doc["kind"]) == ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime")
    assert "namespace" not in doc["metadata"]  # cluster-scoped
    assert crd_schema.errors("clustertrainingruntime", doc) == []


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(("label", "doc"), DOCUMENTS, ids=[label for label, _ in DOCUMENTS])
def test_every_runtimes_pod_templates_are_valid_in_strict_mode(label: str, doc: dict[str, Any], version: str) -> None:
    for job in doc["spec"]["template"]["spec"]["replicatedJobs"]:
        template = {"apiVersion": "v1", "kind": "PodTemplate",
                    "metadata": {"name": f"{doc['metadata']['name']}-{job['name']}", "namespace": "default"},
                    "template": job["template"]["spec"]["template"]}
        kubernetes_validate.validate(template, version, strict=True)


#: The CEL rule of the CRD's ``mlPolicy`` (the strict walker runs no CEL): at most one framework's policy.
ONE_POLICY_RULE = ("[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)]"
                   ".filter(x, x).size() <= 1")


def test_the_crds_ml_policy_rule_is_the_one_checked_here() -> None:
    """So an upstream change of the rule (a new framework's policy) fails here rather than on a cluster."""
    ml_policy = crd_schema.fixture("clustertrainingruntime")["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["mlPolicy"]
    assert [rule["rule"] for rule in ml_policy["x-kubernetes-validations"]] == [ONE_POLICY_RULE]
    assert set(ML_POLICIES) == set(ml_policy["properties"]) - {"numNodes"}


@pytest.mark.parametrize(("label", "doc"), DOCUMENTS, ids=[label for label, _ in DOCUMENTS])
def test_every_runtime_names_exactly_one_ml_policy(label: str, doc: dict[str, Any]) -> None:
    # Exactly one: the rule allows none, but a runtime without one would say no framework to discovery.
    assert len([name for name in ML_POLICIES if name in doc["spec"]["mlPolicy"]]) == 1
