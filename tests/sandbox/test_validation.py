"""The sandbox's API server: it accepts the builders' manifests and rejects malformed ones."""

from __future__ import annotations

import copy

import pytest

from cluster.errors import Invalid, NotFound
from cluster.manifests import labels
from cluster.manifests.provisioning import build_provisioning, pod_sets
from sandbox.models import SimObject, SimPod
from tests.sandbox.helpers import NS, at, endpoint, ref, team_objects, training
from workloads.registry import resource_kinds


def test_it_accepts_every_kind_the_builders_render(backend):
    stored = backend.apply(team_objects((("nvidia.com/gpu", 8),)), resource_kinds(), now=at(0))
    stored += backend.apply(training("run-1"), resource_kinds(), now=at(0))
    stored += backend.apply(training("run-2", workers=3), resource_kinds(), now=at(0))
    stored += backend.apply(endpoint("ep-1", max_replicas=3), resource_kinds(), now=at(0))
    kinds = sorted(obj["kind"] for obj in stored)
    assert kinds == ["Deployment", "Job", "LimitRange", "Namespace", "NetworkPolicy", "NetworkPolicy", "PyTorchJob",
                     "ResourceQuota", "ScaledObject", "Service"]
    job = next(obj for obj in stored if obj["kind"] == "Job")
    assert job["metadata"]["uid"] and job["metadata"]["creationTimestamp"] == "2026-11-22T10:00:00Z"
    assert job["metadata"]["labels"]["slipway.dev/workload"] == "run-1"


def test_it_is_idempotent_and_updates_in_place(backend):
    backend.apply(team_objects(), resource_kinds(), now=at(0))
    first = backend.apply(endpoint("ep-1", max_replicas=2), resource_kinds(), now=at(0))
    again = backend.apply(endpoint("ep-1", max_replicas=2), resource_kinds(), now=at(5))
    assert [o["metadata"]["uid"] for o in first] == [o["metadata"]["uid"] for o in again]
    changed = backend.apply(endpoint("ep-1", max_replicas=4), resource_kinds(), now=at(10))
    scaled = next(o for o in changed if o["kind"] == "ScaledObject")
    assert scaled["spec"]["maxReplicaCount"] == 4
    assert scaled["metadata"]["generation"] == 2
    assert SimObject.objects.filter(workload="ep-1").count() == 3


def test_it_rejects_a_changed_job_template_as_immutable(backend):
    backend.apply(team_objects() + training("run-1"), resource_kinds(), now=at(0))
    with pytest.raises(Invalid, match=r'Job.batch "run-1" is invalid: spec.template: .*field is immutable'):
        backend.apply(training("run-1", gpus=2), resource_kinds(), now=at(1))


def claim(storage: str, storage_class: str | None = None) -> dict:
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "spec": spec, "metadata": {
        "name": "run-1-checkpoints", "namespace": "team-ml",
        "labels": {"app.kubernetes.io/managed-by": "slipway", "slipway.dev/workload": "run-1"}}}


def test_a_claim_applied_again_may_grow_but_not_shrink_or_change_otherwise(backend):
    backend.apply([*team_objects(), claim("50Gi")], resource_kinds(), now=at(0))
    backend.apply([claim("50Gi")], resource_kinds(), now=at(1))  # unchanged: fine
    with pytest.raises(Invalid, match=r'PersistentVolumeClaim "run-1-checkpoints" is invalid: spec.resources.requests'
                                      r'.storage: Forbidden: field can not be less than previous value'):
        backend.apply([claim("20Gi")], resource_kinds(), now=at(2))
    with pytest.raises(Invalid, match=r"spec: Forbidden: spec is immutable after creation"):
        backend.apply([claim("50Gi", "fast-ssd")], resource_kinds(), now=at(3))
    backend.apply([claim("60Gi")], resource_kinds(), now=at(4))  # an expansion
    stored = SimObject.objects.get(resource_kind="PersistentVolumeClaim")
    assert stored.manifest["spec"]["resources"]["requests"]["storage"] == "60Gi"


def test_it_requires_the_namespace_to_exist(backend):
    with pytest.raises(NotFound, match='namespaces "team-ml" not found'):
        backend.apply(training("run-1"), resource_kinds(), now=at(0))
    assert SimObject.objects.count() == 0


def _job() -> dict:
    return copy.deepcopy(training("run-1")[0])


def _broken(mutate) -> dict:
    obj = _job()
    mutate(obj)
    return obj


def _container(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: o.pop("apiVersion"), "Object 'apiVersion' is missing"),
        (lambda o: o.pop("kind"), "Object 'Kind' is missing"),
        (lambda o: o["metadata"].pop("name"), 'Job.batch "" is invalid: metadata.name: Required value'),
        (lambda o: o["metadata"].update(name="Run_1"), 'Job.batch "Run_1" is invalid: metadata.name: Invalid value'),
        (lambda o: o.update(kind="CronTab"), 'no matches for kind "CronTab" in version "batch/v1"'),
        (lambda o: o.update(apiVersion="batch/v2"), 'no matches for kind "Job" in version "batch/v2"'),
        (lambda o: _container(o)["resources"]["limits"].update({"nvidia.com/gpu": "1.5"}),
         r"containers\[0\].resources.limits\[nvidia.com/gpu\]: Invalid value: \"1.5\": must be an integer"),
        (lambda o: _container(o)["resources"]["requests"].update({"nvidia.com/gpu": "2"}),
         r"containers\[0\].resources.requests: Invalid value: \"2\": must be equal to nvidia.com/gpu limit of 1"),
        (lambda o: _container(o)["resources"]["limits"].pop("nvidia.com/gpu"),
         "Limit must be set for non overcommitable resources"),
        (lambda o: o["spec"]["template"]["spec"].update(containers=[]),
         "spec.template.spec.containers: Required value"),
        (lambda o: _container(o).pop("image"), r"spec.template.spec.containers\[0\].image: Required value"),
        (lambda o: _container(o)["resources"]["requests"].update(cpu="lots"),
         r"requests\[cpu\]: Invalid value: \"lots\": quantities must match"),
        (lambda o: o["spec"]["template"]["spec"].update(restartPolicy="Always"),
         'spec.template.spec.restartPolicy: Unsupported value: "Always"'),
        (lambda o: o["metadata"]["labels"].update({"slipway.dev/team": "not a label!"}),
         "metadata.labels: Invalid value"),
    ],
)
def test_it_rejects_malformed_manifests_and_applies_nothing_of_the_batch(backend, mutate, message):
    backend.apply(team_objects(), resource_kinds(), now=at(0))
    before = SimObject.objects.count()
    good = endpoint("ep-1")
    with pytest.raises(Invalid, match=message):
        backend.apply([*good, _broken(mutate)], resource_kinds(), now=at(1))
    assert SimObject.objects.count() == before  # the valid objects before it were not applied either


def test_it_rejects_a_deployment_whose_selector_misses_its_pods(backend):
    deployment = endpoint("ep-1")[0]
    deployment["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(Invalid, match="`selector` does not match template `labels`"):
        backend.apply([deployment], resource_kinds(), now=at(0))


def test_it_rejects_a_pytorchjob_without_a_pytorch_container(backend):
    job = training("run-2", workers=2)[0]
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["containers"][0]["name"] = "trainer"
    with pytest.raises(Invalid, match="There is no container named pytorch"):
        backend.apply([job], resource_kinds(), now=at(0))


def test_it_rejects_a_scaledobject_with_min_above_max(backend):
    scaled = endpoint("ep-1")[2]
    scaled["spec"]["minReplicaCount"] = 5
    with pytest.raises(Invalid, match="MinReplicaCount must be less than or equal to MaxReplicaCount"):
        backend.apply([scaled], resource_kinds(), now=at(0))


def test_it_deletes_a_workload_and_reports_how_many(backend):
    backend.apply(team_objects() + endpoint("ep-1"), resource_kinds(), now=at(0))
    backend.tick(at(0))
    assert backend.delete(ref("ep-1"), resource_kinds()) == 3
    assert SimObject.objects.filter(workload="ep-1").count() == 0
    assert SimPod.objects.count() == 0
    assert backend.observe(resource_kinds()) == []
    assert SimObject.objects.filter(resource_kind="ResourceQuota").exists()  # the team's objects are not the endpoint's
    assert backend.delete(ref("ep-1"), resource_kinds()) == 0  # already gone is not an error


def test_it_serves_the_workload_kinds_their_registrations_declare(backend):
    from tests.workloads.tinykind.kind import build_notebook
    from workloads.registry import kind_for

    backend.apply(team_objects(), now=at(0))  # a team's namespace objects are the server's own
    notebook = build_notebook("nb-1", "team-ml", "ml", 1)
    for undeclared, resources in ((training("run-1"), ()), ([notebook], kind_for("run").resources)):
        with pytest.raises(Invalid, match="no matches for kind"):
            backend.apply(undeclared, resources, now=at(0))
    assert not SimObject.objects.filter(workload__in=("run-1", "nb-1")).exists()
    [stored] = backend.apply([notebook], kind_for("nb").resources, now=at(0))
    assert (stored["kind"], stored["metadata"]["namespace"], stored["spec"]) == ("Notebook", "team-ml", {"gpus": 1})


def test_it_reports_storage_faults_as_transient(backend):
    from django.db import OperationalError, connection

    from cluster.errors import Transient

    def locked(execute, sql, params, many, context):
        # The database refuses the sandbox's tables, as SQLite does while another writer holds it
        # (Django's execute wrappers see every statement; savepoints and the like still run).
        if '"sandbox_' in sql:
            raise OperationalError("database is locked")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(locked), pytest.raises(Transient, match="database is locked"):
        backend.apply(team_objects(), resource_kinds(), now=at(0))


def test_it_takes_an_atomic_pools_pod_templates_and_checks_them_as_pods(backend):
    """A PodTemplate's body is its ``template`` (it has no spec): stored when its pod would be, refused when not."""
    backend.apply(team_objects(), resource_kinds(), now=at(0))
    run = training("run-2", workers=2)
    objects = build_provisioning("run-2", NS, labels("ml", "run-2"), pod_sets(run))
    stored = backend.apply(objects, resource_kinds(), now=at(0))
    assert [obj["kind"] for obj in stored] == ["PodTemplate", "ProvisioningRequest"]
    assert stored[0]["template"] == objects[0]["template"]
    broken = copy.deepcopy(objects[0])
    broken["template"]["spec"]["containers"][0]["image"] = ""
    with pytest.raises(Invalid, match=r"template\.spec\.containers\[0\]\.image: Required value"):
        backend.apply([broken], resource_kinds(), now=at(0))
